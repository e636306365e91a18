"""Neighbour lists for MD, jax-md style: built with ``rcut + skin``, rebuilt in the jitted loop only when an
atom has moved more than ``skin / 2``, and cut down to DeePMD-kit's list (the nearest ``sel[t]`` of each
type within ``rcut``) at each energy evaluation."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxmd_dp.geometry import neighbor as nblist
from jaxmd_dp.model.energy import ModelHyper


@struct.dataclass
class MDNeighborList:
    """A neighbour list for MD, jax-md style (a pytree; pass it to the energy function as ``neighbor=``).

    idx: (natoms, K) int32, neighbours within ``rcut + skin`` at ``reference_position``, ``K_t`` slots per
      neighbour type (−1 empty); shift: (natoms, K, 3) their periodic images (cell vectors);
    reference_position: (natoms, 3) Å, where the list was built;
    overflow: () bool, True once a rebuild found more neighbours of a type than its slots, or a full cell
      (sticky: check ``did_buffer_overflow`` after a run and re-``allocate``).
    """

    idx: jax.Array
    shift: jax.Array
    reference_position: jax.Array
    overflow: jax.Array
    spec: nblist.NeighborSpec = struct.field(pytree_node=False)
    update_fn: Callable = struct.field(pytree_node=False)

    @property
    def did_buffer_overflow(self) -> bool:
        return self.overflow

    @property
    def max_occupancy(self) -> tuple[int, ...]:
        return self.spec.sel

    def update(self, position: jax.Array, **kwargs) -> MDNeighborList:
        return self.update_fn(position, self, **kwargs)


class NeighborFn(NamedTuple):
    """jax-md's ``NeighborListFns``: ``allocate(R)`` on the host (fixes shapes), ``update(R, nbrs)``
    jit-safe (rebuilds only when an atom moved more than ``skin / 2``)."""

    allocate: Callable[..., MDNeighborList]
    update: Callable[..., MDNeighborList]


def _image_jumps(R, ref, box_inv):
    """Whole cell vectors each atom jumped since ``ref`` (wrapping by a periodic shift function)."""
    return jax.lax.stop_gradient(jnp.round((R - ref) @ box_inv))


def neighbor_list(
    hyper: ModelHyper, box, atype, skin: float = 1.0, capacity_factor: float = 1.25, kernels: str | None = None
) -> NeighborFn:
    """jax-md style neighbour-list functions for a model's ``rcut``/``sel``.

    Args:
      hyper: the model's hyper-parameters (``rcut``, ``sel``, ``ntypes``).
      box: (3, 3) Å, rows are cell vectors; None without periodic boundaries.
      atype: (natoms,) int type indices.
      skin: Å added to ``rcut`` for the list; 0 rebuilds at every ``update``.
      capacity_factor: head-room on the most neighbours of each type seen at ``allocate``.
      kernels: neighbour-list implementation ("pallas" | "jnp" | "auto"), see :func:`jaxmd_dp.geometry.neighbor.build`.
    """
    box = None if box is None else np.asarray(box, np.float64).reshape(3, 3)
    atype_np = np.asarray(atype, np.int32)
    atype_j = jnp.asarray(atype_np)
    box_j = None if box is None else jnp.asarray(box)
    box_inv = None if box is None else jnp.asarray(np.linalg.inv(box))
    skin = float(skin)
    rlist = hyper.rcut + skin

    def build(spec, R):
        nl = nblist.build(spec, R[None], None if box_j is None else box_j[None], atype_j, kernels)
        over = jnp.any(nl.nneigh[0] > jnp.asarray(spec.sel)) | nl.cell_overflow
        return nl.idx[0], nl.shift[0].astype(R.dtype), over

    build_jit = jax.jit(build, static_argnums=0)

    def update(R, nbrs: MDNeighborList, **unused) -> MDNeighborList:
        R = jnp.asarray(R)
        d = R - nbrs.reference_position
        if box_inv is not None:
            d = d - _image_jumps(R, nbrs.reference_position, box_inv) @ box_j
        moved = jnp.max(jnp.sum(d * d, axis=-1)) > (0.5 * skin) ** 2 if skin > 0 else jnp.asarray(True)

        def rebuild(_):
            idx, shift, over = build(nbrs.spec, R)
            return idx, shift, R, over | nbrs.overflow

        idx, shift, ref, over = jax.lax.cond(
            moved, rebuild, lambda _: (nbrs.idx, nbrs.shift, nbrs.reference_position, nbrs.overflow), None
        )
        return nbrs.replace(idx=idx, shift=shift, reference_position=ref, overflow=over)

    def allocate(R, extra_capacity: int = 0, **unused) -> MDNeighborList:
        R_np = np.asarray(R, np.float64)
        if R_np.shape != (len(atype_np), 3):
            raise ValueError(f"positions have shape {R_np.shape}, expected ({len(atype_np)}, 3)")
        frames = R_np[None]
        spec = nblist.allocate(
            frames, None if box is None else box[None], rlist, hyper.sel, capacity_factor=max(1.3, capacity_factor)
        )
        # count the neighbours of each type within rcut + skin, then size the slots with head-room
        nl = nblist.build(spec, frames, None if box is None else box[None], atype_np, kernels)
        nmax = np.asarray(nl.nneigh).max(axis=(0, 1))
        sel = tuple(max(1, int(math.ceil(n * capacity_factor)) + int(extra_capacity)) for n in nmax)
        spec = spec._replace(sel=sel)
        Rj = jnp.asarray(R)
        idx, shift, over = build_jit(spec, Rj)
        return MDNeighborList(idx, shift, Rj, over, spec, update)

    return NeighborFn(allocate, update)


class ModelNeighbors(NamedTuple):
    """The model's neighbour list of one frame, as :func:`jaxmd_dp.geometry.neighbor.build` gives it:
    idx (1, natoms, nnei) int, −1 empty; shift (1, natoms, nnei, 3) periodic images in cell vectors."""

    idx: jax.Array
    shift: jax.Array


def select_within_rcut(hyper: ModelHyper, ext_sel, R, box, box_inv, nbrs: MDNeighborList) -> ModelNeighbors:
    """From the extended list, the nearest ``sel[t]`` neighbours of each type within ``rcut`` at positions
    R (natoms, 3) Å; box (3, 3) Å and box_inv its inverse, or None."""
    R = jax.lax.stop_gradient(R)
    idx, shift = nbrs.idx, nbrs.shift
    if box is not None:  # image jumps since the list was built: shift_ij + n_i − n_j
        n = _image_jumps(R, nbrs.reference_position, box_inv)
        j = jnp.maximum(idx, 0)
        shift = shift + n[:, None, :] - n[j]
    j = jnp.maximum(idx, 0)
    d = R[j] - R[:, None, :]
    if box is not None:
        d = d + shift @ box
    r2 = jnp.sum(d * d, axis=-1)
    ok = (idx >= 0) & (r2 < hyper.rcut**2)
    out_idx, out_shift, start = [], [], 0
    for nsel, k in zip(hyper.sel, ext_sel):
        sl = slice(start, start + k)
        start += k
        key = jnp.where(ok[:, sl], r2[:, sl], jnp.inf)
        kk = min(nsel, k)
        neg, pos = jax.lax.top_k(-key, kk)
        found = jnp.isfinite(neg)
        it = jnp.where(found, jnp.take_along_axis(idx[:, sl], pos, axis=-1), -1)
        st = jnp.where(found[..., None], jnp.take_along_axis(shift[:, sl], pos[..., None], axis=-2), 0.0)
        if kk < nsel:
            it = jnp.pad(it, ((0, 0), (0, nsel - kk)), constant_values=-1)
            st = jnp.pad(st, ((0, 0), (0, nsel - kk), (0, 0)))
        out_idx.append(it)
        out_shift.append(st)
    return ModelNeighbors(jnp.concatenate(out_idx, axis=-1)[None], jnp.concatenate(out_shift, axis=-2)[None])
