"""``python -m jaxmd_dp.test`` (also ``jaxmd-dp test``): :mod:`jaxmd_dp.cli.test`."""

if __name__ == "__main__":
    from jaxmd_dp.cli.test import main
    from jaxmd_dp.cli.util import run_main

    run_main(main)
