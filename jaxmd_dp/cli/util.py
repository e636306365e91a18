"""What every command-line entry point shares: user errors as one line and exit status 1."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from jaxmd_dp.errors import InputError


def run_cli(main: Callable[[list[str] | None], int], argv: list[str] | None = None) -> int:
    """Run ``main``; an :class:`InputError` prints ``error: <message>`` and returns 1 (no traceback
    unless ``--debug`` is on the command line or ``JAXMD_DP_DEBUG=1``)."""
    argv = sys.argv[1:] if argv is None else argv
    debug = "--debug" in argv or os.environ.get("JAXMD_DP_DEBUG") == "1"
    argv = [a for a in argv if a != "--debug"]
    try:
        return main(argv) or 0
    except InputError as e:
        if debug:
            raise
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def run_main(main: Callable[[list[str] | None], int], fast_exit: bool = False):
    """Run a tool's ``main`` on ``sys.argv[1:]`` (:func:`run_cli`) and exit with its status;
    ``fast_exit``: through :func:`exit_now`."""
    code = run_cli(main)
    if fast_exit:
        exit_now(code)
    sys.exit(code)


def exit_now(code: int):
    """Exit with ``code`` without the interpreter's teardown when that is safe: after a training run,
    freeing every module and XLA object is a noticeable wait. stdout and stderr are flushed first; every file the
    commands write is closed by then (checkpoints are written synchronously, log lines opened per line).
    Under MPI or ``jax.distributed`` the normal exit runs, so their finalisers do."""
    sys.stdout.flush()
    sys.stderr.flush()
    if "mpi4py" in sys.modules:
        sys.exit(code)
    if "jax" in sys.modules:
        import jax

        if jax.distributed.is_initialized():
            sys.exit(code)
    os._exit(code)
