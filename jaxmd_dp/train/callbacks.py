"""Callbacks: the side work of a training run, called by :meth:`~jaxmd_dp.train.loop.Trainer.fit` at fixed
points of the loop.

    class Record(Callback):
        def on_window(self, trainer, w):           # every lcurve.out line
            print(w.step, w.train["rmse_f"], w.valid and w.valid["rmse_f"], w.lr)

    Trainer(config, "runs/water", callbacks=[Record()]).fit()

The hooks (each optional; ``trainer``: the running Trainer):

- ``on_train_begin(trainer, start, total)``: ``fit`` runs from step ``start`` to ``total``.
- ``on_step(trainer, step, batch, metrics)``: after every step; ``step``: the steps done, ``batch``: the
  sampler batch it trained on, ``metrics``: its device arrays (``lr``, ``rmse``..., ``nneigh_max``);
  reading one waits for the step, so read them only now and then.
- ``on_window(trainer, window)``: at every learning-curve line (``disp_freq`` steps, the first and the
  last step): a :class:`Window`, the numbers of that line.
- ``on_checkpoint(trainer, step)``: at every checkpoint step (``save_freq`` steps, the last, a stop
  signal); the trainer's :class:`Checkpoints` callback comes first and saves it.
- ``on_train_end(trainer)``: ``fit`` ends, normally or by an exception (each callback whose
  ``on_train_begin`` ran).

A callback may end the run after the current step with ``trainer.request_stop(reason)`` (a checkpoint of
the step is saved); ``state_dict()`` (JSON-able, or None) is kept in every checkpoint and given back to
``load_state_dict`` when a run restarts from it; ``summary()`` adds to the dict ``fit`` returns.

The trainer's own callbacks (:func:`default_callbacks`: checkpoints, the sel check, lcurve.out, the log
lines, the best checkpoint, the early stop, TensorBoard, the profiler, the progress bar) run first, in
that order, then the user's. The NaN guard and stop signals are the loop's own checks
(:mod:`jaxmd_dp.train.guards` says why).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import NamedTuple

import jax
import numpy as np

from jaxmd_dp.errors import InputError
from jaxmd_dp.train import lcurve


class Window(NamedTuple):
    """One learning-curve line: ``step``; ``train`` and ``valid`` metrics as written to lcurve.out
    ({"rmse": ..., "rmse_e": eV/atom, "rmse_f": eV/Å, "rmse_v": eV/atom}; ``valid`` None without validation
    data or off rank 0); ``lr``: the step's learning rate; ``wall_s``: seconds since the last line;
    ``eta_s``: seconds left at the steady rate (0 before it is known); ``valid_loss``: with
    ``training.keep_best`` or ``early_stop``, the validation loss with the prefactors of the run's last
    step, which they judge (else None)."""

    step: int
    train: dict
    valid: dict | None
    lr: float
    wall_s: float
    eta_s: float
    valid_loss: float | None = None


def is_window(step: int, total: int, disp_freq: int) -> bool:
    """Whether step ``step`` (steps done) of a run to ``total`` writes a learning-curve line."""
    return step % disp_freq == 0 or step == 1 or step == total


def train_metrics(metrics: dict) -> dict:
    """A step's metrics as the learning curve's training numbers (Python floats; waits for the step)."""
    return {k: float(v) for k, v in metrics.items() if k not in ("nneigh_max", "lr")}


class Callback:
    """Base class: every hook does nothing. See the module's docstring for when each is called."""

    def on_train_begin(self, trainer, start: int, total: int) -> None:
        pass

    def on_step(self, trainer, step: int, batch: dict, metrics: dict) -> None:
        pass

    def on_window(self, trainer, window: Window) -> None:
        pass

    def on_checkpoint(self, trainer, step: int) -> None:
        pass

    def on_train_end(self, trainer) -> None:
        pass

    def state_dict(self) -> dict | None:
        return None

    def load_state_dict(self, state: dict) -> None:
        pass

    def summary(self) -> dict:
        return {}


class Checkpoints(Callback):
    """Saves the training state at every checkpoint step (:meth:`Trainer.checkpoint`: [data parallel] every
    process's sampler states gathered, rank 0 writes)."""

    def on_checkpoint(self, trainer, step: int) -> None:
        trainer.checkpoint()


class SelCheck(Callback):
    """More neighbours of a type within rcut than ``sel``: a warning (once) naming the sel needed, or with
    ``training.strict_sel`` an :class:`InputError`. The steps count them (``metrics["nneigh_max"]``);
    the counts are read at each window."""

    def __init__(self):
        self.warned = False

    def on_train_begin(self, trainer, start, total):
        self.nmax = np.zeros(len(trainer.hyper.sel), np.int32)  # one count per section of the neighbour list
        self.counts = []  # each step's nneigh_max (device arrays), folded into nmax at each window

    def on_step(self, trainer, step, batch, metrics):
        chunk = getattr(metrics, "chunk", None)  # a step of several run in one dispatch (train.multi_step)
        if chunk is None:
            self.counts.append(metrics["nneigh_max"])
        elif chunk[1] == 0:  # the chunk's counts, once, at its first step: one device op, not one per step
            self.counts.append(chunk[0]["nneigh_max"].max(axis=0))
        if len(self.counts) >= 100:  # a long display interval: fold the oldest (done by now) into nmax
            self.nmax = np.max([self.nmax, *map(np.asarray, self.counts[:50])], axis=0)
            del self.counts[:50]

    def on_window(self, trainer, window):
        self.nmax = nmax = np.max([self.nmax, *map(np.asarray, self.counts)], axis=0)
        self.counts.clear()
        sel = np.asarray(trainer.hyper.sel)
        over = nmax > sel
        if over.any():
            msg = (
                f"step {window.step}: neighbours per type reached {nmax.tolist()} > sel {sel.tolist()} "
                f"(types {[t for t, o in zip(trainer.hyper.type_map, over) if o]}); the farthest are dropped "
                f"as in DeePMD-kit — raise sel to at least {np.maximum(nmax, sel).tolist()}"
            )
            if trainer.config.training.strict_sel:
                raise InputError(msg + " (training.strict_sel is set)")
            if not self.warned:
                trainer.log("warning: " + msg)
                self.warned = True


class Lcurve(Callback):
    """DeePMD-kit's ``lcurve.out`` (:mod:`jaxmd_dp.train.lcurve`) at ``path``: a restart keeps the lines up
    to its step and appends. No lines without ``training.disp_training`` (DeePMD-kit's)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._file = None

    def on_train_begin(self, trainer, start, total):
        cont = start > 0 and self.path.exists()
        if cont:
            lcurve.truncate_after(self.path, start)
        self._file = open(self.path, "a" if cont else "w")
        self._header_done = start > 0

    def on_window(self, trainer, w):
        if not trainer.config.training.disp_training:
            return
        if not self._header_done:
            self._file.write(lcurve.header(list(w.train), w.valid is not None))
            self._header_done = True
        self._file.write(lcurve.line(w.step, w.train, w.valid, w.lr))
        self._file.flush()

    def on_train_end(self, trainer):
        if self._file is not None:
            self._file.close()
            self._file = None


class LogLines(Callback):
    """The console lines of each window, as DeePMD-kit: training and validation metrics (none without
    ``training.disp_training``), wall time, learning rate and time left (not without
    ``training.time_training``)."""

    def on_window(self, trainer, w):
        tc = trainer.config.training
        if not tc.disp_training:
            return
        trainer.log(f"batch {w.step:7d}: trn: " + ", ".join(f"{k} = {v:.2e}" for k, v in sorted(w.train.items())))
        if w.valid is not None:
            trainer.log(f"batch {w.step:7d}: val: " + ", ".join(f"{k} = {v:.2e}" for k, v in sorted(w.valid.items())))
        if tc.time_training:
            trainer.log(
                f"batch {w.step:7d}: total wall time = {w.wall_s:.3f} s, lr = {w.lr:.2e}, eta = {_hms(w.eta_s)}"
            )


class _BestLoss(Callback):
    """The lowest finite validation loss seen (``Window.valid_loss``, rank 0's) and its step, kept in the
    checkpoints."""

    def __init__(self):
        self.best_step: int | None = None
        self.best_loss: float | None = None

    def improved(self, w: Window) -> bool:
        """Whether ``w`` brings a lower validation loss (then it is the best)."""
        loss = w.valid_loss
        if loss is None or not math.isfinite(loss) or (self.best_loss is not None and loss >= self.best_loss):
            return False
        self.best_step, self.best_loss = w.step, loss
        return True

    def state_dict(self):
        return {"best_step": self.best_step, "best_loss": self.best_loss}

    def load_state_dict(self, state):
        self.best_step, self.best_loss = state["best_step"], state["best_loss"]


class KeepBest(_BestLoss):
    """``training.keep_best``: the checkpoint of the lowest validation loss, saved at its learning-curve
    line in ``<save_ckpt>/best`` (one checkpoint, replaced by each better one). [data parallel] Rank 0
    judges; every process takes part in the save."""

    def on_train_begin(self, trainer, start, total):
        self.directory = trainer.best_checkpointer.directory if trainer.best_checkpointer else None

    def on_window(self, trainer, w):
        if trainer.workers.broadcast(self.improved(w)):
            trainer.checkpoint(best=True)

    def summary(self):
        if self.best_step is None or self.directory is None:
            return {}
        path = f"{self.directory}/{self.best_step}"
        return {"best": {"step": self.best_step, "valid_loss": self.best_loss, "checkpoint": path}}


class EarlyStop(_BestLoss):
    """``training.early_stop``: ends the run once ``patience`` learning-curve lines in a row bring no lower
    validation loss. [data parallel] Rank 0 judges, every process stops."""

    def __init__(self, patience: int):
        super().__init__()
        self.patience = patience
        self.since = 0  # lines since the best
        self.stopped_at: int | None = None

    def on_window(self, trainer, w):
        stop = False
        if w.valid is not None:
            self.since = 0 if self.improved(w) else self.since + 1
            stop = self.since >= self.patience
        if trainer.workers.broadcast(stop):
            self.stopped_at = w.step
            trainer.request_stop("early stop")

    def state_dict(self):
        return {**super().state_dict(), "since": self.since}

    def load_state_dict(self, state):
        super().load_state_dict(state)
        self.since = state["since"]

    def summary(self):
        if self.stopped_at is None:
            return {}
        best = {"best_step": self.best_step, "best_loss": self.best_loss}
        return {"stopped_early": {"step": self.stopped_at, "patience": self.patience, **best}}


class TensorBoard(Callback):
    """TensorBoard scalars (``training.tensorboard``; :mod:`jaxmd_dp.train.tensorboard`) into ``logdir``:
    the training metrics, learning rate and seconds per step every ``freq`` steps and at every window,
    the validation metrics at the windows. A restart hides what an earlier run wrote after its step."""

    def __init__(self, logdir: str | Path, freq: int):
        self.logdir, self.freq = Path(logdir), int(freq)
        self._tb = None

    def on_train_begin(self, trainer, start, total):
        from jaxmd_dp.train.tensorboard import TBWriter

        self._tb = TBWriter(self.logdir, purge_step=start + 1 if start > 0 else None)
        self._total, self._t, self._last = total, time.perf_counter(), start

    def on_step(self, trainer, step, batch, metrics):
        if step % self.freq == 0 and not is_window(step, self._total, trainer.config.training.disp_freq):
            self._write(step, train_metrics(metrics), None, float(metrics["lr"]))

    def on_window(self, trainer, w):
        self._write(w.step, w.train, w.valid, w.lr)

    def _write(self, step, train, valid, lr):
        now = time.perf_counter()
        self._tb.metrics(step, train, valid, lr=lr, step_time=(now - self._t) / max(1, step - self._last))
        self._t, self._last = now, step

    def on_train_end(self, trainer):
        if self._tb is not None:
            self._tb.close()
            self._tb = None


class Profiler(Callback):
    """A ``jax.profiler`` trace of each fit's steps after ``warmup``, at least ``steps`` of them, into
    ``directory`` (TensorBoard's profile tab or Perfetto). Callbacks see a dispatch's steps after it ran, so
    the trace holds whole dispatches: from the first after step ``warmup`` to the one that completes
    ``steps`` more (``training.steps_per_dispatch``: up to K steps each); the log names the steps traced."""

    def __init__(self, directory: str | Path, warmup: int = 3, steps: int = 5):
        self.directory, self.warmup, self.steps = directory, warmup, steps
        self.tracing = False
        self._from: int | None = None  # steps the device had run when the trace started

    def on_train_begin(self, trainer, start, total):
        self._start, self._total, self._from = start, total, None

    def on_step(self, trainer, step, batch, metrics):
        ran = trainer.dispatched
        if self._from is None and step - self._start >= self.warmup and ran < self._total:
            jax.block_until_ready(trainer.state.params)
            jax.profiler.start_trace(str(self.directory))
            self.tracing, self._from = True, ran
            trainer.log(f"profiling from step {ran + 1} into {self.directory}")
        elif self.tracing and step == ran and ran - self._from >= self.steps:
            self._stop(trainer)

    def on_train_end(self, trainer):
        if self.tracing:
            self._stop(trainer)
        elif self._from is None:
            trainer.log(
                f"no profile written: no dispatch of steps began after the {self.warmup} steps of warm-up "
                f"(this run's steps {self._start + 1}-{trainer.dispatched}); train more steps"
            )

    def _stop(self, trainer):
        jax.block_until_ready(trainer.state.params)
        jax.profiler.stop_trace()
        self.tracing = False
        trainer.log(
            f"profiled steps {self._from + 1}-{trainer.dispatched} into {self.directory} (tensorboard --logdir "
            f"{self.directory}, or the .trace.json.gz in https://ui.perfetto.dev)"
        )


class ProgressBar(Callback):
    """On a terminal or in a notebook, when the trainer logs to ``print`` (directly or through a
    :class:`~jaxmd_dp.train.log.Logger`): a progress bar (:mod:`jaxmd_dp.train.progress`), the log's
    lines then printed above it."""

    def __init__(self):
        self._bar = None
        self._restore = None

    def on_train_begin(self, trainer, start, total):
        log = trainer.log
        console = getattr(log, "console", log)  # a jaxmd_dp.train.log.Logger prints through .console
        if console is not print:
            return
        from jaxmd_dp.train.progress import Progress

        bar = Progress(total, start)
        if not bar.active:
            return
        self._bar = bar
        if log is print:
            trainer.log = bar.write
            self._restore = lambda: setattr(trainer, "log", log)
        else:
            log.console = bar.write
            self._restore = lambda: setattr(log, "console", console)

    def on_step(self, trainer, step, batch, metrics):
        if self._bar is not None:
            self._bar.update(step)  # a python int: no device sync

    def on_train_end(self, trainer):
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        if self._restore is not None:
            self._restore()
            self._restore = None


def default_callbacks(config, output_dir: str | Path, writer: bool, profile: str | Path | None = None) -> list:
    """The trainer's own callbacks, in the order they run; lcurve.out, TensorBoard, the profiler and the
    progress bar on the process that writes the outputs (``writer``: rank 0) only."""
    tc = config.training
    out = Path(output_dir)
    cbs: list[Callback] = [Checkpoints(), SelCheck()]
    if writer:
        cbs.append(Lcurve(out / tc.disp_file))
    cbs.append(LogLines())
    if tc.keep_best:
        cbs.append(KeepBest())
    if tc.early_stop:
        cbs.append(EarlyStop(tc.early_stop))
    if writer:
        if tc.tensorboard:
            cbs.append(TensorBoard(out / tc.tensorboard_log_dir, tc.tensorboard_freq))
        if profile is None and tc.enable_profiler:  # DeePMD-kit's: a trace into tensorboard_log_dir
            profile = out / tc.tensorboard_log_dir
        if profile is not None:
            cbs.append(Profiler(profile))
        cbs.append(ProgressBar())
    return cbs


def _hms(s: float) -> str:
    s = int(s)
    return f"{s // 3600:d}:{s % 3600 // 60:02d}:{s % 60:02d}"
