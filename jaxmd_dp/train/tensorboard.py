"""TensorBoard scalars of a training run (``training.tensorboard: true``), written with tensorboardX
(no TensorFlow or PyTorch needed; ``pip install 'jaxmd_dp[tb]'``). View with
``tensorboard --logdir <output>/<training.tensorboard_log_dir>``.

    tb = TBWriter(logdir, purge_step=start + 1)   # purge: a restart hides what the old run wrote after start
    tb.metrics(step, train, valid, lr=lr, step_time=dt)   # or tb.scalars(step, {"tag": value, ...})
    tb.close()

Tags: ``<quantity>/trn`` and ``<quantity>/val`` for the learning-curve quantities (``rmse``, ``rmse_e``,
``rmse_f``, ``rmse_v``; TensorBoard groups each quantity's two curves), ``lr``, ``step_time`` (s per step).
Non-finite values (NaN: no labels of that kind) are left out.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

from jaxmd_dp.errors import InputError


class TBWriter:
    """Scalars into a TensorBoard event file under ``logdir`` (created)."""

    def __init__(self, logdir: str | os.PathLike, purge_step: int | None = None, flush_secs: int = 30):
        try:
            from tensorboardX import SummaryWriter
        except ImportError:
            raise InputError("training.tensorboard: needs tensorboardX: pip install 'jaxmd_dp[tb]'") from None
        self.logdir = Path(logdir)
        try:
            self.logdir.mkdir(parents=True, exist_ok=True)
            probe = self.logdir / ".jaxmd_dp_write_test"
            probe.write_text("")
            probe.unlink()
        except OSError as e:
            raise InputError(f"{self.logdir}: TensorBoard log directory is not writable ({e.strerror or e})") from None
        # event files are named events.out.tfevents.<seconds>.<host><suffix>: the sub-second suffix keeps two
        # writers started within one second (a quick restart) from sharing a file, in time order
        suffix = f".{time.time_ns() % 10**9:09d}"
        self._writer = SummaryWriter(
            logdir=str(self.logdir), purge_step=purge_step, flush_secs=flush_secs, filename_suffix=suffix
        )

    def scalars(self, step: int, values: dict) -> None:
        """Write ``{tag: value}`` at ``step``; values are numbers (Python, numpy or 0-d jax arrays).
        None and non-finite values are skipped."""
        if self._writer is None:
            raise RuntimeError("TBWriter is closed")
        for tag, v in values.items():
            if v is None:
                continue
            v = float(v)
            if math.isfinite(v):
                self._writer.add_scalar(str(tag), v, int(step))

    def metrics(
        self, step: int, train: dict, valid: dict | None = None, lr: float | None = None, step_time: float | None = None
    ) -> None:
        """The learning-curve numbers of one display step: ``train``/``valid`` dicts as written to lcurve.out
        (``rmse``, ``rmse_e``, ...), the learning rate and the mean wall time per step (s)."""
        values = {f"{k}/trn": v for k, v in train.items()}
        values.update({f"{k}/val": v for k, v in (valid or {}).items()})
        values.update({"lr": lr, "step_time": step_time})
        self.scalars(step, values)

    def flush(self) -> None:
        if self._writer is not None:
            self._writer.flush()

    def close(self) -> None:
        """Flush and close (idempotent)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
