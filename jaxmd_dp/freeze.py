"""``python -m jaxmd_dp.freeze`` (also ``jaxmd-dp freeze``): :mod:`jaxmd_dp.cli.freeze`."""

if __name__ == "__main__":
    from jaxmd_dp.cli.freeze import main
    from jaxmd_dp.cli.util import run_main

    run_main(main)
