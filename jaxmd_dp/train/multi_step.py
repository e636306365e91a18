"""Several training steps per dispatch (``training.steps_per_dispatch``): one jitted loop over the step.

One dispatch of the training step costs the host a call with the whole training state (a hundred or so
arrays) and a batch; where the step itself is short (a GPU, a small model) the host sets the pace. Up to K
steps per dispatch pay that once: the batches' frames and neighbour lists are already on the device
(:mod:`jaxmd_dp.train.neighbor_cache`), so a chunk of batches reaches the device as two (K, nb) arrays of
row numbers and list slots and the number of steps to take, n ≤ K, and the loop gathers each step's batch
itself (:func:`jaxmd_dp.train.step.take_rows`). The host still draws the batches (the samplers, their
states in the checkpoints: restarts stay exact).

A chunk ends where the loop reads the state (:func:`chunk_length`): a learning-curve line, a checkpoint,
the run's end; so a restart from a checkpoint runs the same chunks. n is an argument of the program, so one
compiled program takes every chunk, a single step too: data kept on the device never compiles the one-step
program. On a GPU the loop runs all K steps and keeps the first n (:func:`fixed_trips`): a loop whose trip
count depends on n makes XLA copy its condition to the host and wait for it before every step, so the host
cannot queue the next steps' kernels ahead of the device; with K known it runs the K bodies back to back.
The steps past n are computed and dropped (chunks are K long but where a learning-curve line, a checkpoint
or the run's end falls inside one).

Batches that cannot run as one chunk (:func:`chunk_inputs`: not kept on the device, e.g. merged
batches of several shapes, or of two store groups, layouts or label sets) run one per dispatch, with the same
numbers (the loop's body is the step's). The NaN guard and stop signals are handled at the chunk's end; the
callbacks' ``on_step`` is called for each of the chunk's steps then, with that step's metrics.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np

from jaxmd_dp.runtime.inline_trace import inline_trace
from jaxmd_dp.train.callbacks import is_window
from jaxmd_dp.train.step import FIND_KEYS, train_compiler_options, train_step_body

AUTO_K = 10  # "auto": steps per dispatch for one worker per process (alone, or an MPI rank)


@functools.lru_cache(maxsize=16)
def make_train_steps(hyper, prefs, schedule, optimizer, ema_decay: float | None = None, grad_reduce=None):
    """Returns ``train_steps(state, stats, store, rows, slots, n, finds, layout) -> (state, metrics)``: the
    first ``n`` of K training steps (:func:`jaxmd_dp.train.step.train_step_body`) in one jitted
    ``lax.fori_loop``, the state donated.

    store: the device store's arrays (a :class:`~jaxmd_dp.train.neighbor_cache.StoreRef`); rows: (K, nb)
    int32, each step's frames in it; slots: (K, nb) int32, their lists' slots; n: () int32, 1 ≤ n ≤ K, the
    steps to take (rows past n are not read); finds: the batches' find_* flags (Python floats, the same for
    all); layout: their :class:`~jaxmd_dp.train.step.BatchLayout` (static). metrics: each of the step's
    metrics with a leading axis of K, row i that of step i (zeros from n on). ``grad_reduce``: as the one-step
    program's (an MPI worker's all-reduce, :mod:`jaxmd_dp.train.parallel`), once in every step."""
    body = inline_trace(train_step_body(hyper, prefs, schedule, optimizer, grad_reduce, ema_decay))

    def train_steps(state, stats, store, rows, slots, n, finds, layout):
        def step(i, state):
            return body(state, stats, {"store": store, "rows": rows[i], "slots": slots[i], **finds}, layout)

        k = rows.shape[0]
        fixed = fixed_trips()

        def one(i, carry):
            state, stacked = carry
            new, metrics = step(i, state)
            if fixed:  # step i ≥ n: computed, its state and metrics dropped
                keep = i < n
                new = jax.tree_util.tree_map(lambda a, b: jnp.where(keep, a, b), new, state)
                metrics = jax.tree_util.tree_map(lambda m: jnp.where(keep, m, jnp.zeros_like(m)), metrics)
            return new, jax.tree_util.tree_map(lambda a, m: a.at[i].set(m), stacked, metrics)

        shapes = jax.eval_shape(step, 0, state)[1]  # the metrics' shapes (a trace, no compile)
        stacked = jax.tree_util.tree_map(lambda m: jnp.zeros((k, *m.shape), m.dtype), shapes)
        return jax.lax.fori_loop(0, k if fixed else n, one, (state, stacked))

    # not inline_trace as a whole: with jit disabled the loop would run in Python; its body is
    options = train_compiler_options(hyper=hyper)
    return jax.jit(train_steps, static_argnums=7, donate_argnums=0, compiler_options=options)


def fixed_trips() -> bool:
    """Whether the loop runs all K steps of a chunk, keeping the first n (on a GPU; see the module's
    docstring), rather than n: on the CPU a loop's condition costs nothing and a dropped step its time."""
    return jax.default_backend() == "gpu"


def steps_per_dispatch(rule: int | str, loops: bool, period: int | None = None) -> int:
    """K of ``training.steps_per_dispatch``: as given; "auto": :data:`AUTO_K` where the workers can run the loop
    (``loops``: one worker per process), else 1. Where the loop runs all K steps of a chunk (:func:`fixed_trips`),
    the largest K' ≤ K that divides ``period`` (the steps between learning-curve lines and checkpoints: the gcd
    of disp_freq and save_freq), so that chunks are K' long but at the run's start and end and no step is
    computed in vain in between."""
    k = int(rule) if rule != "auto" else (AUTO_K if loops else 1)
    if period and fixed_trips():
        k = max(d for d in range(1, k + 1) if period % d == 0)
    return k


def chunk_length(step: int, total: int, k: int, disp_freq: int, save_freq: int) -> int:
    """How many steps the dispatch after ``step`` steps runs: up to ``k``, ending at the first
    learning-curve line, checkpoint or the run's end (``total``) after ``step``."""
    n = 1
    while n < k and step + n < total:
        s = step + n
        if is_window(s, total, disp_freq) or s % save_freq == 0:
            break
        n += 1
    return n


def chunk_inputs(items: list, k: int) -> tuple | None:
    """(store, rows (k, nb) int32, slots (k, nb) int32, n, finds, layout) of n ≤ k prepared batches ``items``
    ((batch, arrays, layout) as :meth:`jaxmd_dp.train.loop.Trainer.prepare` gives them) when they can run as
    one chunk: each given by its place in the device store, all in the same store group, with one layout,
    batch size and set of labels (rows past n repeat the last); else None."""
    arrays0, layout0 = items[0][1], items[0][2]
    if "store" not in arrays0:
        return None
    finds = {key: arrays0[key] for key in FIND_KEYS if key in arrays0}
    shape = np.shape(arrays0["rows"])
    for _, arrays, layout in items[1:]:
        same = (
            "store" in arrays
            and arrays["store"].same_group(arrays0["store"])
            and layout == layout0
            and np.shape(arrays["rows"]) == shape
            and {key: arrays[key] for key in FIND_KEYS if key in arrays} == finds
        )
        if not same:
            return None
    pad = [items[-1]] * (k - len(items))
    rows = np.stack([np.asarray(a["rows"], np.int32) for _, a, _ in items + pad])
    slots = np.stack([np.asarray(a["slots"], np.int32) for _, a, _ in items + pad])
    return arrays0["store"], rows, slots, np.int32(len(items)), finds, layout0


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
