"""``python -m jaxmd_dp.cli``: the ``jaxmd-dp`` command."""

if __name__ == "__main__":
    import sys

    from jaxmd_dp.cli.main import main

    sys.exit(main())
