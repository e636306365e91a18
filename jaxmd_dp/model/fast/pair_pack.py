"""Embedding nets on real neighbour pairs only ("packing"), with DeePMD-kit's empty-slot rule kept exact.

A neighbour-type section of the environment matrix has ``sel_t`` slots per atom, but on average only a
part of them hold a neighbour (water: 89 of 138). The embedding net G(s) is the bulk of a training
step, so it is run on the real pairs of a frame gathered into a fixed-size block of ``size`` rows,
and the result is put back into the slot layout (0 in empty slots). Empty slots are not zero in
DeePMD-kit: each holds the normalised empty row e = −davg/dstd of its centre type and slot and adds
e ⊗ G(e_0) to Rᵀ G. That block is computed once per (centre type, slot) — ntypes × sel_t evaluations
instead of natoms × sel_t — and summed over each atom's empty slots by one matmul
(:func:`empty_slot_term`). So the descriptor is the same as the dense one (to rounding), with any
``size`` ≥ the real pairs of each frame.

``size`` is static and must be ≥ the real pairs of every frame (:func:`pair_counts`); the trainer takes
it from a neighbour count over every frame (:func:`pack_sizes`).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxmd_dp.geometry.running_count import running_count
from jaxmd_dp.model.fast.embed_slope import net_value_and_slope, with_slope
from jaxmd_dp.model.fast.embed_table import outer
from jaxmd_dp.model.fast.row_take import take
from jaxmd_dp.model.nets import PRECISION


class Packing(NamedTuple):
    """How to run the embedding nets on real pairs.

    mask: (nframes, natoms, nkept) bool, True where a slot holds a neighbour.
    empty: (ntypes, nnei, 4) the normalised environment row of an empty slot, per centre type (all sel slots).
    sizes: (static) rows of the packed block per frame for each neighbour type's section (None with
      ``table``, which needs no packed block).
    keep: (static) slots held per neighbour type's section (:func:`keep_sizes`), None for all ``sel``:
      the neighbour list, environment matrix and mask then cover only the first ``keep[t]`` slots of each
      section, and the rest are empty slots, counted by :func:`empty_slot_term`.
    table: (static) 0 to run the embedding nets on the packed pairs; > 0 to take Rᵀ·G from a table of
      that many nodes of each net instead (:func:`jaxmd_dp.model.fast.embed_table.table_env_product`,
      training only).
    uniform: (static) every slot of each neighbour type's section holds the same empty row, for each
      centre type (:func:`uniform_empty`): the empty slots' share is then computed from one row per
      section (:func:`empty_slot_term`).
    partner: (nf, natoms, nkept) int, or None: each slot's reverse pair
      (:func:`~jaxmd_dp.geometry.pair_partner.pair_partners` of the list), so that the nets run once per
      pair of same-type atoms (:func:`packed_embedding`; needs ``uniform`` and one net per neighbour type,
      and ``sizes`` for the pairs kept).
    """

    mask: jax.Array
    empty: jax.Array
    sizes: tuple[int, ...] | None
    keep: tuple[int, ...] | None = None
    table: int = 0
    uniform: bool = False
    partner: jax.Array | None = None


PACK_MAX_FILL = 0.85  # pack only when the packed blocks are at most this fraction of the slots


def pack_sizes(max_pairs, natoms: int, sel: tuple[int, ...], multiple: int = 8) -> tuple[int, ...] | None:
    """Packed block sizes for frames of ``natoms`` atoms whose sections hold at most ``max_pairs``
    (ntypes,) real pairs each (neighbour statistics over every frame): rounded up to ``multiple``, at most
    the section. None when packing would leave more than ``PACK_MAX_FILL`` of the slots (no gain)."""
    sizes = tuple(int(min(natoms * s, -(-max(int(m), 1) // multiple) * multiple)) for m, s in zip(max_pairs, sel))
    return sizes if sum(sizes) <= PACK_MAX_FILL * natoms * sum(sel) else None


def keep_sizes(max_nbor, sel: tuple[int, ...], multiple: int = 8) -> tuple[int, ...]:
    """Slots to hold per neighbour type: the most neighbours of that type any atom has in the frames
    (``max_nbor`` (ntypes,), a neighbour count over every frame), rounded up to ``multiple``, at most
    ``sel[t]``. The neighbour list fills each type's first slots, so the slots past these are empty in
    every frame; cutting them leaves the model's numbers unchanged (Cu: 320 of 512 slots)."""
    return tuple(int(min(s, -(-max(int(m), 1) // multiple) * multiple)) for m, s in zip(max_nbor, sel))


def kept_slots(sel: tuple[int, ...], keep: tuple[int, ...]) -> np.ndarray:
    """Indices into the nnei = sum(sel) slots of the first keep[t] slots of each type's section."""
    sec = np.concatenate([[0], np.cumsum(sel)])
    return np.concatenate([np.arange(sec[t], sec[t] + k) for t, k in enumerate(keep)])


def empty_rows(davg: jax.Array, dstd: jax.Array) -> jax.Array:
    """(0 − davg) / dstd: (ntypes, nnei, 4), what an empty slot holds after normalisation. Host (numpy)
    statistics give a host array, computed without a compile; traced or device ones a jax array."""
    return -davg / dstd


def uniform_empty(davg, dstd, sel: tuple[int, ...]) -> bool:
    """True when, for each centre type, every slot of each neighbour type's section holds the same
    normalised empty row (davg, dstd: (ntypes, nnei, 4) host arrays). DeePMD's statistics are per type,
    the same in every slot, so this holds for models trained here or by DeePMD-kit; it is checked, not
    assumed."""
    e = empty_rows(np.asarray(davg), np.asarray(dstd))  # numpy in, numpy out: no compile
    sec = np.concatenate([[0], np.cumsum(sel)]).astype(int)
    return bool(
        all(
            np.array_equal(e[:, a:b], np.broadcast_to(e[:, a : a + 1], e[:, a:b].shape))
            for a, b in zip(sec[:-1], sec[1:])
        )
    )


def pair_counts(mask: jax.Array, sel: tuple[int, ...]) -> jax.Array:
    """Real pairs per frame in each neighbour type's section: (nframes, ntypes) from mask (nf, natoms, nnei)."""
    sec = np.concatenate([[0], np.cumsum(sel)])
    return jnp.stack([jnp.sum(mask[:, :, sec[t] : sec[t + 1]], axis=(1, 2)) for t in range(len(sel))], axis=-1)


def pack_index(mask: jax.Array, size: int) -> tuple[jax.Array, jax.Array]:
    """Where the real slots go in a packed block.

    mask: (nframes, nslots) bool. Returns idx (nframes, size): the slot of each packed row, in slot order
    (rows past the frame's count point at slot 0); and inv (nframes, nslots): the packed row of each
    real slot (clipped into range for empty slots). On real slots the two are inverse permutations.
    """
    pos = running_count(mask) - 1
    dest = jnp.where(mask, pos, size)  # out of range: dropped
    slots = jnp.broadcast_to(jnp.arange(mask.shape[-1], dtype=jnp.int32), mask.shape)
    idx = jax.vmap(lambda d, s: jnp.zeros(size, jnp.int32).at[d].set(s, mode="drop"))(dest, slots)
    return idx, jnp.clip(pos, 0, size - 1)


# Packing and unpacking are linear maps, each the other's transpose; both are gathers (with partners, a
# row's transpose takes its slot plus the partner slot, one gather of that sum, not two gathers whose sum XLA
# would recompute in every reader), and
# :func:`~jaxmd_dp.model.fast.row_take.take` gives each a VJP in terms of the other.
def pack_maps(mask: jax.Array, size: int, partner: jax.Array | None = None) -> tuple[tuple, tuple]:
    """The two :func:`take` maps of a packed block, each as its (fwd, bwd) specs: (to rows, to slots).

    mask: (nf, m) bool, the real slots; size: rows of the block. Without ``partner`` each real slot has a
    row. partner: (nf, m) int, each slot's reverse pair, −1 for none: the block holds the one of each pair
    with the lower index, and both read its row (the rows then bound the real slots minus the pairs).
    ``take(x, *to_rows)``: x (nf, m, ...) → (nf, size, ...), 0 past the rows used; ``take(y, *to_slots)``:
    y (nf, size, ...) → (nf, m, ...), 0 in empty slots. Each map's bwd is the other's fwd (transposes)."""
    kept = mask if partner is None else mask & ((partner < 0) | (jnp.arange(mask.shape[-1]) < partner))
    idx, pos = pack_index(kept, size)
    valid = jnp.arange(size) < jnp.sum(kept, axis=-1, keepdims=True)  # (nf, size)
    inv, fold = pos, ((idx, valid),)
    if partner is not None:  # the other slot of a pair reads the kept slot's row, and the row sums both slots
        inv = jnp.where(kept, pos, jnp.take_along_axis(pos, jnp.maximum(partner, 0), axis=1))
        fold = ((idx, valid, (jnp.maximum(partner, 0), partner >= 0)),)  # rows of (slot + its partner slot)
    return (((idx, valid),), ((pos, kept),)), (((inv, mask),), fold)


def packed_embedding(net, R: jax.Array, mask: jax.Array, size: int, partner: jax.Array | None = None) -> jax.Array:
    """G(s) of the real pairs of one neighbour-type section, the net run on a packed block.

    net: embedding net, (..., 1) → (..., M1). R: (nf, n, sel_t, 4) normalised rows; mask: (nf, n, sel_t).
    Returns G: (nf, n, sel_t, M1), 0 in empty slots (their share is :func:`empty_slot_term`).

    partner: (nf, n · sel_t) flat slot of each slot's reverse pair in this section, −1 for none
    (:func:`~jaxmd_dp.geometry.pair_partner.section_partners`): the two slots of a pair hold the same s
    (same-type atoms, per-type statistics), so the block holds one of them, the one with the lower flat
    index, and both slots take its G (:func:`pack_maps`). ``size`` then bounds the frame's real slots minus
    its partnered pairs. The derivatives reach the coordinates through the kept slot's s, the same
    function of the pair's distance as the other's.

    The net gives G and its slope G′ (:func:`~jaxmd_dp.model.fast.embed_slope.net_value_and_slope`), so G's
    derivative in s is G′ (:func:`~jaxmd_dp.model.fast.embed_slope.with_slope`): first derivatives in the
    coordinates (forces, virials) and reverse-mode ones in the weights, as the training step needs; no
    second derivative in the coordinates (nor has :func:`~jaxmd_dp.model.fast.train_products.env_product_train`).
    """
    nf, n, s = mask.shape
    to_rows, to_slots = pack_maps(mask.reshape(nf, n * s), size, partner)
    s_packed = take(R[..., 0].reshape(nf, n * s), *to_rows).reshape(nf * size, 1)
    G, dG = net_value_and_slope(net, jax.lax.stop_gradient(s_packed))
    return take(with_slope(G, dG, s_packed).reshape(nf, size, -1), *to_slots).reshape(nf, n, s, -1)


def empty_slot_term(net, mask: jax.Array, empty: jax.Array, centre, uniform: bool = False) -> jax.Array:
    """Σ over the empty slots of each atom of e_s ⊗ G(e_s0): what DeePMD-kit's empty slots add to Rᵀ G.

    An empty slot s of a centre of type c holds the normalised empty row e = empty[c, s] (not zero), so
    it adds e ⊗ G(e_0), a (4, M1) block that depends on (c, s) only. The nets run on ntypes × sel_t rows,
    and the sum over each atom's empty slots is one matmul of the empty-slot indicator with those blocks
    (no broadcast to every slot, and its weight gradient is a matmul too, not a reduction over atoms).

    mask: (nf, n, k) True where a slot holds a neighbour, for the section's first k ≤ sel_t slots (the
    rest are empty); empty: (ntypes, sel_t, 4); centre: (nf, n) centre types, or an int when every centre
    atom has that type. Returns (nf, n, 4, M1).

    uniform: every slot of the section holds the same empty row for each centre type
    (:func:`uniform_empty`, the case of DeePMD's per-type statistics). The net then runs on one row per
    centre type and an atom's share is (its empty slots) × e ⊗ G(e_0): the blocks of every slot were
    most of a step with large ``sel`` (Al-Cu-Mg's 3 × 600 slots).
    """
    nf, n, held = mask.shape
    one_type = isinstance(centre, (int, np.integer))
    e = empty[centre][None] if one_type else empty  # (k, sel_t, 4): the centre types present
    if uniform:  # (k, 1, 4) and the count of each atom's empty slots
        e = e[:, :1]
        hole = empty.shape[-2] - jnp.sum(mask, axis=-1, keepdims=True, dtype=e.dtype)  # (nf, n, 1)
    else:  # the slots past ``keep`` are empty in every frame
        hole = (~jnp.pad(mask, ((0, 0), (0, 0), (0, empty.shape[-2] - held)))).astype(e.dtype)  # (nf, n, sel_t)
    blocks = outer(e, net(e[..., :1]))  # (k, s, 4, M1); e ⊗ G(e_0), with element-wise transposes
    if not one_type:  # one indicator column per (centre type, slot): the atom's own type only
        hole = jnp.concatenate([hole * (centre == t)[..., None].astype(hole.dtype) for t in range(e.shape[0])], axis=-1)
    out = jnp.matmul(hole.reshape(nf * n, -1), blocks.reshape(hole.shape[-1], -1), precision=PRECISION)
    return out.reshape(nf, n, 4, -1)
