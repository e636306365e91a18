"""The training frames and their neighbour lists, kept on the device across epochs.

A frame's neighbour list depends on its coordinates, box and types only, never on the weights, so the
training step need not rebuild it every epoch (a noticeable share of a step, on the CPU too). The cache keeps
the frames of the systems of each atom count on the device (coordinates, box, types, labels: systems end
to end, a :class:`_Group`), beside the lists of the frames drawn so far. The lists of frames drawn for
the first time are built with the step's own builder (:func:`neighbor.build`, order "any") and stored
by one jitted call on the device, each in a slot of its own. A batch then reaches the step as its
frames' row numbers and its lists' slots, and the step gathers them itself
(:func:`jaxmd_dp.train.step.take_rows`); where the step takes merged batches, one jitted call gathers and
merges them (:func:`jaxmd_dp.train.merge.merge_arrays`; the merged step would otherwise compile once per
group), building and storing the lists of new frames in the same call. Only those numbers travel from
the host, and nothing waits for the device. The step skips the build, with the same numbers.

Why on the device: on a GPU the host's share of a batch (copying its arrays and lists, merging them)
took longer than the step itself, so the loop ran at the host's pace; with the frames and lists on the
device only row numbers and slots cross over (docs/performance.md, the GPU's loop figures).

Stored per neighbour slot: the neighbour index (int16 when the system has fewer than 32,768 atoms, else
int32) and its periodic image (int16 cell-vector counts), 8 bytes: 55 MB for water's 320 training frames
of 192 atoms × 112 slots, plus the frames (52 bytes per atom). A group keeps lists for at most as many
frames as the run can draw (``draws``: numb_steps × the largest batch), so a short run on many frames
holds few; a batch whose new frames find no slot left is treated as not stored.
``training.neighbor_cache_mb`` bounds the memory; a group of systems that does not fit is not stored:
its batches are copied from the host and their lists built for each batch (outside the step, same
numbers). The trainer keeps one cache for the training systems, and one with the same budget for the
validation systems where their batches are merged (merged batches always carry their lists); other
validation batches have their lists built in the evaluation step (a frame per ``disp_freq`` steps: a store
would only add a program to compile at start-up).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxmd_dp.data.sampler import make_batch
from jaxmd_dp.geometry import neighbor
from jaxmd_dp.geometry.pair_partner import pair_partners
from jaxmd_dp.runtime.inline_trace import inline_trace
from jaxmd_dp.train.merge import merge_arrays, merge_batch
from jaxmd_dp.train.step import FIND_KEYS, FRAME_KEYS, NL_KEYS


def _build(spec: neighbor.NeighborSpec, kernels: str | None, share: bool, coord, box, atype):
    """(idx (nb, natoms, nnei) int32, shift (nb, natoms, nnei, 3) int16 cell vectors, nmax (nb, ntypes)
    int32 most neighbours of each type of an atom in each frame; with ``share`` also the slots' reverse
    pairs (nb, natoms, nnei) int32, :func:`pair_partners`) — the training step's own build, in the
    dtypes the step takes. coord (nb, natoms, 3) Å, box (nb, 3, 3) Å, atype (natoms,)."""
    nl = neighbor.build(spec, coord, box if spec.pbc else None, atype, kernels, order="any")
    shift = nl.shift.astype(jnp.int16)
    lists = nl.idx, shift, jnp.max(nl.nneigh, axis=1)
    return lists + (pair_partners(nl.idx, shift, atype, spec.sel, neighbor.holds_atoms_once(spec)),) if share else lists


@functools.lru_cache(maxsize=64)
def _builder(spec: neighbor.NeighborSpec, kernels: str | None, share: bool = False):
    """:func:`_build`, jitted (the lists of a batch whose frames are not on the device)."""
    return jax.jit(functools.partial(inline_trace(_build), spec, kernels, share))


def _build_into(spec: neighbor.NeighborSpec, kernels: str | None, share: bool, lists, slots, coord, box, atype):
    """Build a batch's lists (:func:`_build`) and write them into a :class:`_Group`'s ``lists`` at
    ``slots`` (nb,). Returns (the updated lists, the batch's lists in the step's dtypes)."""
    new = _build(spec, kernels, share, coord, box, atype)
    return tuple(a.at[slots].set(x.astype(a.dtype)) for a, x in zip(lists, new)), new


@functools.lru_cache(maxsize=64)
def _storer(spec: neighbor.NeighborSpec, kernels: str | None, share: bool = False):
    """Jitted (data, lists, rows, slots) → lists with the lists of a :class:`_Group`'s frames ``rows``
    (nb,) built and stored in its list slots ``slots`` (nb,) (``lists`` donated: updated in place)."""

    def store(data, lists, rows, slots):
        coord, box, atype = data["coord"][rows], data["box"][rows], data["atype"][rows[0]]
        return _build_into(spec, kernels, share, lists, slots, coord, box, atype)[0]

    return jax.jit(inline_trace(store), donate_argnums=1)


@functools.lru_cache(maxsize=64)
def _merged_gatherer(spec: neighbor.NeighborSpec, kernels: str | None, shape, build: bool, share: bool = False):
    """Jitted (data, lists, rows, slots) → a merged batch on the device (merged into ``shape``, a
    :class:`~jaxmd_dp.train.merge.MergedShape`) from a :class:`_Group`'s frames ``rows`` (nb,) with the
    lists in its slots ``slots`` (nb,). ``build``: build the frames' lists and return (lists with them
    stored, batch); ``lists`` is donated. Else the stored lists are read and the batch alone returned."""

    def gather(data, lists, rows, slots):
        b = {k: v[rows] for k, v in data.items()}
        b["atype"] = b["atype"][0]  # a batch's frames are one system's
        if build:
            lists, new = _build_into(spec, kernels, share, lists, slots, b["coord"], b["box"], b["atype"])
        else:
            new = tuple(a[slots] for a in lists)
        out = merge_arrays({**b, **dict(zip(NL_KEYS, new))}, shape)
        return (lists, out) if build else out

    return jax.jit(inline_trace(gather), donate_argnums=1 if build else ())


class _Group:
    """The frames of the cache's systems of one atom count and periodicity on the device, systems end
    to end (F frames in all), and the neighbour lists of the frames drawn so far, in C ≤ F slots.

    data: coord (F, natoms, 3) Å; box (F, 3, 3) Å (zeros when not periodic); atype (F, natoms) int32;
    energy (F,) eV; force (F, natoms, 3) eV/Å; virial (F, 9) eV (zeros where a system has no labels).
    lists: idx (C, natoms, nnei) int16 (int32 from 32,768 atoms), shift (C, natoms, nnei, 3) int16,
    nmax (C, ntypes) int32, and with ``share`` the slots' reverse pairs (C, natoms, nnei) int32.
    ``slot[row]``: the slot of frame ``row``'s lists, −1 until they are built; slots are given out in draw
    order. ``first[s]``: the row of system s's frame 0."""

    def __init__(self, systems: dict, nnei: int, ntypes: int, slots: int, share: bool = False):
        batches = [make_batch(s, np.arange(s.nframes)) for s in systems.values()]
        atype = [np.broadcast_to(b["atype"], b["coord"].shape[:2]) for b in batches]
        host = {k: np.concatenate([b[k] for b in batches]) for k in FRAME_KEYS if k != "atype"}
        host["atype"] = np.concatenate(atype).astype(np.int32)
        self.data = jax.device_put(host)
        rows, natoms = host["coord"].shape[:2]
        itype = np.int16 if natoms < 2**15 else np.int32
        lists = (
            np.zeros((slots, natoms, nnei), itype),
            np.zeros((slots, natoms, nnei, 3), np.int16),
            np.zeros((slots, ntypes), np.int32),
        )
        self.lists = jax.device_put(lists + (np.zeros((slots, natoms, nnei), np.int32),) * share)
        self.slot = np.full(rows, -1, np.int32)
        self.taken = 0  # slots given out
        self.first = dict(zip(systems, np.cumsum([0] + [s.nframes for s in systems.values()])[:-1].tolist()))

    def slots_for(self, rows: np.ndarray) -> tuple[np.ndarray, bool] | None:
        """The list slots (nb,) int32 of frames ``rows``, and whether any is new (given a slot now, its
        lists still to be built); None when the new ones do not fit the slots left."""
        new = self.slot[rows] < 0
        if new.any():
            if self.taken + int(new.sum()) > self.lists[0].shape[0]:
                return None
            self.slot[rows[new]] = np.arange(self.taken, self.taken + int(new.sum()), dtype=np.int32)
            self.taken += int(new.sum())
        return self.slot[rows], bool(new.any())

    @staticmethod
    def nbytes(systems, nnei: int, ntypes: int, slots: int, share: bool = False) -> int:
        """Device bytes of the group's frames and of ``slots`` lists."""
        frames = sum(s.nframes for s in systems)
        natoms = systems[0].natoms
        lists = natoms * nnei * ((2 if natoms < 2**15 else 4) + 6 + 4 * share) + 4 * ntypes
        return frames * (natoms * (6 * 8 + 4) + 19 * 8) + slots * lists


class StoreRef:
    """A :class:`_Group`'s frames and lists as they are when read: a pytree whose leaves are the group's
    current device arrays (a dict: FRAME_KEYS and NL_KEYS). A batch holds this rather than the arrays,
    because the store's lists are updated in place (donated) whenever new frames are drawn: a batch
    prepared before then still reads its rows' lists, unchanged, from the arrays current at its step.
    Rebuilt from its leaves (inside a traced step), it holds those (``arrays``) and is still a StoreRef, so
    that a compiled executable's signature matches the batches it is called with."""

    def __init__(self, group: _Group | None = None, arrays: dict | None = None):
        self._group, self._arrays = group, arrays

    def arrays(self) -> dict:
        if self._group is None:
            return self._arrays
        return {**self._group.data, **dict(zip(NL_KEYS, self._group.lists))}

    def items(self):
        return self.arrays().items()

    def same_group(self, other: StoreRef) -> bool:
        """Whether both read the same live :class:`_Group` (batches of one group can run in one chunk)."""
        return self._group is not None and self._group is other._group


jax.tree_util.register_pytree_node(
    StoreRef, lambda ref: ((ref.arrays(),), None), lambda _, children: StoreRef(arrays=children[0])
)


class NeighborCache:
    """The training frames and their neighbour lists on the device, filled as frames are drawn.

    systems: the training systems (``DataSampler.systems`` order: a batch's ``sys_index`` indexes it);
    ntypes: the model's types; budget_mb: device memory for the stored frames and lists (MiB; 0 stores
    nothing, the step then builds every list itself, see :meth:`enabled`); draws: the most frames a run
    draws (steps × the largest batch; None: no bound), so that a short run on many frames keeps list
    slots for the frames it can draw, not for all of them.
    """

    def __init__(self, systems, ntypes: int, budget_mb: int, draws: int | None = None):
        self.systems = list(systems)
        self.ntypes = int(ntypes)
        self.budget = int(budget_mb) * 2**20
        self.draws = None if draws is None else max(1, int(draws))
        self.used = 0
        self._groups: dict[tuple[int, bool], _Group | None] = {}  # None: the group did not fit the budget

    @property
    def enabled(self) -> bool:
        return self.budget > 0

    def attach(self, batch: dict, layout, merge=None) -> dict:
        """``batch`` with its frames' neighbour lists added (keys :data:`NL_KEYS`, arrays with the
        batch's leading axes: (nb, ...) for a sampler batch, (nworkers, nb, ...) for stacked workers'
        batches). ``batch["frames"]``: the frames' indices in their system; layout: the batch's
        :class:`~jaxmd_dp.train.step.BatchLayout`.

        A sampler batch of a stored system comes back without its host arrays (:data:`FRAME_KEYS`): as
        its place in the store, keys ``store`` (the group's frames and lists, device arrays, as a
        :class:`StoreRef`), ``rows`` (nb,) int32 (its frames) and ``slots`` (nb,) int32 (their lists),
        which the step reads itself (:func:`~jaxmd_dp.train.step.take_rows`); or, with ``merge`` (a
        :class:`~jaxmd_dp.train.merge.MergedShape`), as the merged arrays the step takes, gathered and
        merged on the device by one jitted call. Lists not yet stored are built and stored first, on the
        device (one call); nothing waits for the device. A batch whose new frames find no free slot is
        treated as not stored.
        Not :attr:`enabled`: the batch as it is (the step builds its lists), or, with ``merge``, merged
        with lists built and not kept (merged batches, :mod:`jaxmd_dp.train.merge`, always carry their
        lists)."""
        if not self.enabled and merge is None:
            return batch
        if "sys_indices" in batch:  # workers' batches stacked (data parallel): one part per worker
            parts = [
                self._lists(s, f, batch["coord"][w], batch["box"][w], batch["atype"][w], layout)
                for w, (s, f) in enumerate(zip(batch["sys_indices"], batch["frames"]))
            ]
            return {**batch, **{k: jnp.stack(a) for k, a in zip(NL_KEYS, zip(*parts))}}
        place = self._place(int(batch["sys_index"]), batch["frames"], layout)
        if place is None:  # not stored: the host's arrays, lists built for this batch
            lists = _builder(layout.spec, _kernels(layout), layout.share)(batch["coord"], batch["box"], batch["atype"])
            batch = {**batch, **dict(zip(NL_KEYS, lists))}
            return batch if merge is None else merge_batch(batch, merge)
        group, rows, slots, new = place
        if merge is None:  # the step takes the batch's rows of the store (step.take_rows)
            self._store(group, rows, slots, new, layout)
            return {
                **{k: v for k, v in batch.items() if k not in FRAME_KEYS},
                "store": StoreRef(group),
                "rows": rows,
                "slots": slots,
            }
        fn = _merged_gatherer(layout.spec, _kernels(layout), merge, new, layout.share)
        if new:
            group.lists, out = fn(group.data, group.lists, rows, slots)
        else:
            out = fn(group.data, group.lists, rows, slots)
        # the find_* flags stay the batch's Python floats (weakly typed: a float32 loss stays float32)
        return {**out, **{k: batch[k] for k in FIND_KEYS}}

    def _lists(self, sys_index: int, frames, coord, box, atype, layout):
        """One worker's part of a stacked batch: its lists (idx, shift, nmax[, partners]), from the store or
        built."""
        place = self._place(int(sys_index), frames, layout)
        if place is None:
            return _builder(layout.spec, _kernels(layout), layout.share)(coord, box, atype)
        group, rows, slots, new = place
        self._store(group, rows, slots, new, layout)
        idx, *rest = (a[slots] for a in group.lists)
        return (idx.astype(jnp.int32), *rest)

    def _place(self, sys_index: int, frames, layout):
        """(group, rows (nb,) int32, slots (nb,) int32, whether lists are to be built) of system
        ``sys_index``'s ``frames``; None when they are not stored (no group, or no free slot)."""
        group = self._group(sys_index, layout) if self.enabled else None
        if group is None:
            return None
        rows = (group.first[sys_index] + np.asarray(frames, np.int64)).astype(np.int32)
        got = group.slots_for(rows)
        return None if got is None else (group, rows, *got)

    @staticmethod
    def _store(group: _Group, rows, slots, new: bool, layout) -> None:
        """Where ``new``, build the lists of frames ``rows`` and write them into their ``slots`` (in place)."""
        if new:
            group.lists = _storer(layout.spec, _kernels(layout), layout.share)(group.data, group.lists, rows, slots)

    def _group(self, sys_index: int, layout) -> _Group | None:
        s = self.systems[sys_index]
        key = (s.natoms, bool(s.pbc))
        if key not in self._groups:
            members = {i: t for i, t in enumerate(self.systems) if (t.natoms, bool(t.pbc)) == key}
            nnei, sections = sum(layout.spec.sel), len(layout.spec.sel)  # nmax: one count per section
            frames = sum(t.nframes for t in members.values())
            slots = frames if self.draws is None else min(frames, self.draws)
            size = _Group.nbytes(list(members.values()), nnei, sections, slots, layout.share)
            fits = self.used + size <= self.budget
            self._groups[key] = _Group(members, nnei, sections, slots, layout.share) if fits else None
            self.used += size if fits else 0
        return self._groups[key]


def _kernels(layout) -> str | None:
    return None if layout.kernels == "auto" else layout.kernels
