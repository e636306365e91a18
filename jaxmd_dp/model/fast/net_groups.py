"""Nets of one shape run as one program: their weights stacked on a net axis, each row through its own net.

se_e2_a has one embedding net per neighbour type, or per (neighbour, centre) type pair (``type_one_side:
false``: ntypes² nets), and one fitting net per centre type. Traced one by one, each net is its own copy of
the same program in the step, and the step's trace and compile grow with the number of nets. Here the nets'
weights (their Flax subtrees ``embed_{k}``, ``fit_{t}``, unchanged) are stacked on a leading net axis
when the model is applied (:func:`stacked`), and the rows of every net are evaluated together:

- embedding nets (:func:`tile_layout`, :func:`tiled_embedding`): each row (a neighbour slot) belongs to
  one net; the rows are laid out net by net in tiles of ``block`` rows, each tile one net's (a net's last
  tile padded), and every layer is one batched product of the tiles with their own net's weights (picked
  by a one-hot product: :func:`pick`). Only the rows a net has are computed, up to a tile per net;
- the empty slots' share (:func:`grouped_empty_term`): one row per (centre type, neighbour type);
- fitting nets (:func:`type_blocks`, :func:`stacked_fitting`): the atoms of each type in a block of the
  same size, one vmapped net over the type axis.

The same numbers as the nets one by one, to rounding (the products are batched, the sums over neighbour
types taken in one product). Whether a model's nets run stacked is :func:`stack_nets`'s rule.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxmd_dp.geometry.running_count import running_count
from jaxmd_dp.model.fast.embed_slope import value_and_slope, with_slope
from jaxmd_dp.model.fast.embed_table import outer
from jaxmd_dp.model.fast.row_take import take
from jaxmd_dp.model.nets import PRECISION

# "auto": :func:`stack_nets`'s rule; "always" / "never": every model's nets stacked / one by one (tests and
# benchmarks set it to compare the two).
MODE = "auto"
# The fewest nets of each kind that run stacked under "auto", the embedding nets and the fitting nets decided
# apart. Fewer nets ran as fast or faster one by one per step (water, Cu, Al-Cu-Mg with one net per neighbour
# type); from there on the step's compile stays nearly flat in the number of types when stacked (the training
# state then holds the nets' weights stacked too: :mod:`jaxmd_dp.model.fast.stacked_weights`), and one net per type pair
# (``type_one_side: false``) also steps faster stacked, as the nets one by one each ran on a block bounded for
# every centre type. Measured with bench/step_time.py (``--variant`` on MODE or MIN_STACKED)
# and bench/ntypes_scaling.py.
MIN_STACKED = {"embedding": 4, "fitting": 4}

# The cost of copying one weight of a tile's net relative to one multiply-add of a row (XLA CPU), for
# :func:`tile_rows`: tiles of b rows cost (rows + nets · b) multiply-adds per weight for the products and
# (rows / b + nets) · COPY_COST for picking their weights.
COPY_COST = 24.0


def stack_nets(kind: str, nnets: int) -> bool:
    """Whether a model's ``nnets`` nets of ``kind`` ("embedding" or "fitting") run stacked: under
    :data:`MODE` "auto", from :data:`MIN_STACKED` [kind] nets on."""
    if MODE not in ("auto", "always", "never"):
        raise ValueError(f"net_groups.MODE is {MODE!r}, not auto, always or never")
    return MODE == "always" or (MODE == "auto" and nnets >= MIN_STACKED[kind])


def stacked(params: dict, names: Sequence[str]):
    """The weight subtrees ``params[name]`` (all of one structure and shapes) stacked on a leading axis."""
    return jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *[params[n] for n in names])


def pick(tree, which: jax.Array):
    """Rows ``which`` (r,) int of every leaf (K, ...) of ``tree`` → (r, ...), as a product with a one-hot
    (r, K) matrix: its transpose (the weight gradient's sum over the rows of each net) is a product too, not a
    scatter-add. Exact: each entry is 1 · w plus zeros."""

    def leaf(x):
        onehot = (which[:, None] == jnp.arange(x.shape[0])).astype(x.dtype)
        return jnp.matmul(onehot, x.reshape(x.shape[0], -1), precision=PRECISION).reshape((-1,) + x.shape[1:])

    return jax.tree_util.tree_map(leaf, tree)


def tile_rows(rows: int, nnets: int) -> tuple[int, int]:
    """(size, block): tiles of ``block`` rows (a power of two, 8–512) for at most ``rows`` rows per frame of
    ``nnets`` nets, and ``size`` rows per frame (a multiple of block) that hold them whatever their split
    between the nets (each net's last tile padded). The block balances the padded rows (nnets · block)
    against the weights picked per tile (rows / block tiles, :data:`COPY_COST`)."""
    if nnets == 1:
        return max(rows, 1), max(rows, 1)
    b = 2 ** round(math.log2(max(1.0, math.sqrt(COPY_COST * rows / nnets))))
    b = int(min(512, max(8, b)))
    return -(-(rows + nnets * (b - 1)) // b) * b, b


class TileLayout(NamedTuple):
    """Where each slot's row sits when the rows are grouped by net in tiles (:func:`tile_layout`).

    rows: (nf, size) int, the slot of each tiled row (0 where none); row_ok: (nf, size) bool, a row that
    holds a slot; slot_row: (nf, m) int, each slot's row (clipped into range where none); tile_net: (nf,
    size // block) int, each tile's net; block: rows per tile (static)."""

    rows: jax.Array
    row_ok: jax.Array
    slot_row: jax.Array
    tile_net: jax.Array
    block: int


def tile_layout(net: jax.Array, kept: jax.Array, nnets: int, size: int, block: int) -> TileLayout:
    """The tiles of the kept slots: net (nf, m) int, each slot's net (any value where not kept); kept (nf, m)
    bool. The kept slots of net k go, in slot order, to the tiles of net k; the nets' tiles follow each
    other in net order. ``size`` must hold them (:func:`tile_rows`)."""
    nf, m = kept.shape
    net = jnp.clip(net, 0, nnets - 1).astype(jnp.int32)
    onehot = (net[:, None, :] == jnp.arange(nnets, dtype=jnp.int32)[:, None]) & kept[:, None, :]  # (nf, K, m)
    run = running_count(onehot)  # (nf, K, m): each net's running count along the slots
    count = run[..., -1]  # (nf, K)
    end = jnp.cumsum(-(-count // block) * block, axis=-1)  # each net's tiles end here
    start = end - -(-count // block) * block
    rank = jnp.sum(jnp.where(onehot, run, 0), axis=1) - 1  # (nf, m): the slot's place among its net's
    pos = jnp.take_along_axis(start, net, axis=1) + rank
    dest = jnp.where(kept, pos, size)  # out of range: dropped
    slots = jnp.broadcast_to(jnp.arange(m, dtype=jnp.int32), (nf, m))
    rows = jax.vmap(lambda d, s: jnp.zeros(size, jnp.int32).at[d].set(s, mode="drop"))(dest, slots)
    first = jnp.arange(0, size, block, dtype=jnp.int32)  # each tile's first row
    tile_net = jnp.minimum(jnp.sum(end[:, None, :] <= first[None, :, None], axis=-1), nnets - 1).astype(jnp.int32)
    r = jnp.arange(size, dtype=jnp.int32)
    row_net = jnp.repeat(tile_net, block, axis=1)
    row_ok = r - jnp.take_along_axis(start, row_net, axis=1) < jnp.take_along_axis(count, row_net, axis=1)
    return TileLayout(rows, row_ok, jnp.clip(pos, 0, size - 1), tile_net, block)


def _gather_rows(x: jax.Array, rows: jax.Array, ok: jax.Array) -> jax.Array:
    """x (nf, m, ...) rows ``rows`` (nf, k) → (nf, k, ...), 0 where not ``ok``; any-order autodiff."""
    r = jnp.take_along_axis(x, rows.reshape(rows.shape + (1,) * (x.ndim - 2)), axis=1)
    return jnp.where(ok.reshape(ok.shape + (1,) * (x.ndim - 2)), r, 0)


def tiled_embedding(
    weights,
    apply: Callable,
    s: jax.Array,
    net: jax.Array,
    kept: jax.Array,
    nnets: int,
    rows: int,
    *,
    mask: jax.Array | None = None,
    partner: jax.Array | None = None,
    reverse_only: bool = False,
    slope: Callable | None = None,
) -> jax.Array:
    """G(s) of every kept slot through its own net: s (nf, m) the nets' input, net (nf, m) int each slot's
    net, kept (nf, m) bool; weights: the nets' weights stacked on a leading axis (nnets, ...); rows: at most
    this many kept slots per frame. Returns (nf, m, M1), 0 where no row is read.

    apply(w, x): one net with weights w on rows x (b, 1) → (b, M1), vmapped over the tiles (the exact path:
    derivatives of any order). With ``reverse_only`` (the training step's path) the maps between slots and
    rows are gathers with gathers as transposes (:func:`~jaxmd_dp.model.fast.row_take.take`), and
    ``slope(w, x)`` → (G, G′) gives G with G′ as its derivative in s
    (:func:`~jaxmd_dp.model.fast.embed_slope.with_slope`); ``mask``: the slots that read a row (default
    kept), with ``partner`` (nf, m) each slot's reverse pair read from the kept one's row
    (:func:`~jaxmd_dp.model.fast.pair_pack.pack_maps`)."""
    nf, m = kept.shape
    size, block = tile_rows(rows, nnets)
    lay = tile_layout(net, kept, nnets, size, block)
    w = pick(weights, lay.tile_net.reshape(-1))  # (nf · tiles, ...)
    if not reverse_only:
        x = _gather_rows(s, lay.rows, lay.row_ok).reshape(-1, block, 1)
        G = jax.vmap(apply)(w, x).reshape(nf, size, -1)
        return _gather_rows(G, lay.slot_row, kept)
    mask = kept if mask is None else mask
    to_rows = (((lay.rows, lay.row_ok),), ((lay.slot_row, kept),))
    slot_row, fold = lay.slot_row, ((lay.rows, lay.row_ok),)
    if partner is not None:  # the other slot of a pair reads the kept slot's row (pair_pack.pack_maps)
        slot_row = jnp.where(kept, lay.slot_row, jnp.take_along_axis(lay.slot_row, jnp.maximum(partner, 0), axis=1))
        fold = ((lay.rows, lay.row_ok, (jnp.maximum(partner, 0), partner >= 0)),)
    to_slots = (((slot_row, mask),), fold)
    s_rows = take(s, *to_rows)  # (nf, size)
    G, dG = jax.vmap(slope)(w, jax.lax.stop_gradient(s_rows).reshape(-1, block, 1))
    G = with_slope(G.reshape(nf, size, -1), dG.reshape(nf, size, -1), s_rows[..., None])
    return take(G, *to_slots)


def slope_of(apply_ds: Callable, tanh: bool) -> Callable:
    """slope(w, x) → (G, G′) for :func:`tiled_embedding`: for tanh nets the written-out
    :func:`~jaxmd_dp.model.fast.embed_slope.value_and_slope` on the layers of w (``layer_0`` …), else
    apply_ds(w, x, ds) (the net in forward mode) with ds = 1."""
    if tanh:
        return lambda w, x: value_and_slope([dict(w[f"layer_{k}"]) for k in range(len(w))], x)
    return lambda w, x: apply_ds(w, x, jnp.ones_like(x))


def grouped_empty_term(
    weights, apply: Callable, net_of: np.ndarray, mask: jax.Array, empty: jax.Array, atype: jax.Array, sel, keep
) -> jax.Array:
    """Σ over the empty slots of each atom of e ⊗ G(e_0) (:func:`~jaxmd_dp.model.fast.pair_pack.empty_slot_term`)
    for every neighbour type at once, with uniform empty rows (one per centre type and section).

    weights, apply: as :func:`tiled_embedding`; net_of: (ntypes, ntypes) int, the net of (centre type,
    neighbour type); mask: (nf, n, Σ keep) real slots; empty: (ntypes, nnei, 4) normalised empty rows;
    atype: (nf, n) (−1: padding, no share); sel, keep: slots of each section in the model and in mask.
    Returns (nf, n, 4, M1)."""
    nt = len(sel)
    start = np.concatenate([[0], np.cumsum(sel)[:-1]]).astype(int)
    e = jnp.asarray(empty)[:, start, :].reshape(nt * nt, 4)  # (centre, neighbour type) rows
    G = jax.vmap(apply)(pick(weights, jnp.asarray(net_of.reshape(-1))), e[:, None, :1])[:, 0]  # (nt², M1)
    blocks = outer(e, G)  # (nt², 4, M1)
    section = np.repeat(np.eye(nt), keep, axis=0)  # (Σ keep, nt): each slot's section
    filled = jnp.matmul(mask.astype(e.dtype), jnp.asarray(section, e.dtype), precision=PRECISION)
    hole = jnp.asarray(sel, e.dtype) - filled  # (nf, n, nt) empty slots per section
    onehot = (atype[..., None] == jnp.arange(nt)).astype(e.dtype)  # (nf, n, nt); padding: no row
    ind = (onehot[..., :, None] * hole[..., None, :]).reshape(-1, nt * nt)
    out = jnp.matmul(ind, blocks.reshape(nt * nt, -1), precision=PRECISION)
    return out.reshape(mask.shape[:2] + (4, -1))


class TypeBlocks(NamedTuple):
    """The atoms of each type in blocks of one size (:func:`type_blocks`).

    order: (nf, ntypes · block) int, the atom of each block row (type t's block first rows t · block …);
    valid: (nf, ntypes · block) bool, a row that holds an atom; inv: (nf, natoms) int, each atom's row
    (clipped into range for padding atoms); real: (nf, natoms) bool, atoms of a type (not padding)."""

    order: jax.Array
    valid: jax.Array
    inv: jax.Array
    real: jax.Array
    block: int


def type_blocks(atype: jax.Array, ntypes: int, block: int) -> TypeBlocks:
    """Blocks of ``block`` rows per type (≥ the most atoms of any type in a frame): atype (nf, n) int, −1 for
    padding. The atoms of type t fill the first rows of its block in index order."""
    nf, n = atype.shape
    onehot = atype[:, None, :] == jnp.arange(ntypes)[:, None]  # (nf, nt, n)
    rank = jnp.sum(jnp.where(onehot, running_count(onehot), 0), axis=1) - 1  # (nf, n)
    real = (atype >= 0) & (atype < ntypes) & (rank < block)  # (a block too small drops the rest, as type_groups)
    pos = jnp.clip(atype, 0, ntypes - 1) * block + rank
    dest = jnp.where(real, pos, ntypes * block)
    atoms = jnp.broadcast_to(jnp.arange(n, dtype=jnp.int32), (nf, n))
    order = jax.vmap(lambda d, a: jnp.zeros(ntypes * block, jnp.int32).at[d].set(a, mode="drop"))(dest, atoms)
    valid = jax.vmap(lambda d: jnp.zeros(ntypes * block, bool).at[d].set(True, mode="drop"))(dest)
    return TypeBlocks(order, valid, jnp.clip(pos, 0, ntypes * block - 1).astype(jnp.int32), real, block)


def stacked_fitting(
    weights, apply: Callable, D: jax.Array, atype: jax.Array, ntypes: int, block: int | None, reverse_only: bool
) -> jax.Array:
    """Each atom's energy from its type's net, the nets vmapped over the type axis: D (nf, n, dim), atype
    (nf, n); weights (ntypes, ...); apply(w, x) one net on rows x (..., dim) → (..., 1). block: rows per
    type (≥ the most atoms of a type in a frame; None: every atom in every type's block, no gather).
    Returns (nf, n), 0 for padding atoms."""
    nf, n, dim = D.shape
    if block is None or block >= n:  # every net on every atom, its own type's energy kept
        E = jax.vmap(apply, in_axes=(0, None))(weights, D)[..., 0]  # (nt, nf, n)
        onehot = atype[None] == jnp.arange(ntypes)[:, None, None]
        return jnp.sum(jnp.where(onehot, E, 0), axis=0)
    tb = type_blocks(atype, ntypes, block)
    if reverse_only:
        X = take(D, ((tb.order, tb.valid),), ((tb.inv, tb.real),))
    else:
        X = _gather_rows(D, tb.order, tb.valid)
    X = jnp.swapaxes(X.reshape(nf, ntypes, block, dim), 0, 1)  # (nt, nf, block, dim)
    E = jnp.swapaxes(jax.vmap(apply)(weights, X)[..., 0], 0, 1).reshape(nf, ntypes * block)
    if reverse_only:
        return take(E, ((tb.inv, tb.real),), ((tb.order, tb.valid),))
    return _gather_rows(E, tb.inv, tb.real)
