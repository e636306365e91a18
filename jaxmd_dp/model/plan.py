"""How a prediction is executed, as one object: :class:`ExecutionPlan`, the ``plan=`` of
:func:`~jaxmd_dp.model.energy.atomic_energy`, :func:`~jaxmd_dp.model.energy.predict` and
:func:`~jaxmd_dp.model.energy.predict_merged`. Every plan gives the same numbers (to rounding); it
chooses the path: per-type blocks, environment-matrix kernels, and the training step's CPU rewrites of
:mod:`jaxmd_dp.model.fast`.

The rules that size a plan from the data, for a model (the descriptor says which rewrites apply,
:attr:`~jaxmd_dp.model.descriptor.Descriptor.fast_paths`): :func:`pack_sizes`, :func:`keep_sizes`,
:func:`uniform_empty`, :func:`shares_pairs`, :func:`tabulates`, :func:`tier_sizes`.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import numpy as np

from jaxmd_dp.model.fast import pair_pack
from jaxmd_dp.model.hyper import ModelHyper


class ExecutionPlan(NamedTuple):
    """How to run the model (every field but ``partner`` static: part of what a step compiles for).

    capacity: the most atoms of each type in a frame, so per-type nets run on their atoms only
      (:func:`~jaxmd_dp.model.energy.type_capacity`; :mod:`~jaxmd_dp.model.fast.type_groups`); None:
      natoms for every type.
    kernels: environment-matrix implementation, "pallas" | "jnp" | "auto" | None (``geometry.env_mat``).
    pack: the embedding nets on real pairs only, in blocks of this many rows per frame for each neighbour
      type (:mod:`~jaxmd_dp.model.fast.pair_pack`); every frame must have at most that many real pairs in
      each type's section (``pair_pack.pair_counts``). None: on every slot.
    keep: (with ``pack`` or ``table``) the neighbour list holds only the first keep[t] slots of each type's
      section (a list built with sel = keep, :func:`keep_sizes`); every atom must have at most keep[t]
      neighbours of type t. None (or sel): every slot.
    table: > 0: Rᵀ·G from a table of this many nodes of each embedding net instead of the nets on every
      pair (:mod:`~jaxmd_dp.model.fast.embed_table`, ``training.embedding_table``; ``pack`` is then not
      used); 0: exact.
    uniform_empty: (with ``pack`` or ``table``) the statistics give every slot of a neighbour type's
      section the same empty row (:func:`uniform_empty`): the empty slots' share is computed from one row
      per section.
    partner: (nframes, natoms, nkept) int array or None, each slot's reverse pair
      (:func:`~jaxmd_dp.geometry.pair_partner.pair_partners` of the list): with ``pack``, the nets run once
      per pair of same-type atoms (:func:`shares_pairs`).
    tiers: ((atoms, slots), ...) or None: (with ``keep``, descriptors with ``FastPaths.tiers``) each frame's
      atoms sorted by their neighbour count, most first, the first tiers[0][0] of them run with
      tiers[0][1] slots (``keep``), the next tiers[1][0] with tiers[1][1], and so on: every atom must have at
      most its tier's slots of neighbours (:func:`tier_sizes`, from the neighbour scan); the model then runs
      on fewer empty slots.

    The plans with ``pack`` or ``table`` are the training step's: first derivatives in the coordinates and
    reverse mode in the weights only (no ``jax.jvp``, no Hessians). A plan is built inside traced code (its
    ``partner`` is a traced array), not passed to ``jax.jit`` as an argument.
    """

    capacity: tuple[int, ...] | None = None
    kernels: str | None = None
    pack: tuple[int, ...] | None = None
    keep: tuple[int, ...] | None = None
    table: int = 0
    uniform_empty: bool = False
    partner: jax.Array | None = None
    tiers: tuple[tuple[int, int], ...] | None = None


def pack_sizes(hyper: ModelHyper, max_pairs, natoms: int) -> tuple[int, ...] | None:
    """The plan's ``pack`` for frames of ``natoms`` atoms whose sections hold at most ``max_pairs``
    (ntypes,) real pairs each; None when the descriptor has no packed path or packing gains nothing
    (:func:`jaxmd_dp.model.fast.pair_pack.pack_sizes`)."""
    if not hyper.descriptor.fast_paths.pack:
        return None
    return pair_pack.pack_sizes(max_pairs, natoms, hyper.sel)


def keep_sizes(hyper: ModelHyper, max_nbor) -> tuple[int, ...]:
    """The plan's ``keep`` (the neighbour list's sel) for frames whose atoms have at most ``max_nbor``
    (ntypes,) neighbours of each type: the slots they fill (:func:`jaxmd_dp.model.fast.pair_pack.keep_sizes`);
    the model's sel when the descriptor has neither a packed path nor a cut list."""
    fast = hyper.descriptor.fast_paths
    if not (fast.pack or fast.cut):
        return hyper.sel
    return pair_pack.keep_sizes(max_nbor, hyper.sel)


def uniform_empty(hyper: ModelHyper, stats) -> bool:
    """The plan's ``uniform_empty`` for these statistics (``davg``, ``dstd`` host arrays): every slot of each
    neighbour type's section holds the same normalised empty row (:func:`jaxmd_dp.model.fast.pair_pack.uniform_empty`;
    DeePMD-kit's per-type statistics do)."""
    return pair_pack.uniform_empty(np.asarray(stats.davg), np.asarray(stats.dstd), hyper.sel)


def shares_pairs(hyper: ModelHyper) -> bool:
    """Whether a plan may carry ``partner`` for this model (the descriptor's nets read both slots of a
    same-type pair alike); the statistics must also be :func:`uniform_empty`."""
    return hyper.descriptor.fast_paths.partners


def tabulates(hyper: ModelHyper) -> bool:
    """Whether a plan may carry ``table`` for this model."""
    return hyper.descriptor.fast_paths.table


TIERS = 3  # tiers of atoms at most: each one more copy of the model in the compiled training step


def tier_sizes(
    hyper: ModelHyper, ranked, keep: tuple[int, ...], most: int = TIERS
) -> tuple[tuple[int, int], ...] | None:
    """The plan's ``tiers`` for frames whose atoms, sorted by their count of neighbours of any type, have at
    most ``ranked[r]`` neighbours at rank r (``ranked`` (natoms,), most first: the neighbour scan's
    ``ranked_nbor_per_system``) and whose lists hold ``keep`` slots: at most ``most`` tiers, the first with
    ``keep`` slots, each of a multiple of 8 atoms (but the last) and of 8 slots, every atom within its tier's
    slots, chosen for the least work per frame (per atom, slots · (1 + ``FastPaths.pair_weight`` · slots)).
    None for a descriptor without tiers, or when one tier costs as little (within 3 %)."""
    fast = hyper.descriptor.fast_paths
    ranked = np.asarray(ranked)
    n = int(ranked.size)
    if not fast.tiers or len(keep) != 1 or most < 2 or n < 16:
        return None
    full = int(keep[0])

    def cost(k: int) -> float:
        return k * (1.0 + fast.pair_weight * k)

    def slots(rank: int) -> int:  # the slots every atom from this rank on fits in
        return int(min(full, max(8, -(-int(ranked[rank]) // 8) * 8)))

    starts = list(range(8, n, 8))  # where a tier after the first may start
    # best[a]: (cost, the tiers' first ranks) of ranks a.. in at most t tiers, the first starting at a: t = 1,
    # then one more tier per round
    best = {a: (float(n - a) * cost(slots(a)), (a,)) for a in starts}
    for _ in range(most - 2):
        best = {
            a: min(
                [best[a]]
                + [((b - a) * cost(slots(a)) + best[b][0], (a,) + best[b][1]) for b in starts if b > a and b in best]
            )
            for a in starts
        }
    total, bounds = min(((a * cost(full) + c, b) for a, (c, b) in best.items()), default=(None, None))
    if total is None or total >= 0.97 * n * cost(full):
        return None
    edges = (0,) + bounds + (n,)
    out = [(edges[1], full)] + [(edges[g + 1] - edges[g], slots(edges[g])) for g in range(1, len(edges) - 1)]
    merged: list[tuple[int, int]] = []  # neighbouring tiers of equal slots as one
    for atoms, k in out:
        if merged and merged[-1][1] == k:
            merged[-1] = (merged[-1][0] + atoms, k)
        else:
            merged.append((atoms, k))
    return tuple(merged) if len(merged) > 1 else None
