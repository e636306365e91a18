"""What every command-line entry point shares: user errors as one line and exit status 1."""

from __future__ import annotations

import os
import sys
from typing import Callable

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
