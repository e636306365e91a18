"""The training and evaluation steps' static layouts (:class:`~jaxmd_dp.train.step.BatchLayout`), planned
once the data is scanned and the statistics are known (:func:`plan_layouts`): one per (natoms, pbc) shape
of the data, or with ``training.merge_batches`` one per merged size (:mod:`jaxmd_dp.train.merge`).

A layout holds the neighbour-list spec (images/cells searched, slots kept per type), the most atoms of
each type, and the fast paths the data allows: embedding nets on real pairs only (``training.pair_packing``:
block sizes from the scan's pair counts), once per pair of same-type atoms (``training.pair_sharing``),
the empty slots' share from one row (:func:`~jaxmd_dp.model.plan.uniform_empty`), a tabulated
embedding (``training.embedding_table``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from jaxmd_dp.config import Config
from jaxmd_dp.data.sampler import DataSampler
from jaxmd_dp.data.system import System
from jaxmd_dp.errors import InputError
from jaxmd_dp.geometry import neighbor
from jaxmd_dp.model.energy import ModelHyper, Stats, type_capacity
from jaxmd_dp.model.plan import keep_sizes, pack_sizes, shares_pairs, tabulates, tier_sizes, uniform_empty
from jaxmd_dp.train.merge import MergedShape, bucket_sizes, merged_capacity
from jaxmd_dp.train.step import BatchLayout

if TYPE_CHECKING:
    from jaxmd_dp.geometry.neighbor_stat import NeighborStats

# rows of head-room in each shared block: a pair at rcut to the last bit may sit in one of its atoms' lists
# only (the two distances are rounded apart), and such a slot needs a row of its own
SHARE_SLACK = 8
# the partner search holds (atoms of a batch) × (slots of a section)² entries of ~16 bytes while it runs
# (geometry.pair_partner): above this, e.g. thousands of atoms per batch with hundreds of slots, no sharing
PARTNER_SEARCH_BYTES = 2**30


class StepLayouts(NamedTuple):
    """What :func:`plan_layouts` decided.

    layouts: {(natoms, pbc): BatchLayout} for every shape of the training and validation data.
    merged: {"train" / "valid": [(MergedShape, BatchLayout), ...] by size} with merged batches, else {}.
    uniform: the statistics hold one empty row per neighbour type's section.
    share: pair sharing is on.
    """

    layouts: dict
    merged: dict
    uniform: bool
    share: bool


def plan_layouts(
    config: Config,
    hyper: ModelHyper,
    stats: Stats,
    scan: NeighborStats,
    train_systems: list[System],
    valid_systems: list[System],
    train_data: DataSampler,
    valid_data: DataSampler | None,
    plain: bool,
    eval_batches: int,
    log: Callable[[str], None] = print,
) -> StepLayouts:
    """The layouts of every batch shape, once the statistics are known: whether they hold one empty row
    per neighbour type's section (DeePMD's per-type statistics do), so the steps compute the empty slots'
    share from that row, and pair sharing, which needs that too (both slots of a pair then hold the same s),
    every same-type pair in both lists (no atom over sel) and one net per neighbour type.

    ``plain``: one worker's batches per program (merged batches need it); ``eval_batches``: the validation
    batches of the run (:meth:`~jaxmd_dp.train.loop.Trainer.eval_batches`)."""
    tc = config.training
    if tc.embedding_table and not tabulates(hyper):
        raise InputError(
            f"training.embedding_table: the {hyper.descriptor.type_name} descriptor has no tabulated path; set it to 0"
        )
    uniform = uniform_empty(hyper, stats)
    share = bool(
        tc.pair_sharing
        and tc.pair_packing
        and not tc.embedding_table
        and shares_pairs(hyper)
        and uniform
        and np.all(scan.max_nbor_per_system.max(axis=0) <= np.asarray(hyper.sel))
        and partner_search_fits(scan, hyper, [train_data] + ([valid_data] if valid_data is not None else []), log)
    )
    systems_all = train_systems + valid_systems
    groups: dict = {}
    for k, s in enumerate(systems_all):
        groups.setdefault((s.natoms, s.pbc), []).append(k)
    pairs = None
    if tc.pair_packing:  # block sizes: real pairs, or with sharing the pairs kept
        pairs = scan.max_unique_pairs_per_system + SHARE_SLACK if share else scan.max_pairs_per_system
    samplers = {"train": (train_data, 0, tc.numb_steps)}
    if valid_data is not None:
        samplers["valid"] = (valid_data, len(train_systems), eval_batches)
    merged = merge_plans(config, hyper, scan, groups, pairs, samplers, plain, uniform, share)
    layouts = allocate_layouts(config, hyper, scan, systems_all, groups, pairs, merged, uniform, share)
    _log_layouts(config, hyper, layouts, merged, share, log)
    return StepLayouts(layouts, merged, uniform, share)


def partner_search_fits(
    scan: NeighborStats, hyper: ModelHyper, samplers: list[DataSampler], log: Callable[[str], None] = print
) -> bool:
    """Whether the partner search of the largest batch of ``samplers`` stays within
    :data:`PARTNER_SEARCH_BYTES`."""
    keep = keep_sizes(hyper, scan.max_nbor_per_system.max(axis=0))
    atoms = max(s.natoms * min(int(b), s.nframes) for d in samplers for s, b in zip(d.systems, d.batch_sizes))
    fits = atoms * max(keep) ** 2 * 16 <= PARTNER_SEARCH_BYTES
    if not fits:
        log(
            f"training.pair_sharing off: batches of {atoms} atoms with {max(keep)} slots per type are "
            "too large for its partner search"
        )
    return fits


def allocate_layouts(
    config: Config,
    hyper: ModelHyper,
    scan: NeighborStats,
    systems_all: list[System],
    groups: dict,
    pairs,
    merged: dict,
    uniform: bool,
    share: bool,
) -> dict:
    """One :class:`BatchLayout` per (natoms, pbc) (``groups``: their indices into ``systems_all``): a
    neighbour-list spec searching enough images/cells for every frame, the most atoms of each type in those
    systems, and (``training.pair_packing``) the packed block sizes: the most neighbour pairs of each type
    in any of their frames (``pairs``: (nsystems, ntypes)); the neighbour list then holds only as many
    slots of each type as an atom of those frames fills (its spec's sel, :func:`keep_sizes`), the rest
    being empty everywhere. With ``merged`` batches the lists of every shape hold the merged steps' slots."""
    tc = config.training
    table = tc.embedding_table
    cut, most = hyper.descriptor.fast_paths.cut, neighbors_per_section(hyper, scan)
    layouts = {}
    for key, members in groups.items():
        systems = [systems_all[k] for k in members]
        coord = np.concatenate([s.coord for s in systems])
        box = None if not key[1] else np.concatenate([s.box for s in systems])
        pack = None if pairs is None or table else pack_sizes(hyper, pairs[members].max(axis=0), key[0])
        keep = (
            None
            if pairs is None or (pack is None and not table and not cut)
            else keep_sizes(hyper, most[members].max(axis=0))
        )
        tiers = None
        if merged:  # every shape's lists as the merged steps'
            keep = next(iter(merged.values()))[0][1].spec.sel
        elif keep is not None and scan.ranked_nbor_per_system is not None:  # atoms in tiers of fewer slots
            tiers = tier_sizes(hyper, np.max([scan.ranked_nbor_per_system[k] for k in members], axis=0), keep)
        spec = neighbor.allocate(coord, box, hyper.rcut, keep or hyper.sel)
        layouts[key] = BatchLayout(
            spec,
            type_capacity([s.atype for s in systems], hyper.ntypes),
            tc.kernels,
            pack,
            table,
            uniform_empty=uniform,
            share=share and pack is not None,
            tiers=tiers,
        )
    return layouts


def merge_plans(
    config: Config,
    hyper: ModelHyper,
    scan: NeighborStats,
    groups: dict,
    pairs,
    samplers: dict,
    plain: bool,
    uniform: bool,
    share: bool,
) -> dict:
    """``training.merge_batches``: when the data has batches of several shapes, the merged shapes
    (:mod:`train.merge`) of the training and of the validation batches, each with its step layout:
    {"train": [(shape, layout), ...] by size, "valid": [...]}. {} when there is one shape, when
    periodic and non-periodic systems are mixed, or when the workers' batches of one process are
    stacked for one program (not ``plain``: a device mesh draws one shape per step instead).

    ``samplers``: {"train" / "valid": (sampler, index of its first system in the scan, batches drawn)}."""
    tc = config.training
    if not tc.merge_batches or len(groups) < 2 or len({pbc for _, pbc in groups}) > 1 or not plain:
        return {}
    if not hyper.descriptor.fast_paths.merge:  # its numbers would depend on the frames merged with it
        return {}
    pbc, sel, table = next(iter(groups))[1], hyper.sel, tc.embedding_table
    plans = {}
    for which, (sampler, first, calls) in samplers.items():
        frames = np.asarray([min(int(b), s.nframes) for s, b in zip(sampler.systems, sampler.batch_sizes)])
        size = frames * np.asarray([s.natoms for s in sampler.systems])
        buckets = bucket_sizes(size, sampler.probs, calls)
        plans[which] = []
        for lo, hi in zip([0] + buckets[:-1], buckets):
            members = np.flatnonzero((size > lo) & (size <= hi))
            pack = None
            if pairs is not None and not table:
                most = np.max([frames[i] * pairs[first + i] for i in members], axis=0)
                pack = pack_sizes(hyper, most, hi)
            capacity = merged_capacity([sampler.systems[i].atype for i in members], frames[members], hyper.ntypes)
            plans[which].append((MergedShape(hi, int(frames[members].max())), capacity, pack))
    packs = [p for plan in plans.values() for _, _, p in plan]
    if any(p is None for p in packs):  # the slots are cut only where every merged step packs
        plans = {w: [(shape, cap, None) for shape, cap, _ in plan] for w, plan in plans.items()}
    keep = sel
    if pairs is not None and (table or hyper.descriptor.fast_paths.cut or all(p is not None for p in packs)):
        keep = keep_sizes(hyper, neighbors_per_section(hyper, scan).max(axis=0))
    spec = neighbor.NeighborSpec(float(hyper.rcut), tuple(keep), bool(pbc), "merged", (0, 0, 0), (1, 1, 1), 0)
    return {
        w: [
            (
                shape,
                BatchLayout(
                    spec,
                    cap,
                    tc.kernels,
                    pack,
                    table,
                    merged=True,
                    uniform_empty=uniform,
                    share=share and pack is not None,
                ),
            )
            for shape, cap, pack in plan
        ]
        for w, plan in plans.items()
    }


def _log_layouts(config: Config, hyper: ModelHyper, layouts: dict, merged: dict, share: bool, log) -> None:
    table = config.training.embedding_table
    packed = [
        f"{n} atoms: {list(lay.pack)} of {[n * s for s in hyper.sel]} pairs, slots {list(lay.spec.sel)}"
        for (n, _), lay in layouts.items()
        if lay.pack and not merged
    ]
    packed += [
        f"merged {which} batches of {shape.atoms} atoms: {list(lay.pack)} pairs, slots {list(lay.spec.sel)}"
        for which, plan in merged.items()
        for shape, lay in plan
        if lay.pack
    ]
    if packed:
        log(
            "embedding nets on real neighbour pairs only (training.pair_packing"
            + (", once per pair of same-type atoms: training.pair_sharing" if share else "")
            + "), per frame "
            + "; ".join(packed[:4])
            + (f"; ... ({len(packed)} shapes)" if len(packed) > 4 else "")
        )
    if table:
        log(
            f"embedding nets tabulated on {table} nodes per step (training.embedding_table; the trained model is exact)"
        )
    if merged:
        log(
            "batches merged into one list of atoms per size, one compiled step each (training.merge_batches): "
            + "; ".join(
                f"{which} " + ", ".join(f"{s.atoms} atoms (≤ {s.frames} frames)" for s, _ in plan)
                for which, plan in merged.items()
            )
        )


def neighbors_per_section(hyper: ModelHyper, scan: NeighborStats) -> np.ndarray:
    """(nsystems, sections) the most neighbours of one atom that each section of the model's list takes: of
    each type, or of any type for a descriptor of mixed types."""
    return scan.max_nbor_any_per_system if hyper.descriptor.mixed_types else scan.max_nbor_per_system


def box_fits(spec: neighbor.NeighborSpec, box: np.ndarray, seen: set) -> bool:
    """:func:`neighbor.fits`, remembered in ``seen`` for boxes that fit (most data sets have few distinct
    boxes, and a check per batch costs host time in every step)."""
    key = (spec, np.asarray(box).tobytes())
    if key in seen:
        return True
    ok = neighbor.fits(spec, box)
    if ok and len(seen) < 1_000_000:
        seen.add(key)
    return ok
