"""``python -m jaxmd_dp.neighbor_stat`` (also ``jaxmd-dp neighbor-stat``): :mod:`jaxmd_dp.cli.neighbor_stat`."""

if __name__ == "__main__":
    from jaxmd_dp.cli.neighbor_stat import main
    from jaxmd_dp.cli.util import run_main

    run_main(main)
