"""Per-type nets without per-type shapes: gather the atoms of one type into a fixed-capacity block,
run that type's net on the block only, scatter the results back.

``capacity[t]`` (static) must be ≥ the number of type-t atoms in every frame; it is a data property
(the most atoms of type t in any frame of a batch shape), so one compiled function serves every
composition. With capacity = natoms for every type this is exact for any frame.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


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
