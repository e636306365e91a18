"""The ``jaxmd-dp`` command: one entry point for every tool (as DeePMD-kit's ``dp``).

    jaxmd-dp train CONFIG [key=value ...] [-o DIR]      train (dp train)
    jaxmd-dp test -m MODEL -s SYSTEM                    test a model on labelled data (dp test)
    jaxmd-dp freeze -m CKPT -o model.jaxdp              one self-contained model file (dp freeze)
    jaxmd-dp plot lcurve.out [-o lcurve.png]            plot the learning curve
    jaxmd-dp neighbor-stat -s SYSTEMS -r RCUT -t TYPES  neighbour statistics and sel (dp neighbor-stat)
    jaxmd-dp convert-deepmd PARAMS INPUT -o OUT         import a DeePMD-kit PyTorch model
    jaxmd-dp change-bias MODEL -s SYSTEMS [-o OUT]      change a model's energy bias on data (dp change-bias)

``jaxmd-dp --version`` also says whether XLA's CPU buffers get huge pages (:mod:`jaxmd_dp.runtime.hugepages`).
``jaxmd-dp COMMAND -h`` shows a command's options. ``--debug`` anywhere shows tracebacks of user errors.
"""

from __future__ import annotations

import importlib
import sys

from jaxmd_dp.cli.util import run_cli
from jaxmd_dp.version import __version__

#: command → (module with ``main(argv)``, one-line summary)
COMMANDS = {
    "train": ("jaxmd_dp.cli.train", "train a model (dp train)"),
    "test": ("jaxmd_dp.cli.test", "test a model on labelled data (dp test)"),
    "freeze": ("jaxmd_dp.cli.freeze", "freeze a checkpoint into one self-contained model file (dp freeze)"),
    "plot": ("jaxmd_dp.cli.plot", "plot a learning curve (lcurve.out) to PNG"),
    "neighbor-stat": ("jaxmd_dp.cli.neighbor_stat", "neighbour statistics and suggested sel (dp neighbor-stat)"),
    "convert-deepmd": ("jaxmd_dp.cli.convert_deepmd", "import a DeePMD-kit model (.dp, .yaml, a PyTorch state dict)"),
    "change-bias": ("jaxmd_dp.cli.change_bias", "change a model's energy bias on data (dp change-bias)"),
}
ALIASES = {"neighbor_stat": "neighbor-stat", "convert_deepmd": "convert-deepmd", "change_bias": "change-bias"}


def usage() -> str:
    w = max(map(len, COMMANDS))
    lines = [f"usage: jaxmd-dp COMMAND [options]   (jaxmd_dp {__version__})", "", "commands:"]
    lines += [f"  {name:<{w}s}  {summary}" for name, (_, summary) in COMMANDS.items()]
    lines += ["", "jaxmd-dp COMMAND -h shows a command's options; --debug shows tracebacks of user errors."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Dispatch ``argv`` (default ``sys.argv[1:]``) to a command's ``main``; returns the exit status
    (``--help`` and argparse errors included, so it can be called in-process)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0 if argv else 2
    if argv[0] in ("-V", "--version"):
        from jaxmd_dp.runtime.hugepages import buffers_status, status

        print(
            f"jaxmd_dp {__version__}\nhuge pages for XLA's CPU buffers: {status()}\n"
            f"freed CPU buffers: {buffers_status()}"
        )
        return 0
    name = ALIASES.get(argv[0], argv[0])
    if name not in COMMANDS:
        print(f"error: unknown command {argv[0]!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    try:
        return run_cli(module.main, argv[1:])
    except SystemExit as e:  # argparse: --help (0) and usage errors (2)
        if isinstance(e.code, str):
            print(e.code, file=sys.stderr)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)


if __name__ == "__main__":
    sys.exit(main())
