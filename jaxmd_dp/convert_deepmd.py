"""``python -m jaxmd_dp.convert_deepmd`` (also ``jaxmd-dp convert-deepmd``): :mod:`jaxmd_dp.cli.convert_deepmd`."""

if __name__ == "__main__":
    from jaxmd_dp.cli.convert_deepmd import main
    from jaxmd_dp.cli.util import run_main

    run_main(main)
