"""``python -m jaxmd_dp.freeze``: the command-line tool :mod:`jaxmd_dp.cli.freeze` (also ``jaxmd-dp freeze``)."""

if __name__ == "__main__":
    from jaxmd_dp.cli.freeze import main
    from jaxmd_dp.cli.util import run_main

    run_main(main)
