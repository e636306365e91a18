"""The jitted training step: neighbour list → env matrix → energy → forces/virial → loss → grads → Adam.

One ``jax.jit`` per batch shape and neighbour-list spec; no host round-trips inside. The factories are
cached on their (hashable) arguments, so trainers with the same model and schedule share compiled steps. Data-parallel
training passes ``grad_reduce`` (an all-reduce mean over workers) — see :mod:`jaxmd_dp.train.parallel`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxmd_dp.geometry import neighbor
from jaxmd_dp.geometry.pair_partner import pair_partners
from jaxmd_dp.model.energy import ModelHyper, Stats, predict, predict_merged
from jaxmd_dp.model.fast.stacked_weights import has_stacked, to_nets, to_stacked
from jaxmd_dp.model.plan import ExecutionPlan
from jaxmd_dp.runtime.compile_options import GPU_STEP_OPTIONS, backend_options
from jaxmd_dp.runtime.inline_trace import inline_trace
from jaxmd_dp.train.ema import ema_update
from jaxmd_dp.train.loss import LossPrefs, energy_loss
from jaxmd_dp.train.schedule import Schedule
from jaxmd_dp.train.small_leaves import pack, pack_small_leaves

FRAME_KEYS = ("coord", "box", "atype", "energy", "force", "virial")  # a batch's frames and their labels
FIND_KEYS = ("find_energy", "find_force", "find_virial")  # which labels the batch's system has (Python floats)
BATCH_KEYS = FRAME_KEYS + FIND_KEYS
NL_KEYS = ("nl_idx", "nl_shift", "nl_nmax", "nl_pair")  # a batch's neighbour lists, when built outside the
# step; nl_pair (the slots' reverse pairs) with layouts that share
STORE_KEYS = ("store", "rows", "slots")  # a batch given by its place in the device store (take_rows)


class BatchLayout(NamedTuple):
    """What is static about a batch shape: its neighbour-list spec and the most atoms of each type in a
    frame (per-type nets run on that many atoms; see :mod:`jaxmd_dp.model.fast.type_groups`), and the model's
    fast paths (:class:`~jaxmd_dp.model.plan.ExecutionPlan`, :attr:`plan`)."""

    spec: neighbor.NeighborSpec
    capacity: tuple[int, ...]
    kernels: str = "auto"  # "pallas" | "jnp" | "auto" (Pallas on GPU); $JAXMD_DP_KERNELS overrides auto
    pack: tuple[int, ...] | None = None  # embedding nets on real pairs, blocks this big (model.fast.pair_pack);
    # with pack or table, spec.sel may be below the model's sel: the slots the data fills (model.plan.keep_sizes)
    table: int = 0  # > 0: Rᵀ·G from a table of this many nodes of each embedding net (model.fast.embed_table)
    merged: bool = False  # batches merged into one list of atoms (train.merge); spec.sel: the lists' slots
    uniform_empty: bool = False  # the statistics' empty rows are the same in every slot of a section
    # (model.plan.uniform_empty): the empty slots' share from one row per section (with pack or table)
    share: bool = False  # with pack: the nets run once per pair of same-type atoms (geometry.pair_partner);
    # pack then bounds the pairs with each same-type pair counted once
    tiers: tuple[tuple[int, int], ...] | None = None  # atoms sorted by neighbour count run in tiers of
    # (atoms, slots) (model.plan.tier_sizes)

    @property
    def plan(self) -> ExecutionPlan:
        """The model's execution plan for batches of this layout, without the pair partners (a batch's own,
        given with ``share``); the list's slots ``spec.sel`` are the plan's ``keep``."""
        kernels = None if self.kernels == "auto" else self.kernels
        return ExecutionPlan(
            self.capacity, kernels, self.pack, self.spec.sel, self.table, self.uniform_empty, tiers=self.tiers
        )


class TrainState(NamedTuple):
    """step: () int, steps taken so far; params: Flax weights, each group of nets that runs stacked held
    stacked (:func:`jaxmd_dp.model.fast.stacked_weights.to_stacked`; :func:`weights` gives the per-net
    tree); opt_state: optax state, over ``params`` as held;
    first_bad: () int, index of the first step whose loss or gradient was not finite (−1: none). From
    that step on no update is applied, so ``params`` stay the last good ones (the NaN guard); ``opt_state``
    may hold NaN from then on and is never saved (the loop stops with ``TrainingDiverged`` first).
    ema: the weights' moving average (:mod:`jaxmd_dp.train.ema`), shaped as ``params``; None without
    ``training.enable_ema`` (no leaves: the step's program is the one without it)."""

    step: jax.Array
    params: dict
    opt_state: optax.OptState
    first_bad: jax.Array
    ema: dict | None = None


def weights(held):
    """The per-net weights (a Flax tree, as checkpoints and model files hold them) of ``TrainState.params``
    or ``TrainState.ema``: split on the host (numpy) where it holds stacked groups, else as given."""
    if held is None or not has_stacked(held):
        return held
    return to_nets(jax.tree_util.tree_map(np.asarray, held))


def _zeros(shapes):
    """Host zeros of a tree of shapes (anything with ``shape`` and ``dtype``)."""
    return jax.tree_util.tree_map(lambda s: np.zeros(s.shape, s.dtype), shapes)


def host_state(params, optimizer, ema: bool = False) -> TrainState:
    """Step 0 and the optimizer's initial state on the host (numpy), without computing anything: the
    state's shapes from ``jax.eval_shape(optimizer.init)``, filled with zeros (the optimizers of
    :func:`make_optimizer` start from zeros: Adam's count and moments). ``params``: the per-net weights as
    host arrays, held as the state holds them (:func:`to_stacked`); or shapes (``jax.ShapeDtypeStruct``,
    e.g. ``param_shapes``), whose weights are then zeros too (a restore target). ``ema``: with the weights'
    moving average, a copy of the weights."""
    if all(isinstance(x, jax.ShapeDtypeStruct) for x in jax.tree_util.tree_leaves(params)):
        params = _zeros(params)
    params = to_stacked(params)
    average = jax.tree_util.tree_map(np.array, params) if ema else None
    opt_state = _zeros(jax.eval_shape(optimizer.init, params))
    return TrainState(np.asarray(0), params, opt_state, np.asarray(-1), average)


def init_state(params, optimizer, ema: bool = False) -> TrainState:
    """Step 0 and the optimizer's initial state, put on the device with no compile (a jitted
    ``optimizer.init`` was a compile in every cold start, an eager one a compile per zeros shape).
    ``params``: per-net host arrays; ``ema``: with the weights' moving average."""
    return jax.device_put(host_state(params, optimizer, ema))


def scale_by_adam_tf(b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8) -> optax.GradientTransformation:
    """Adam as TensorFlow's ``AdamOptimizer`` computes it (DeePMD-kit's TensorFlow backend): the update
    m·√(1−β₂ᵗ)/(1−β₁ᵗ)/(√v + ε), which is ``optax.scale_by_adam``'s m̂/(√v̂ + ε) with ε grown to ε/√(1−β₂ᵗ)
    (Kingma & Ba's "ε-hat" form). The two differ only where |gradient| ≲ ε/√(1−β₂ᵗ) (3e-7 at step 1,
    1.3e-8 by step 1,000). Same state (``optax.ScaleByAdamState``) as ``optax.scale_by_adam``, so either
    form restarts from the other's checkpoints."""

    def init(params):
        return optax.ScaleByAdamState(
            jnp.zeros([], jnp.int32), optax.tree.zeros_like(params), optax.tree.zeros_like(params)
        )

    def update(updates, state, params=None):
        del params
        mu = optax.tree.update_moment(updates, state.mu, b1, 1)
        nu = optax.tree.update_moment_per_elem_norm(updates, state.nu, b2, 2)
        count = optax.safe_increment(state.count)

        def step(m, v):
            t = count.astype(m.dtype)
            return jnp.sqrt(1 - b2**t) / (1 - b1**t) * m / (jnp.sqrt(v) + eps)

        return jax.tree_util.tree_map(step, mu, nu), optax.ScaleByAdamState(count, mu, nu)

    return optax.GradientTransformation(init, update)


ADAM_FORMS = ("pytorch", "tensorflow")
OPTIMIZERS = ("Adam", "AdamW")


@functools.lru_cache(maxsize=16)
def make_optimizer(
    schedule: Schedule,
    b1: float = 0.9,
    b2: float = 0.999,
    weight_decay: float = 0.0,
    form: str = "pytorch",
    kind: str = "Adam",
    max_norm: float | None = None,
):
    """Adam or AdamW (ε = 1e-8) with the learning-rate schedule, as an optax chain. ``form``: "pytorch"
    (``optax.scale_by_adam``, as DeePMD-kit's PyTorch and JAX backends) or "tensorflow"
    (:func:`scale_by_adam_tf`, as its TensorFlow backend). ``weight_decay``: with Adam an L2 term added to
    the gradient before Adam, as DeePMD-kit's PyTorch Adam does; with AdamW decoupled, −lr · weight_decay · w
    added to the update (``optax.adamw``, PyTorch's AdamW). ``max_norm`` (None or 0: off): the gradients
    first scaled down to this global norm (``optax.clip_by_global_norm``, inside the packing: the norm sums
    the squares in another order, the same to rounding; DeePMD-kit's ``clip_grad_norm_`` differs by its 1e-6
    added to the norm). A transform that is off is not in the chain.
    The small weights are packed into one array per dtype (:func:`jaxmd_dp.train.small_leaves.pack_small_leaves`:
    fewer kernels to compile in the training step); checkpoints keep the per-weight layout
    (:func:`~jaxmd_dp.train.small_leaves.unpack_state`)."""
    if form not in ADAM_FORMS:
        raise ValueError(f"Adam form {form!r}: expected one of {ADAM_FORMS}")
    if kind not in OPTIMIZERS:
        raise ValueError(f"optimizer {kind!r}: expected one of {OPTIMIZERS}")
    adam = optax.scale_by_adam(b1=b1, b2=b2, eps=1e-8) if form == "pytorch" else scale_by_adam_tf(b1, b2, 1e-8)
    decay = [optax.add_decayed_weights(weight_decay)] if weight_decay else []
    parts = [optax.clip_by_global_norm(max_norm)] if max_norm else []
    parts += [*decay, adam] if kind == "Adam" else [adam, *decay]
    return pack_small_leaves(optax.chain(*parts, optax.scale_by_learning_rate(schedule)))


def device_batch(batch: dict) -> dict:
    """The arrays of a sampler batch that the step reads (drops python metadata), with its neighbour
    lists when it carries them, or its rows of the device store instead of its frames
    (:mod:`jaxmd_dp.train.neighbor_cache`)."""
    return {k: batch[k] for k in BATCH_KEYS + NL_KEYS + STORE_KEYS if k in batch}


def take_rows(batch: dict) -> dict:
    """A batch given as rows of the frames kept on the device → the batch's arrays (traced in the step,
    so that a stored batch costs the host one small copy and no program of its own).

    batch: ``store``, a dict (or :class:`~jaxmd_dp.train.neighbor_cache.StoreRef`) of arrays with a
    leading frame axis F (coord (F, natoms, 3) Å, box (F, 3, 3) Å, atype (F, natoms) int, energy (F,)
    eV, force (F, natoms, 3) eV/Å, virial (F, 9) eV; nl_idx (F, natoms, nnei) int16/int32, nl_shift
    (F, natoms, nnei, 3) int16, nl_nmax (F, ntypes) int32; the lists may have fewer rows, their slots);
    ``rows`` (nb,) int32, the batch's frames (one system's); ``slots`` (nb,) int32, their lists' rows;
    find_* flags. Returns the sampler batch's keys (atype (natoms,), nl_idx int32) with the lists;
    anything else in ``batch`` is kept."""
    store = dict(batch["store"].items())
    rows, slots = batch["rows"], batch["slots"]
    out = {k: v for k, v in batch.items() if k not in STORE_KEYS}
    out.update({k: v[slots if k in NL_KEYS else rows] for k, v in store.items()})
    out["atype"] = out["atype"][0]
    out["nl_idx"] = out["nl_idx"].astype(jnp.int32)
    return out


def batch_loss(
    hyper: ModelHyper,
    prefs: LossPrefs,
    start_lr: float,
    layout: BatchLayout,
    params,
    stats: Stats,
    batch: dict,
    lr,
    end_lr: float | None = None,
):
    """(loss, metrics) of one batch; metrics also hold ``nneigh_max`` (ntypes,) for sel-overflow checks,
    and with ``end_lr`` ``loss_end``, the loss with the prefactors of that learning rate (the run's last).

    The neighbour lists are built here unless the batch carries them (``nl_idx`` (nb, natoms, nnei) int,
    ``nl_shift`` (nb, natoms, nnei, 3) int cell vectors, ``nl_nmax`` (nb, ntypes) int, and with
    ``layout.share`` ``nl_pair`` (nb, natoms, nnei) int32, :func:`pair_partners` of the lists: the same
    lists, built outside the step and kept across epochs by :mod:`jaxmd_dp.train.neighbor_cache`)."""
    if "rows" in batch:  # the frames kept on the device (train.neighbor_cache)
        batch = take_rows(batch)
    spec = layout.spec
    box = batch["box"] if spec.pbc else None
    plan = layout.plan
    kernels = plan.kernels
    if "nl_idx" in batch:  # always with merged batches (train.merge)
        nl = neighbor.NeighborList(
            batch["nl_idx"].astype(jnp.int32), batch["nl_shift"].astype(batch["coord"].dtype), None, None
        )
        nmax = jnp.max(batch["nl_nmax"], axis=0)
    else:
        nl = neighbor.build(spec, batch["coord"], box, batch["atype"], kernels, order="any")
        nmax = jnp.max(nl.nneigh, axis=(0, 1))
    partner = None
    if layout.share:
        partner = batch.get("nl_pair")
        if partner is None:
            partner = pair_partners(nl.idx, nl.shift, batch["atype"], spec.sel, neighbor.holds_atoms_once(spec))
    plan = plan._replace(partner=partner)
    if layout.merged:
        pred = predict_merged(
            hyper,
            params,
            stats,
            batch["coord"],
            box,
            batch["atype"],
            batch["frame"][0],
            nl,
            batch["energy"].shape[0],
            plan=plan,
        )
    else:
        pred = predict(hyper, params, stats, batch["coord"], box, batch["atype"], nl, plan=plan)
    loss, metrics = energy_loss(pred, batch, prefs, lr, start_lr)
    metrics["nneigh_max"] = nmax
    if end_lr is not None:
        metrics["loss_end"] = energy_loss(pred, batch, prefs, end_lr, start_lr)[0]
    return loss, metrics


def all_finite(tree) -> jax.Array:
    """() bool: every entry of ``tree`` is finite, from one scalar: Σ x · 0 is 0 when every x is finite and
    NaN when one is ±inf or NaN (XLA keeps x · 0 for floats). Cheaper to compile than an ``isfinite``
    and ``all`` per leaf; the small leaves summed as one (:func:`jaxmd_dp.train.small_leaves.pack`), one
    kernel for them all."""
    return jnp.isfinite(sum(jnp.sum(x * 0) for x in jax.tree_util.tree_leaves(pack(tree))))


def train_step_body(
    hyper: ModelHyper,
    prefs: LossPrefs,
    schedule: Schedule,
    optimizer,
    grad_reduce: Callable | None = None,
    ema_decay: float | None = None,
) -> Callable:
    """``train_step(state, stats, batch, layout) -> (state, metrics)``, not jitted: the body that
    :func:`make_train_step` jits and :func:`jaxmd_dp.train.multi_step.make_train_steps` scans.

    The metrics are those of the batch before the update (as DeePMD-kit's lcurve ``*_trn``), at the
    learning rate of this step; ``lr`` is included. Prefactors follow lr / start_lr of ``schedule``, so a
    worker-count scaling of the schedule leaves them unchanged. ``ema_decay``: the state's ``ema`` follows
    the updated weights (:func:`jaxmd_dp.train.ema.ema_update`); None: no average.
    """

    def train_step(state: TrainState, stats: Stats, batch: dict, layout: BatchLayout):
        lr = schedule(state.step)
        grad_fn = jax.value_and_grad(
            lambda p: batch_loss(hyper, prefs, schedule.start_lr, layout, to_nets(p), stats, batch, lr),
            has_aux=True,
        )
        (_, metrics), grads = grad_fn(state.params)
        if grad_reduce is not None:
            grads = grad_reduce(grads)
        # decided on the (worker-averaged) gradients, so every data-parallel worker takes the same decision
        first_bad = jnp.where((state.first_bad < 0) & ~all_finite(grads), state.step, state.first_bad)
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        keep = first_bad >= 0  # NaN guard: never apply a non-finite update, stop updating after one
        params = jax.tree_util.tree_map(lambda p, u: jnp.where(keep, p, p + u.astype(p.dtype)), state.params, updates)
        # opt_state is left unguarded: after a bad step it may hold NaN, but nothing is saved from then on
        # (the loop raises TrainingDiverged before its next checkpoint) and params no longer move
        metrics["lr"] = lr
        ema = None
        if ema_decay is not None:
            moved = ema_update(state.ema, params, ema_decay)
            ema = jax.tree_util.tree_map(lambda e, m: jnp.where(keep, e, m), state.ema, moved)
        return TrainState(state.step + 1, params, opt_state, first_bad, ema), metrics

    return train_step


@functools.lru_cache(maxsize=16)
def make_train_step(
    hyper: ModelHyper,
    prefs: LossPrefs,
    schedule: Schedule,
    optimizer,
    grad_reduce: Callable | None = None,
    ema_decay: float | None = None,
):
    """Returns ``train_step(state, stats, batch, layout) -> (state, metrics)`` (:func:`train_step_body`,
    jitted, layout static, the state donated)."""
    return jax.jit(
        inline_trace(train_step_body(hyper, prefs, schedule, optimizer, grad_reduce, ema_decay)),
        static_argnums=3,
        donate_argnums=0,
        compiler_options=train_compiler_options(hyper=hyper),
    )


def make_eval_step(hyper: ModelHyper, prefs: LossPrefs, start_lr: float, evals: int = 0, end_lr: float | None = None):
    """``eval_step(params, stats, batch, layout, lr) -> metrics`` (jitted, layout static; params per net or
    as :class:`TrainState` holds them); with ``end_lr`` the metrics hold ``loss_end``, the loss with the
    prefactors of that learning rate (:func:`batch_loss`).

    evals: how many evaluation batches the run will take (0: few). The step runs once per batch of every
    ``disp_freq`` steps, so its compile is cut short where a faster run would not pay for it: XLA's backend
    optimisation level 1 of 3 always (a shorter compile, and the step no slower), and XLA CPU's older
    element-wise emitters below :data:`MANY_EVALS` batches (a much shorter compile, on the cores the
    first training step's compile also uses, for a somewhat slower batch: worth it only for a few batches)."""
    few = evals < MANY_EVALS
    return (
        _eval_step(hyper, prefs, start_lr, few) if end_lr is None else _eval_step(hyper, prefs, start_lr, few, end_lr)
    )


@functools.lru_cache(maxsize=16)
def _eval_step(hyper: ModelHyper, prefs: LossPrefs, start_lr: float, few: bool, end_lr: float | None = None):
    def eval_step(params, stats, batch, layout, lr):
        return batch_loss(hyper, prefs, start_lr, layout, to_nets(params), stats, batch, lr, end_lr)[1]

    return jax.jit(inline_trace(eval_step), static_argnums=3, compiler_options=eval_compiler_options(few=few))


EVAL_CPU_OPTIONS = {"xla_backend_optimization_level": 1}  # every evaluation step on the CPU
FEW_EVALS_CPU_OPTIONS = {"xla_cpu_use_fusion_emitters": False}  # and these for a run of few evaluations
# a shorter compile against a slower batch: the compile time saved is spent again after about this many batches
MANY_EVALS = 300


@functools.lru_cache(maxsize=4)
def eval_compiler_options(backend: str | None = None, few: bool = True) -> dict | None:
    """The options of :data:`EVAL_CPU_OPTIONS` (with ``few``, and :data:`FEW_EVALS_CPU_OPTIONS`) that this
    jaxlib accepts, on the CPU (:func:`jaxmd_dp.runtime.compile_options.backend_options`); on a GPU the training
    step's (:func:`train_compiler_options`); None elsewhere."""
    wanted = {**EVAL_CPU_OPTIONS, **(FEW_EVALS_CPU_OPTIONS if few else {})}
    return backend_options(tuple(wanted.items()), "cpu", backend) or train_compiler_options(backend)


def train_compiler_options(backend: str | None = None, hyper: ModelHyper | None = None) -> dict | None:
    """The training step's options: on the CPU XLA's defaults, but for the descriptor's own
    (``FastPaths.cpu_options`` of ``hyper``'s); on a GPU no GEMM autotuning
    (:data:`jaxmd_dp.runtime.compile_options.GPU_STEP_OPTIONS`); an option ``XLA_FLAGS`` sets is left out."""
    cpu = () if hyper is None else hyper.descriptor.fast_paths.cpu_options
    return backend_options(tuple(GPU_STEP_OPTIONS.items()), "gpu", backend) or (
        backend_options(cpu, "cpu", backend) if cpu else None
    )
