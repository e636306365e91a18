"""Neighbour lists of the training (and validation) frames, built once and kept across epochs.

A frame's neighbour list depends on its coordinates, box and types only, never on the weights, so the
training step need not rebuild it every epoch (it was ~8 % of a water step on the CPU). The first time a
frame is drawn its list is built by the same function the step would use (:func:`neighbor.build`, order
"any"), stored on the host, and from then on passed to the step with the batch: the step then skips the
build, with the same numbers.

Stored per slot: the neighbour index (int16 when the system has fewer than 32,768 atoms, else int32)
and its periodic image (int16 cell-vector counts), 8 bytes per slot: 55 MB for water's 320 training
frames of 192 atoms × 112 slots. ``training.neighbor_cache_mb`` bounds the memory; a system that does not
fit is not stored, and its frames' lists are built for each batch (outside the step, same numbers).
The trainer keeps one cache for the training systems and one, with the same budget, for the validation
systems (their eval step then skips the build as well).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxmd_dp.geometry import neighbor
from jaxmd_dp.train.step import NL_KEYS


@functools.lru_cache(maxsize=64)
def _builder(spec: neighbor.NeighborSpec, kernels: str | None):
    """Jitted (coord (nb, natoms, 3), box (nb, 3, 3), atype (natoms,)) → (idx (nb, natoms, nnei) int32,
    shift (nb, natoms, nnei, 3) int16 cell vectors, nmax (nb, ntypes) int32 most neighbours of each type
    of an atom in each frame) — the training step's own build, in the dtypes the step takes."""

    def build(coord, box, atype):
        nl = neighbor.build(spec, coord, box if spec.pbc else None, atype, kernels, order="any")
        return nl.idx, nl.shift.astype(jnp.int16), jnp.max(nl.nneigh, axis=1)

    return jax.jit(build)


class _Store:
    """One system's lists, frame by frame: ``lists[f]`` = (idx (natoms, nnei) int16/int32, shift
    (natoms, nnei, 3) int16, nmax (ntypes,) int32) once frame f is built.

    One small array per frame rather than one (nframes, ...) block per system: frames arrive in random
    order, and a block's first write to each part of it faults in fresh memory (numpy asks for huge pages
    on large arrays: 2 MiB zeroed per fault), which took 1–3 ms per new frame on a Cu batch of 84 kB."""

    def __init__(self, natoms: int):
        self.dtype = np.int16 if natoms < 2**15 else np.int32
        self.lists: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def has(self, frames) -> bool:
        return all(int(f) in self.lists for f in frames)

    def get(self, frames):
        """(idx (nb, natoms, nnei) int32, shift (nb, natoms, nnei, 3) int16, nmax (nb, ntypes) int32)."""
        parts = [self.lists[int(f)] for f in frames]
        return tuple(np.stack(a) for a in zip(*parts))

    def put(self, frames, idx, shift, nmax) -> None:
        for k, f in enumerate(frames):
            self.lists[int(f)] = (idx[k].astype(self.dtype), np.array(shift[k], np.int16), np.array(nmax[k], np.int32))

    @staticmethod
    def nbytes(nframes: int, natoms: int, nnei: int, ntypes: int) -> int:
        return nframes * (natoms * nnei * ((2 if natoms < 2**15 else 4) + 6) + 4 * ntypes + 1)


class NeighborCache:
    """The training frames' neighbour lists, filled as frames are drawn.

    systems: the training systems (``DataSampler.systems`` order: a batch's ``sys_index`` indexes it);
    ntypes: the model's types; budget_mb: host memory for the stored lists (MiB; 0 stores nothing, the
    step then builds every list itself, see :meth:`enabled`).
    """

    def __init__(self, systems, ntypes: int, budget_mb: int):
        self.systems = list(systems)
        self.ntypes = int(ntypes)
        self.budget = int(budget_mb) * 2**20
        self.used = 0
        self._stores: dict[int, _Store | None] = {}  # None: the system did not fit in the budget
        self._pending: list = []  # (store, frames, device lists) built for the last batch, not yet stored

    @property
    def enabled(self) -> bool:
        return self.budget > 0

    def attach(self, batch: dict, layout, always: bool = False) -> dict:
        """``batch`` with its frames' neighbour lists added (keys :data:`NL_KEYS`, arrays with the
        batch's leading axes: (nb, ...) for a sampler batch, (nworkers, nb, ...) for stacked workers'
        batches). ``batch["frames"]``: the frames' indices in their system; layout: the batch's
        :class:`~jaxmd_dp.train.step.BatchLayout`.

        A list not yet stored is built on the device and passed on as a device array, without waiting
        for it (the step is queued behind it); it is copied into the store at the next call, by which
        time it is ready, so a batch of new frames costs no host round-trip. Not :attr:`enabled`: the
        batch as it is (the step builds its lists), or with lists built and not kept if ``always``
        (merged batches, :mod:`jaxmd_dp.train.merge`, always carry their lists)."""
        if not self.enabled and not always:
            return batch
        self._store_pending()
        if "sys_indices" in batch:  # workers' batches stacked (data parallel): one part per worker
            parts = [self._lists(s, f, batch["coord"][w], batch["box"][w], batch["atype"][w], layout)
                     for w, (s, f) in enumerate(zip(batch["sys_indices"], batch["frames"]))]
            lists = [np.stack(a) for a in zip(*parts)]
        else:
            lists = self._lists(batch["sys_index"], batch["frames"], batch["coord"], batch["box"], batch["atype"],
                                layout)
        return {**batch, **dict(zip(NL_KEYS, lists))}

    def _lists(self, sys_index: int, frames, coord, box, atype, layout):
        frames = np.asarray(frames)
        store = self._store(int(sys_index), layout) if self.enabled else None
        if store is not None and store.has(frames):
            idx, shift, nmax = store.get(frames)
            return idx.astype(np.int32), shift, nmax
        lists = _builder(layout.spec, _kernels(layout))(coord, box, atype)
        if store is not None:
            for a in lists:
                a.copy_to_host_async()
            self._pending.append((store, frames, lists))
        return lists

    def _store_pending(self) -> None:
        for store, frames, (idx, shift, nmax) in self._pending:
            store.put(frames, np.asarray(idx), np.asarray(shift), np.asarray(nmax))
        self._pending.clear()

    def _store(self, sys_index: int, layout) -> _Store | None:
        if sys_index not in self._stores:
            s = self.systems[sys_index]
            shape = (s.nframes, s.natoms, sum(layout.spec.sel), self.ntypes)
            size = _Store.nbytes(*shape)
            fits = self.used + size <= self.budget
            self._stores[sys_index] = _Store(s.natoms) if fits else None
            self.used += size if fits else 0
        return self._stores[sys_index]


def _kernels(layout) -> str | None:
    return None if layout.kernels == "auto" else layout.kernels
