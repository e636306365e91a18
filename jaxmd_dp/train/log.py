"""The training log: console lines filtered by ``--log-level``, and all of them also in ``-l/--log-path``.

Levels are DeePMD-kit's (names or numbers): DEBUG = 3, INFO = 2, WARNING = 1, ERROR = 0. A line's level
is read from its prefix: ``warning:`` → WARNING, ``error:`` → ERROR, anything else INFO.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from jaxmd_dp.errors import InputError

LEVELS = {"DEBUG": 3, "INFO": 2, "WARNING": 1, "ERROR": 0}
_NUMBERS = {str(v): k for k, v in LEVELS.items()}


def parse_level(level: str) -> int:
    """'info' / 'INFO' / '2' → 2. Raises InputError naming the option on anything else."""
    name = _NUMBERS.get(str(level), str(level).upper())
    if name not in LEVELS:
        raise InputError(f"--log-level {level!r}: expected one of DEBUG, INFO, WARNING, ERROR (or 3, 2, 1, 0)")
    return LEVELS[name]


def line_level(msg: str) -> int:
    head = msg.lstrip().lower()
    return 0 if head.startswith("error") else 1 if head.startswith("warning") else 2


class Logger:
    """log(msg): to ``console`` when the line's level is within ``level``; every line also appended to
    ``path`` (opened per line, so nothing is lost on a crash). ``console`` may be swapped (the trainer
    routes it through its progress bar)."""

    def __init__(self, level: str = "INFO", path: str | Path | None = None, console: Callable[[str], None] = print):
        self.limit = parse_level(level)
        self.console = console
        self.path = None if path is None else Path(path)
        if self.path is not None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self.path.open("a").close()
            except OSError as e:
                raise InputError(f"-l/--log-path {self.path}: cannot write ({e.strerror})") from None

    def __call__(self, msg) -> None:
        msg = str(msg)
        if line_level(msg) <= self.limit:
            self.console(msg)
        if self.path is not None:
            with self.path.open("a") as f:
                f.write(msg + "\n")
