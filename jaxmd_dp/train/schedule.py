"""DeePMD-kit's learning-rate and loss-prefactor schedules, as optax-style schedules (step → value)."""

from __future__ import annotations

import math
from typing import NamedTuple

import jax.numpy as jnp


class ExpDecay(NamedTuple):
    """Stepped exponential decay: lr(t) = start_lr · decay_rate^⌊t / decay_steps⌋, floored at ``min_lr``.

    Build it with :func:`exp_decay`; call it with the step index t (0-based), jnp or Python int.
    """

    start_lr: float
    decay_rate: float
    decay_steps: int
    min_lr: float

    def __call__(self, step):
        if isinstance(step, int):
            return max(self.start_lr * self.decay_rate ** (step // self.decay_steps), self.min_lr)
        lr = self.start_lr * jnp.power(self.decay_rate, jnp.floor_divide(step, self.decay_steps))
        return jnp.maximum(lr, self.min_lr)


def effective_decay_steps(decay_steps: int, numb_steps: int) -> int:
    """DeePMD-kit's rule: a ``decay_steps`` ≥ ``numb_steps`` would never decay; it is replaced by
    100 if numb_steps // 10 > 100, else numb_steps // 100 + 1."""
    if decay_steps >= numb_steps:
        return 100 if numb_steps // 10 > 100 else numb_steps // 100 + 1
    return decay_steps


def exp_decay(
    start_lr: float,
    stop_lr: float,
    decay_steps: int,
    numb_steps: int,
    decay_rate: float | None = None,
    scale: float = 1.0,
) -> ExpDecay:
    """DeePMD-kit's ``exp`` learning rate.

    decay_rate = exp(log(stop_lr / start_lr) / (numb_steps / decay_steps)), so that lr reaches stop_lr at
    numb_steps (unless ``decay_rate`` is given). ``scale`` multiplies start_lr and the floor: the
    worker-count scaling of data-parallel training (see :func:`worker_scale`).
    """
    numb_steps = max(int(numb_steps), 1)
    ds = effective_decay_steps(int(decay_steps), numb_steps)
    rate = decay_rate if decay_rate is not None else math.exp(math.log(stop_lr / start_lr) / (numb_steps / ds))
    return ExpDecay(start_lr * scale, rate, ds, min(stop_lr, start_lr) * scale)


def worker_scale(mode: str, nworkers: int) -> float:
    """DeePMD-kit's ``scale_by_worker``: linear → n, sqrt → √n, none → 1."""
    if mode == "linear":
        return float(nworkers)
    if mode == "sqrt":
        return math.sqrt(nworkers)
    if mode == "none":
        return 1.0
    raise ValueError(f"scale_by_worker must be linear, sqrt or none, got {mode!r}")


def prefactor(start: float, limit: float, lr, start_lr: float):
    """Loss prefactor at learning rate ``lr``: limit + (start − limit) · lr / start_lr (DeePMD-kit)."""
    return limit + (start - limit) * lr / start_lr
