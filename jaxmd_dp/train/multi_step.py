"""Several training steps per dispatch (``training.steps_per_dispatch``): one jitted ``lax.scan`` of the step.

One dispatch of the training step costs the host a call with the whole training state (a hundred or so
arrays) and a batch; where the step itself is short (a GPU, a small model) the host sets the pace. K steps
per dispatch pay that once for K steps: the batches' frames and neighbour lists are already on the device
(:mod:`jaxmd_dp.train.neighbor_cache`), so a chunk of K batches reaches the device as two (K, nb) arrays of
row numbers and list slots, and the scan gathers each step's batch itself
(:func:`jaxmd_dp.train.step.take_rows`). The host still draws the batches (the samplers, their states in
the checkpoints: restarts stay exact).

Which steps run as a chunk (:func:`chunk_length`): the K steps after a multiple of K when none of them but
the last writes a learning-curve line or a checkpoint or ends the run, so that the loop sees the state
at every step where it reads it; and only when the K batches are alike (:func:`chunk_inputs`: stored on the
device in the same group, one layout, the same labels). Other steps run one per dispatch, with the same
numbers to rounding (the scan's body is the step's). The learning curve, checkpoints, the NaN guard and
stop signals are handled at the chunk's end, as after a step; the callbacks' ``on_step`` is called for
each of the chunk's steps then, with that step's metrics.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import jax
import numpy as np

from jaxmd_dp.runtime.inline_trace import inline_trace
from jaxmd_dp.train.callbacks import is_window
from jaxmd_dp.train.step import FIND_KEYS, train_compiler_options, train_step_body


@functools.lru_cache(maxsize=16)
def make_train_steps(hyper, prefs, schedule, optimizer, ema_decay: float | None = None):
    """Returns ``train_steps(state, stats, store, rows, slots, finds, layout) -> (state, metrics)``: K training
    steps (:func:`jaxmd_dp.train.step.train_step_body`) as one jitted ``lax.scan``, the state donated.

    store: the device store's arrays (a :class:`~jaxmd_dp.train.neighbor_cache.StoreRef`); rows: (K, nb)
    int32, each step's frames in it; slots: (K, nb) int32, their lists' slots; finds: the batches' find_*
    flags (Python floats, the same for the K batches); layout: their :class:`~jaxmd_dp.train.step.BatchLayout`
    (static). metrics: each of the step's metrics with a leading axis of K, one row per step."""
    body = inline_trace(train_step_body(hyper, prefs, schedule, optimizer, None, ema_decay))

    def train_steps(state, stats, store, rows, slots, finds, layout):
        def one(state, xs):
            return body(state, stats, {"store": store, "rows": xs[0], "slots": xs[1], **finds}, layout)

        return jax.lax.scan(one, state, (rows, slots))

    # not inline_trace as a whole: with jit disabled the scan would be unrolled; its body is
    options = train_compiler_options(hyper=hyper)
    return jax.jit(train_steps, static_argnums=6, donate_argnums=0, compiler_options=options)


AUTO_MIN_STEPS = 5000  # "auto" chunks runs this long: the chunk's program is a second compile (water se_e2_a
# on the CPU: 8 s), which the steps' saved host time (about 9 ms a step there) pays back within ~1,000 steps
AUTO_MAX_K = 10


def steps_per_dispatch(rule: int | str, numb_steps: int, disp_freq: int, one_worker: bool) -> int:
    """K of ``training.steps_per_dispatch``: as given, or for "auto" the largest divisor of ``disp_freq`` up
    to :data:`AUTO_MAX_K` when the run has one worker and :data:`AUTO_MIN_STEPS` steps or more, else 1."""
    if rule != "auto":
        return int(rule)
    if not one_worker or numb_steps < AUTO_MIN_STEPS:
        return 1
    return max(k for k in range(1, AUTO_MAX_K + 1) if disp_freq % k == 0)


def chunk_length(step: int, total: int, k: int, disp_freq: int, save_freq: int) -> int:
    """How many steps the dispatch after ``step`` steps runs: ``k`` when ``step`` is a multiple of ``k``
    and of the next ``k`` steps none but the last is a learning-curve line, a checkpoint or the run's end
    (``total``); else 1."""
    if k <= 1 or step % k or step + k > total:
        return 1
    inside = range(step + 1, step + k)
    if any(is_window(s, total, disp_freq) or s % save_freq == 0 for s in inside):
        return 1
    return k


def chunk_inputs(items: list) -> tuple | None:
    """(store, rows (K, nb) int32, slots (K, nb) int32, finds, layout) of K prepared batches ``items``
    ((batch, arrays, layout) as :meth:`jaxmd_dp.train.loop.Trainer.prepare` gives them) when they can run
    as one chunk: each given by its place in the device store, all in the same store group, with one layout,
    batch size and set of labels; else None."""
    arrays0, layout0 = items[0][1], items[0][2]
    if "store" not in arrays0:
        return None
    finds = {k: arrays0[k] for k in FIND_KEYS if k in arrays0}
    shape = np.shape(arrays0["rows"])
    for _, arrays, layout in items[1:]:
        same = (
            "store" in arrays
            and arrays["store"].same_group(arrays0["store"])
            and layout == layout0
            and np.shape(arrays["rows"]) == shape
            and {k: arrays[k] for k in FIND_KEYS if k in arrays} == finds
        )
        if not same:
            return None
    rows = np.stack([np.asarray(a["rows"], np.int32) for _, a, _ in items])
    slots = np.stack([np.asarray(a["slots"], np.int32) for _, a, _ in items])
    return arrays0["store"], rows, slots, finds, layout0


class StepMetrics(Mapping):
    """Step ``i``'s metrics from a chunk's stacked metrics (each (K, ...)): a read-only mapping that takes
    row ``i`` of a metric when it is read (no copy from the device until then). ``chunk``: (the stacked
    metrics, i), for a callback that takes the whole chunk's at once."""

    def __init__(self, stacked: dict, i: int):
        self.chunk = (stacked, i)

    def __getitem__(self, key):
        return self.chunk[0][key][self.chunk[1]]

    def __iter__(self):
        return iter(self.chunk[0])

    def __len__(self):
        return len(self.chunk[0])
