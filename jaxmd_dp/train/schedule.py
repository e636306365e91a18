"""DeePMD-kit's learning-rate and loss-prefactor schedules, as optax-style schedules (step → value): each a
hashable NamedTuple whose call takes the step index as a Python int (→ float) or a jnp integer (traced).

    schedule = make_schedule(config.learning_rate, numb_steps)   # exp, cosine or wsd, with warmup
    lr = schedule(state.step)
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from jaxmd_dp.config import LearningRateConfig
from jaxmd_dp.config.optimization import warmup_steps


def _warmup(step, warmup_steps: int, warmup_start_lr: float, start_lr: float, decay):
    """DeePMD-kit's warmup: lr rises linearly from ``warmup_start_lr`` at step 0 to ``start_lr`` at
    ``warmup_steps``; from there ``decay(t)``, t counted from the end of the warmup (float steps)."""
    if isinstance(step, int):
        if step < warmup_steps:
            return warmup_start_lr + (start_lr - warmup_start_lr) * (step / warmup_steps)
        return decay(float(step - warmup_steps))
    t = jnp.asarray(step).astype(jnp.float64)
    if warmup_steps == 0:
        return decay(t)
    warm = warmup_start_lr + (start_lr - warmup_start_lr) * (t / warmup_steps)
    return jnp.where(t < warmup_steps, warm, decay(jnp.maximum(t - warmup_steps, 0.0)))


class ExpDecay(NamedTuple):
    """Exponential decay: lr(t) = start_lr · decay_rate^⌊t / decay_steps⌋ (``smooth``: ^(t / decay_steps)),
    floored at ``min_lr``, after ``warmup_steps`` of linear warmup from ``warmup_start_lr``.

    Build it with :func:`exp_decay`; call it with the step index t (0-based), jnp or Python int.
    """

    start_lr: float
    decay_rate: float
    decay_steps: int
    min_lr: float
    smooth: bool = False
    warmup_steps: int = 0
    warmup_start_lr: float = 0.0

    def __call__(self, step):
        if not self.smooth and not self.warmup_steps:  # DeePMD-kit's plain schedule
            if isinstance(step, int):
                return max(self.start_lr * self.decay_rate ** (step // self.decay_steps), self.min_lr)
            lr = self.start_lr * jnp.power(self.decay_rate, jnp.floor_divide(step, self.decay_steps))
            return jnp.maximum(lr, self.min_lr)
        return _warmup(step, self.warmup_steps, self.warmup_start_lr, self.start_lr, self._decay)

    def _decay(self, t):
        exponent = t / self.decay_steps if self.smooth else t // self.decay_steps
        lr = self.start_lr * self.decay_rate**exponent
        return max(lr, self.min_lr) if isinstance(t, float) else jnp.maximum(lr, self.min_lr)


class CosineDecay(NamedTuple):
    """Cosine annealing: lr(t) = start_lr · (f + (1 − f)(1 + cos(π t / decay_num_steps)) / 2), f =
    stop_lr / start_lr, and start_lr · f from t = decay_num_steps on; t counted after the warmup."""

    start_lr: float
    min_factor: float
    decay_num_steps: int
    warmup_steps: int = 0
    warmup_start_lr: float = 0.0

    def __call__(self, step):
        return _warmup(step, self.warmup_steps, self.warmup_start_lr, self.start_lr, self._decay)

    def _decay(self, t):
        if self.decay_num_steps == 0:
            return self.start_lr if isinstance(t, float) else jnp.full_like(t, self.start_lr)
        f, n = self.min_factor, self.decay_num_steps
        if isinstance(t, float):
            return (
                self.start_lr * f if t >= n else self.start_lr * (f + 0.5 * (1 - f) * (1 + math.cos(math.pi * (t / n))))
            )
        lr = self.start_lr * (f + 0.5 * (1 - f) * (1 + jnp.cos(jnp.pi * (t / n))))
        return jnp.where(t >= n, self.start_lr * f, lr)


class WSDDecay(NamedTuple):
    """Warmup-stable-decay: start_lr for ``stable_steps`` after the warmup, then over ``decay_phase_steps``
    down to ``stop_lr`` by ``decay_type`` with τ the progress through them: "inverse_linear"
    1 / (τ / stop_lr + (1 − τ) / start_lr), "cosine" stop_lr + (start_lr − stop_lr)(1 + cos πτ) / 2, "linear"
    start_lr + (stop_lr − start_lr) τ; stop_lr from ``decay_num_steps`` (the steps after the warmup) on."""

    start_lr: float
    stop_lr: float
    stable_steps: int
    decay_phase_steps: int
    decay_num_steps: int
    decay_type: str = "inverse_linear"
    warmup_steps: int = 0
    warmup_start_lr: float = 0.0

    def __call__(self, step):
        return _warmup(step, self.warmup_steps, self.warmup_start_lr, self.start_lr, self._decay)

    def _decay(self, t):
        xp = math if isinstance(t, float) else jnp
        start, stop = self.start_lr, self.stop_lr
        tau = (t - self.stable_steps) / self.decay_phase_steps
        tau = min(max(tau, 0.0), 1.0) if xp is math else jnp.clip(tau, 0.0, 1.0)
        if self.decay_type == "inverse_linear":
            lr = 1.0 / (tau / stop + (1.0 - tau) / start)
        elif self.decay_type == "cosine":
            lr = stop + (start - stop) * 0.5 * (1.0 + xp.cos(xp.pi * tau))
        else:
            lr = start + (stop - start) * tau
        if xp is math:
            return stop if t >= self.decay_num_steps else (start if t < self.stable_steps else lr)
        lr = jnp.where(t < self.stable_steps, start, lr)
        return jnp.where(t >= self.decay_num_steps, stop, lr)


Schedule = ExpDecay | CosineDecay | WSDDecay


def effective_decay_steps(decay_steps: int, numb_steps: int) -> int:
    """DeePMD-kit's rule: a ``decay_steps`` ≥ ``numb_steps`` (the steps after the warmup) would never decay;
    it is replaced by 100 if numb_steps // 10 > 100, else numb_steps // 100 + 1."""
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
    smooth: bool = False,
    warmup_steps: int = 0,
    warmup_start_factor: float = 0.0,
) -> ExpDecay:
    """DeePMD-kit's ``exp`` learning rate.

    Over the T = numb_steps − warmup_steps steps after the warmup, decay_rate = exp(log(stop_lr / start_lr)
    / (T / decay_steps)), so that lr reaches stop_lr at numb_steps (unless ``decay_rate`` is given; then
    ``decay_steps`` is kept as given and stop_lr is only the floor). ``scale`` multiplies the learning
    rates: the worker-count scaling of data-parallel training (see :func:`worker_scale`).
    """
    total = int(numb_steps) - warmup_steps
    ds = int(decay_steps) if decay_rate is not None else effective_decay_steps(int(decay_steps), total)
    if decay_rate is not None:
        rate = decay_rate
    elif total == 0:
        rate = 1.0
    else:
        rate = math.exp(math.log(max(stop_lr, 1e-10) / start_lr) / (total / ds))
    return ExpDecay(
        start_lr * scale, rate, ds, stop_lr * scale, smooth, warmup_steps, warmup_start_factor * start_lr * scale
    )


def make_schedule(lr: LearningRateConfig, numb_steps: int, scale: float = 1.0) -> Schedule:
    """The ``learning_rate`` section's schedule for a run of ``numb_steps``, its learning rates × ``scale``
    (:func:`worker_scale`)."""
    warmup = warmup_steps(lr.warmup_steps, lr.warmup_ratio, numb_steps)
    start = lr.start_lr
    stop = lr.stop_lr if lr.stop_lr is not None else start * lr.stop_lr_ratio
    warm_start = lr.warmup_start_factor * start * scale
    total = numb_steps - warmup
    if lr.type == "exp":
        return exp_decay(
            start, stop, lr.decay_steps, numb_steps, lr.decay_rate, scale, lr.smooth, warmup, lr.warmup_start_factor
        )
    if lr.type == "cosine":
        return CosineDecay(start * scale, stop / start, total, warmup, warm_start)
    phase = max(1, min(int(lr.decay_phase_ratio * numb_steps), total))
    return WSDDecay(start * scale, stop * scale, total - phase, phase, total, lr.decay_type, warmup, warm_start)


def epoch_steps(numb_epoch: float, nbatches, probs) -> int:
    """DeePMD-kit's steps of ``numb_epoch`` epochs: ⌈numb_epoch · max_i(nbatches_i / p_i)⌉ over the systems
    drawn (p_i > 0), nbatches_i a system's batches per epoch and p_i its drawing probability."""
    p = np.asarray(probs, np.float64)
    p = p / p.sum()
    nb = np.asarray(nbatches, np.float64)
    per_epoch = int(np.ceil(np.max(nb[p > 0] / p[p > 0])))
    return int(np.ceil(numb_epoch * per_epoch))


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
