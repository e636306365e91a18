"""Each neighbour slot's reverse pair: where atom i sits in the list of its neighbour j.

A full neighbour list holds every pair twice: j (image S) in i's list, and i (image −S) in j's list, at
the same distance. se_e2_a's embedding net reads only the pair's normalised s(r) (the first column of
the environment matrix), and with DeePMD's per-type statistics both slots of a pair of atoms of the same
type hold the same s: the net gives both the same G. :func:`pair_partners` finds, once per list, the slot
of each such pair's reverse, so that the training step can run the nets once per pair of atoms
(:mod:`jaxmd_dp.model.fast.pair_pack`). Pairs of atoms of different types are read by different nets (the
neighbour's type picks the net) and normalised by different centre statistics: they have no partner.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

_rows_of = jax.vmap(lambda x, r: x[r])  # per frame: x (n, ...) rows r (n, s) → (n, s, ...)


TABLE_ENTRIES = 2**24  # the table path's (frames × atoms × atoms) int32 table at most (64 MiB)


def pair_partners(idx: jax.Array, shift: jax.Array, atype: jax.Array, sel, once: bool = False) -> jax.Array:
    """The slot of each same-type pair's reverse in its neighbour's list.

    idx: (nframes, natoms, nnei) int, neighbour index or −1 (empty); shift: (nframes, natoms, nnei, 3)
    the neighbour's periodic image in cell vectors (integral, any dtype); atype: (natoms,) or (nframes,
    natoms) int; sel: (static) slots of each neighbour type's section (the list's own, e.g. ``keep``).

    Returns (nframes, natoms, nnei) int32: for slot (i, k) holding atom j of i's own type at image S, the
    flat slot j · nnei + k' of i (image −S) in j's list; −1 for an empty slot, for a neighbour of
    another type, and where j's list does not hold i (a list cut short by ``sel``). The relation is an
    involution: partner[partner[s]] = s.

    Where no list holds an atom twice (one image of each neighbour within rcut: a cell wider than 2 rcut,
    as water's), the slots come from an atoms × atoms table of where each atom sits in each list
    (:func:`_partners_by_table`, ~n · nnei work); otherwise, or for a table over :data:`TABLE_ENTRIES`,
    from a search of each neighbour's section (:func:`_partners_by_search`, ~n · sel_t² work); the choice is
    made at run time, so both are compiled. ``once`` (static): the caller knows that no list holds an atom
    twice (:func:`jaxmd_dp.geometry.neighbor.holds_atoms_once` of the lists' spec): the table alone, with no
    search compiled beside it (a shorter compile of the list store).
    """
    nf, n, nnei = idx.shape
    idx = idx.astype(jnp.int32)
    atype = jnp.broadcast_to(atype, (nf, n))
    if nf * n * n > TABLE_ENTRIES:
        return _partners_by_search(idx, shift, atype, sel)
    part, unique = _partners_by_table(idx, shift, atype, sel)
    if once:
        return part
    return jax.lax.cond(unique, lambda: part, lambda: _partners_by_search(idx, shift, atype, sel))


def _section_types(sel) -> np.ndarray:
    """(nnei,) the neighbour type of each slot."""
    return np.repeat(np.arange(len(sel)), sel)


def _partners_by_table(idx, shift, atype, sel) -> tuple[jax.Array, jax.Array]:
    """:func:`pair_partners` from a table pos[f, j, i] = the slot of i in j's list, and () bool: no list
    holds an atom twice (else the table keeps one of its slots and this result is not to be used).
    idx (nf, n, nnei) int32, atype (nf, n)."""
    nf, n, nnei = idx.shape
    f = jnp.arange(nf, dtype=jnp.int32)[:, None, None]
    me = jnp.arange(n, dtype=jnp.int32)[None, :, None]
    col = jnp.where(idx >= 0, idx, n)  # empty slots out of range: dropped
    slot = jnp.broadcast_to(jnp.arange(nnei, dtype=jnp.int32), idx.shape)
    pos = jnp.full((nf, n, n), -1, jnp.int32).at[f, me, col].set(slot, mode="drop")
    j = jnp.maximum(idx, 0)
    back = pos[f, j, me]  # (nf, n, nnei): the slot of i in j's list, −1 if none
    kb = jnp.maximum(back, 0)
    rshift = shift[f, j, kb]  # the image of i in that slot
    own = (
        (idx >= 0)
        & (atype[:, :, None] == jnp.asarray(_section_types(sel)))
        & (back >= 0)
        & jnp.all(rshift == -shift, axis=-1)
    )
    once = (idx < 0) | (pos[f, me, j] == slot)  # an atom held twice keeps one of its slots in the table
    return jnp.where(own, j * nnei + back, -1), jnp.all(once)


def _partners_by_search(idx, shift, atype, sel) -> jax.Array:
    """:func:`pair_partners` by comparing each slot with every slot of its neighbour's section (lists that
    hold an atom twice, or too many atoms for the table). idx (nf, n, nnei) int32, atype (nf, n)."""
    nnei = idx.shape[-1]
    sec = np.concatenate([[0], np.cumsum(sel)]).astype(int)
    me = jnp.arange(idx.shape[1], dtype=jnp.int32)[None, :, None, None]
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
