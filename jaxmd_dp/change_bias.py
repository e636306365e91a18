"""``python -m jaxmd_dp.change_bias`` (also ``jaxmd-dp change-bias``): :mod:`jaxmd_dp.cli.change_bias`."""

if __name__ == "__main__":
    from jaxmd_dp.cli.change_bias import main
    from jaxmd_dp.cli.util import run_main

    run_main(main)
