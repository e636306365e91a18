"""``python -m jaxmd_dp.train``: the command-line tool :mod:`jaxmd_dp.cli.train` (also ``jaxmd-dp train``)."""

if __name__ == "__main__":
    from jaxmd_dp.cli.train import main
    from jaxmd_dp.cli.util import run_main

    run_main(main, fast_exit=True)
