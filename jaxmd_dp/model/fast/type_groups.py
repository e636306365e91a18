"""Per-type nets without per-type shapes: gather the atoms of one type into a fixed-capacity block,
run that type's net on the block only, scatter the results back.

``capacity[t]`` (static) must be ≥ the number of type-t atoms in every frame; it is a data property
(the most atoms of type t in any frame of a batch shape), so one compiled function serves every
composition. With capacity = natoms for every type this is exact for any frame.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxmd_dp.geometry.running_count import running_count
from jaxmd_dp.model.fast.row_take import take


def gather_type(atype: jax.Array, t: int, capacity: int) -> tuple[jax.Array | None, jax.Array]:
    """Indices of type-``t`` atoms first: order (nframes, capacity) int, valid (nframes, capacity) bool.

    atype: (nframes, natoms) int (−1 for padding atoms). When the block would hold every atom (capacity ≥
    natoms: one type, or ``default_capacity``) order is None and valid is ``atype == t``: the net runs on
    all rows in place, with no gather and scatter (on the Cu step, of the atoms × 1536 descriptor)."""
    if capacity >= atype.shape[-1]:
        return None, atype == t
    order = jnp.argsort(atype != t, axis=-1, stable=True)[:, :capacity]
    valid = jnp.take_along_axis(atype, order, axis=1) == t
    return order, valid


def take_atoms(x: jax.Array, order: jax.Array | None) -> jax.Array:
    """x (nframes, natoms, ...) → (nframes, capacity, ...) rows ``order`` (None: every row, in place)."""
    if order is None:
        return x
    idx = order.reshape(order.shape + (1,) * (x.ndim - 2))
    return jnp.take_along_axis(x, idx, axis=1)


def inverse_type(atype: jax.Array, t: int, capacity: int) -> tuple[jax.Array, jax.Array]:
    """Each atom's row in :func:`gather_type`'s block of type ``t``: inv (nframes, natoms) int32 and keep
    (nframes, natoms) bool, True for the atoms of type t (the block holds them first, in index order)."""
    is_t = atype == t
    pos = running_count(is_t) - 1
    return jnp.clip(pos, 0, capacity - 1), is_t & (pos < capacity)


def take_atoms_rev(x: jax.Array, atype: jax.Array, t: int, order: jax.Array, valid: jax.Array) -> jax.Array:
    """:func:`take_atoms` for reverse mode only (the training step): rows ``order`` (nframes, capacity) of x
    (nframes, natoms, ...), the block of type ``t`` from :func:`gather_type`, 0 where not ``valid``, with the
    inverse gather (:func:`inverse_type`) as its VJP instead of a scatter-add into zeros
    (:func:`~jaxmd_dp.model.fast.row_take.take`): a gather reads only the rows it needs, where the scatter writes a
    whole zero array first. ``order`` None (a block of every atom): x, in place."""
    if order is None:
        return x
    return take(x, ((order, valid),), (inverse_type(atype, t, order.shape[1]),))


def put_atoms(out: jax.Array, order: jax.Array | None, valid: jax.Array, values: jax.Array) -> jax.Array:
    """Add ``values`` (nframes, capacity, ...) into ``out`` (nframes, natoms, ...) at rows ``order``
    (None: every row, in place) where ``valid`` (each real atom appears once; invalid rows add 0)."""
    mask = valid.reshape(valid.shape + (1,) * (values.ndim - 2))
    if order is None:
        return out + jnp.where(mask, values, 0).astype(out.dtype)
    f = jnp.arange(out.shape[0])[:, None]
    return out.at[f, order].add(jnp.where(mask, values, 0).astype(out.dtype))


def default_capacity(ntypes: int, natoms: int) -> tuple[int, ...]:
    return (natoms,) * ntypes
