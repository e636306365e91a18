"""``python -m jaxmd_dp.test``: the command-line tool :mod:`jaxmd_dp.cli.test` (also ``jaxmd-dp test``)."""

if __name__ == "__main__":
    from jaxmd_dp.cli.test import main
    from jaxmd_dp.cli.util import run_main

    run_main(main)
