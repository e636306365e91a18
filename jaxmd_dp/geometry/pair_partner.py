"""Each neighbour slot's reverse pair: where atom i sits in the list of its neighbour j.

A full neighbour list holds every pair twice: j (image S) in i's list, and i (image −S) in j's list, at
the same distance. se_e2_a's embedding net reads only the pair's normalised s(r) (the first column of
the environment matrix), and with DeePMD's per-type statistics both slots of a pair of atoms of the same
type hold the same s: the net gives both the same G. :func:`pair_partners` finds, once per list, the slot
of each such pair's reverse, so that the training step can run the nets once per pair of atoms
(:mod:`jaxmd_dp.model.pair_pack`). Pairs of atoms of different types are read by different nets (the
neighbour's type picks the net) and normalised by different centre statistics: they have no partner.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


_rows_of = jax.vmap(lambda x, r: x[r])  # per frame: x (n, ...) rows r (n, s) → (n, s, ...)


def pair_partners(idx: jax.Array, shift: jax.Array, atype: jax.Array, sel) -> jax.Array:
    """The slot of each same-type pair's reverse in its neighbour's list.

    idx: (nframes, natoms, nnei) int, neighbour index or −1 (empty); shift: (nframes, natoms, nnei, 3)
    the neighbour's periodic image in cell vectors (integral, any dtype); atype: (natoms,) or (nframes,
    natoms) int; sel: (static) slots of each neighbour type's section (the list's own, e.g. ``keep``).

    Returns (nframes, natoms, nnei) int32: for slot (i, k) holding atom j of i's own type at image S, the
    flat slot j · nnei + k' of i (image −S) in j's list; −1 for an empty slot, for a neighbour of
    another type, and where j's list does not hold i (a list cut short by ``sel``). The relation is an
    involution: partner[partner[s]] = s.
    """
    nf, n, nnei = idx.shape
    idx = idx.astype(jnp.int32)
    atype = jnp.broadcast_to(atype, (nf, n))
    sec = np.concatenate([[0], np.cumsum(sel)]).astype(int)
    me = jnp.arange(n, dtype=jnp.int32)[None, :, None, None]
    parts = []
    for t in range(len(sel)):
        a, b = int(sec[t]), int(sec[t + 1])
        it, st = idx[:, :, a:b], shift[:, :, a:b]  # (nf, n, s), (nf, n, s, 3): this type's neighbours
        j = jnp.maximum(it, 0)
        rows, rshift = _rows_of(it, j), _rows_of(st, j)  # (nf, n, s, s[, 3]): j's neighbours of this type
        match = (rows == me) & jnp.all(rshift == -st[:, :, :, None, :], axis=-1)
        own = (it >= 0) & (atype[:, :, None] == t) & jnp.any(match, axis=-1)
        parts.append(jnp.where(own, j * nnei + a + jnp.argmax(match, axis=-1).astype(jnp.int32), -1))
    return jnp.concatenate(parts, axis=-1)


def section_partners(partner: jax.Array, nnei: int, start: int, size: int) -> jax.Array:
    """Partners of one neighbour type's section as flat indices into that section's slots.

    partner: (nframes, natoms, size) the section's columns of :func:`pair_partners` (flat slots j · nnei
    + k' of the whole list); start: the section's first slot. Returns (nframes, natoms · size) int32:
    j · size + (k' − start), −1 where there is none. A partner of a slot of section t lies in section t."""
    nf = partner.shape[0]
    j, k = partner // nnei, partner % nnei - start
    return jnp.where(partner >= 0, j * size + k, -1).reshape(nf, -1).astype(jnp.int32)
