"""A training progress bar: one updating line with the step, step rate and ETA (tqdm), drawn only on an
interactive terminal or in a Jupyter notebook (a widget there, with ipywidgets). When the output is a file
or a pipe (batch jobs, CI, ``> train.log``) it draws nothing: the trainer's plain log lines are the record.

    bar = Progress(total=numb_steps, start=start_step)
    bar.update(step, rmse=1.2e-1)        # cheap; call every step or every few steps (Python numbers only)
    bar.write("a log line")              # prints above the bar (or plainly when there is none)
    bar.close()

``rate`` (steps/s) and ``eta_s`` are available either way. ``JAXMD_DP_PROGRESS=0`` turns the bar off,
``=1`` forces it on.
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys
import time
from typing import TextIO

ENV = "JAXMD_DP_PROGRESS"


def in_notebook() -> bool:
    """True inside a Jupyter kernel (output goes to a notebook front end, not a terminal)."""
    ipy = sys.modules.get("IPython")
    if ipy is None:
        return False
    try:
        shell = ipy.get_ipython()
    except Exception:
        return False
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def interactive(stream: TextIO) -> bool:
    """Should a bar be drawn on ``stream``? ``$JAXMD_DP_PROGRESS`` decides when set, else: a TTY or a notebook."""
    env = os.environ.get(ENV, "").strip().lower()
    if env in ("0", "false", "no", "off"):
        return False
    if env in ("1", "true", "yes", "on"):
        return True
    if in_notebook():
        return True
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def format_seconds(s: float) -> str:
    """``1:02:03`` style, ``?`` when unknown."""
    if not math.isfinite(s) or s < 0:
        return "?"
    s = int(round(s))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m:02d}:{sec:02d}"


class Progress:
    """Progress of steps ``start`` → ``total``; a tqdm bar on interactive outputs, silent otherwise."""

    def __init__(
        self, total: int, start: int = 0, stream: TextIO | None = None, desc: str = "train", enabled: bool | None = None
    ):
        self.total, self.start, self.step = int(total), int(start), int(start)
        self.stream = sys.stderr if stream is None else stream
        self._t0 = time.perf_counter()
        self._bar = None
        if enabled is None:
            enabled = interactive(self.stream)
        if enabled:
            self._bar = self._make_bar(desc)

    def _make_bar(self, desc: str):
        try:
            if in_notebook():
                if importlib.util.find_spec("ipywidgets") is None:
                    return None  # a text bar redrawn in a notebook's output only clutters it: no bar
                from tqdm.auto import tqdm  # a widget
            else:
                from tqdm import tqdm
        except ImportError:  # no tqdm: no bar (the log lines still tell the progress)
            return None
        return tqdm(
            total=self.total,
            initial=self.start,
            desc=desc,
            unit="step",
            file=self.stream,
            dynamic_ncols=True,
            smoothing=0.1,
            mininterval=0.5,
            leave=True,
        )

    @property
    def active(self) -> bool:
        """True when a bar is drawn."""
        return self._bar is not None

    @property
    def rate(self) -> float:
        """Mean steps per second since the start (0 before the first update)."""
        dt = time.perf_counter() - self._t0
        return (self.step - self.start) / dt if dt > 0 and self.step > self.start else 0.0

    @property
    def eta_s(self) -> float:
        """Seconds left at the mean rate (inf before the first update)."""
        r = self.rate
        return (self.total - self.step) / r if r > 0 else math.inf

    def update(self, step: int, **postfix) -> None:
        """Now at ``step`` (absolute); ``postfix`` values (numbers or strings) are shown after the bar."""
        step = int(step)
        if self._bar is not None:
            if step > self.step:
                self._bar.update(step - self.step)
            if postfix:
                self._bar.set_postfix(
                    {k: (f"{v:.3g}" if isinstance(v, float) else v) for k, v in postfix.items()}, refresh=False
                )
        self.step = max(self.step, step)

    def write(self, msg: str, file: TextIO | None = None) -> None:
        """Print a line without breaking the bar (above it; in a notebook, whose bar is a widget, to stdout);
        plain ``print`` when no bar is drawn."""
        if self._bar is not None:
            from tqdm import tqdm

            tqdm.write(msg, file=file or (sys.stdout if in_notebook() else self.stream))
        else:
            print(msg, file=file or sys.stdout, flush=True)

    def close(self) -> None:
        """Remove the bar's hold on the terminal (idempotent)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
