"""What stops a training run early: a non-finite loss or gradient (:class:`NanGuard`) and a stop signal
(:class:`StopSignals`).

These two are the training loop's own checks, not callbacks (:mod:`jaxmd_dp.train.callbacks`): each
decides whether the state may be saved at all (never after a non-finite step: the last checkpoint is the
last good state) or must be saved now (a signal), and the loop acts on that in the same step, before any
callback sees the step's window or checkpoint. A stop signal is also a collective decision of every
process, and it decides whether the next batch is drawn before the checkpoint records the samplers' state.
"""

from __future__ import annotations

import signal
import threading

from jaxmd_dp.errors import InputError
from jaxmd_dp.train.parallel import Workers


class TrainingDiverged(InputError):
    """A non-finite loss or gradient (bad data or a too-large learning rate)."""


class NanGuard:
    """The NaN guard. The step records the index of its first non-finite loss or gradient in the state
    (``state.first_bad``, -1 while all are finite; :mod:`jaxmd_dp.train.step`); reading it waits for the
    step, so the loop checks it only where it reads the step's values anyway (a window, a checkpoint, a
    stop), naming the step and the system of its batch."""

    def __init__(self):
        self.recent: dict[int, int] = {}  # step index → system index, since the last check

    def record(self, step_index: int, batch: dict) -> None:
        """Step ``step_index`` (0-based) ran on ``batch``."""
        self.recent[step_index] = int(batch["sys_index"])

    def check(self, state, systems: list, checkpointer=None) -> None:
        """Raise :class:`TrainingDiverged` when ``state`` recorded a non-finite step (``systems``: the
        training systems; ``checkpointer``: where the last good state is, or None)."""
        bad = int(state.first_bad)
        recent, self.recent = self.recent, {}
        if bad < 0:
            return
        system = systems[recent[bad]].path if bad in recent else "unknown"
        last = checkpointer.latest_step() if checkpointer else None
        raise TrainingDiverged(
            f"step {bad + 1}: loss or gradient is not finite (batch from {system}); "
            f"training stopped without saving; the last checkpoint ({last}) is intact"
        )


class StopSignals:
    """While alive, SIGTERM/SIGINT/SIGHUP set ``received`` (the signal's name) instead of killing us."""

    NAMES = ("SIGTERM", "SIGINT", "SIGHUP")

    def __init__(self):
        self.received: str | None = None
        self._old = {}
        if threading.current_thread() is threading.main_thread():
            for name in self.NAMES:
                sig = getattr(signal, name, None)
                if sig is not None:
                    self._old[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum, frame):
        self.received = signal.Signals(signum).name

    def restore(self) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)

    def agreed(self, workers: Workers, step: int, every: int, last: bool, taken: int = 1) -> str | None:
        """The stop decision all processes take together, after ``taken`` steps that ended at ``step``: with
        several processes a signal may reach only some of them, so whenever the steps passed a multiple of
        ``every`` (and at the ``last``) they exchange what they received and all stop when any did; alone, the
        signal stops at once."""
        if workers.nprocs == 1:
            return self.received
        if step // every == (step - taken) // every and not last:
            return None
        names = workers.gather(self.received)  # [data parallel] collective: rank 0 gets every rank's signal
        return workers.broadcast(next((n for n in names if n), None) if workers.is_writer else None)
