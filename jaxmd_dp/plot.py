"""``python -m jaxmd_dp.plot`` (also ``jaxmd-dp plot``): :mod:`jaxmd_dp.cli.plot`."""

if __name__ == "__main__":
    from jaxmd_dp.cli.plot import main
    from jaxmd_dp.cli.util import run_main

    run_main(main)
