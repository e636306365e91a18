"""Neighbour list with DeePMD-kit's per-type ``sel`` slots as a Pallas (Triton) kernel.

Same inputs and outputs as ``jaxmd_dp.geometry.neighbor.build`` for a given ``NeighborSpec`` (read by
attribute: ``rcut, sel, pbc, method, reach, ncell, capacity``; this package does not import jaxmd_dp).

Split of the work:

* jnp (cheap, O(N)): fractional coordinates, wrapping into the cell, cell binning and the cell table
  (ncells, capacity) of atom indices in ascending order, and the ``cell_overflow`` flag. The brute-force
  method and the non-periodic case are the same computation with a single cell holding every atom.
* kernel (grid = frames × blocks of BA centre atoms): candidate p = (offset, slot in the target cell)
  of every centre enumerates the cells within ``reach``; the kernel decodes p into the target cell,
  its periodic image and the candidate atom (gathered from the table), computes the squared distance,
  masks (empty, outside rcut, self in the home image, padding atoms), counts neighbours per type
  (``nneigh``) and fills the ``sel[t]`` slots of each type nearest first by iterative extraction of the
  lexicographic minimum of (r², p). Ties are broken by the candidate order, as ``lax.top_k`` does in the
  jnp reference, so the slot order is identical to the reference (not merely the same set).
  When all candidates of a centre fit in one chunk (``MAX_CHUNK``) they stay in registers and each
  extraction is two masked reductions; otherwise every extraction re-streams the candidate chunks.
  That is ``sum(sel)`` passes over the candidates. Order "any" (what training stores: the slots' order
  does not change the model) takes one: each valid candidate goes to the slot of its rank among its
  row's candidates of its type (a cumulative sum), by a masked scatter store; only a block of centres
  where one has more neighbours of a type than its slots extracts that type's nearest as above.

Outputs: ``idx`` (nf, natoms, nnei) int32 (−1 empty), ``shift`` (nf, natoms, nnei, 3) integral image
in cell vectors (coordinate dtype) with coord[j] − coord[i] + shift @ box the pair vector,
``nneigh`` (nf, natoms, ntypes) int32, ``cell_overflow`` () bool.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plt

from ._common import box16 as _box16
from ._common import jit_enabled, next_pow2, pad_axis, round_up, triton_params

MAX_CHUNK = 1024  # candidates per centre held in registers at once (power of two)
MAX_TILE = 1024  # BA × chunk elements per program (register budget)


class NeighborList(NamedTuple):
    """Field-for-field the same as ``jaxmd_dp.geometry.neighbor.NeighborList``."""

    idx: jax.Array
    shift: jax.Array
    nneigh: jax.Array
    cell_overflow: jax.Array


class _Cfg(NamedTuple):
    rcut: float
    sel: tuple[int, ...]
    reach: tuple[int, int, int]
    ncell: tuple[int, int, int]
    cap: int  # table width: atoms per cell (the spec's capacity; natoms for brute force / no PBC)
    ncand: int  # noff * cap
    chunk: int  # candidates per chunk (power of two)
    nchunks: int
    ba: int
    natoms_p: int


def _geometry_plan(spec, natoms: int):
    """(reach, ncell, capacity) of the unified cell computation for ``spec``."""
    if not spec.pbc:
        return (0, 0, 0), (1, 1, 1), natoms
    if spec.method == "cell":
        return tuple(spec.reach), tuple(spec.ncell), int(spec.capacity)
    return tuple(spec.reach), (1, 1, 1), natoms


def plan(spec, natoms: int) -> _Cfg:
    """Static tiling of the kernel for ``spec`` and ``natoms`` atoms."""
    reach, ncell, cap = _geometry_plan(spec, natoms)
    noff = math.prod(2 * r + 1 for r in reach)
    ncand = noff * cap
    chunk = min(next_pow2(ncand), MAX_CHUNK)
    nchunks = -(-ncand // chunk)
    ba = max(1, min(16, MAX_TILE // chunk, next_pow2(natoms)))
    return _Cfg(
        float(spec.rcut),
        tuple(int(s) for s in spec.sel),
        reach,
        ncell,
        cap,
        ncand,
        chunk,
        nchunks,
        ba,
        round_up(natoms, ba),
    )


# ----------------------------------------------------------------------------------------------
# jnp preparation: wrapping and cell binning (per frame, vmapped)
# ----------------------------------------------------------------------------------------------


def _prepare_frame(cfg: _Cfg, pbc: bool, coord, box, box_inv, atype):
    natoms = coord.shape[0]
    ncells = math.prod(cfg.ncell)
    if pbc:
        frac = coord @ box_inv
        wrap = jnp.floor(frac)
        fw = frac - wrap
        cw = fw @ box
        ncell = jnp.asarray(cfg.ncell)
        c3 = jnp.minimum((fw * ncell).astype(jnp.int32), ncell - 1).astype(jnp.int32)
    else:
        wrap = jnp.zeros_like(coord)
        cw = coord
        c3 = jnp.zeros((natoms, 3), jnp.int32)
    cid = (c3[:, 0] * cfg.ncell[1] + c3[:, 1]) * cfg.ncell[2] + c3[:, 2]
    cid = jnp.where(atype >= 0, cid, ncells)  # padding atoms: dummy cell, never candidates
    order = jnp.argsort(cid, stable=True)
    counts = jnp.zeros(ncells + 1, jnp.int32).at[cid].add(1)
    start = jnp.cumsum(counts) - counts
    slot = jnp.arange(natoms) - start[cid[order]]
    table = jnp.full((ncells + 1, cfg.cap), -1, jnp.int32)
    table = table.at[cid[order], slot].set(order.astype(jnp.int32), mode="drop")[:ncells]
    return cw, wrap, c3, table, counts[:ncells]


# ----------------------------------------------------------------------------------------------
# Kernel
# ----------------------------------------------------------------------------------------------


def _decode(cfg: _Cfg, p, c3i, table_ref):
    """Candidate number p = offset·cap + slot (int32 tensor) → (j (−1: none), image (3 int32 tensors)).

    The offset enumerates the cells within ``reach`` of the centre's cell c3i (x slowest, as the jnp
    reference's ``_offsets``); the target cell is wrapped into the grid and its image recorded."""
    rx, ry, rz = cfg.reach
    ny_o, nz_o = 2 * ry + 1, 2 * rz + 1
    in_range = p < cfg.ncand
    pc = jnp.where(in_range, p, 0)
    off = lax.div(pc, jnp.int32(cfg.cap))
    slot = lax.rem(pc, jnp.int32(cfg.cap))
    o = (
        lax.div(off, jnp.int32(ny_o * nz_o)) - rx,
        lax.rem(lax.div(off, jnp.int32(nz_o)), jnp.int32(ny_o)) - ry,
        lax.rem(off, jnp.int32(nz_o)) - rz,
    )
    img, tw = [], []
    for k in range(3):
        n = cfg.ncell[k]
        lift = (cfg.reach[k] // n + 1) * n  # makes tgt + lift >= 0
        tgt = c3i[k] + o[k]
        im = lax.div(tgt + lift, jnp.int32(n)) - (lift // n)
        img.append(im)
        tw.append(tgt - im * n)
    tid = (tw[0] * cfg.ncell[1] + tw[1]) * cfg.ncell[2] + tw[2]
    j = table_ref[tid, slot]
    j = jnp.where(in_range, j, -1)
    return j, img


def _candidates(cfg: _Cfg, start, ctx, refs):
    """Candidates [start, start + chunk) of the block's centres, each (BA, chunk): number p, squared
    distance, valid (within rcut, not the centre itself), type, atom index (0 where none) and image."""
    cw_ref, atype_ref, table_ref, box_ref = refs
    rows_i, ci, c3i, real_i = ctx
    ba, cc = cfg.ba, cfg.chunk
    p = lax.convert_element_type(start, jnp.int32) + lax.broadcasted_iota(jnp.int32, (ba, cc), 1)
    j, img = _decode(cfg, p, [c[:, None] for c in c3i], table_ref)
    exists = j >= 0
    jj = jnp.where(exists, j, 0)
    r2 = None
    for k in range(3):
        ib = (
            img[0].astype(ci[0].dtype) * box_ref[k]
            + img[1].astype(ci[0].dtype) * box_ref[3 + k]
            + img[2].astype(ci[0].dtype) * box_ref[6 + k]
        )
        dk = (cw_ref[jj, k] + ib) - ci[k][:, None]
        r2 = dk * dk if r2 is None else r2 + dk * dk
    home = (img[0] == 0) & (img[1] == 0) & (img[2] == 0)
    is_self = (jj == rows_i[:, None]) & home
    valid = exists & (r2 < cfg.rcut * cfg.rcut) & jnp.logical_not(is_self) & real_i[:, None]
    ctype = atype_ref[jj]
    return p, r2, valid, ctype, jj, img


def _lexmin(key, p, last_r2, last_p):
    """Smallest (key, p) strictly after (last_r2, last_p), per row; key = inf marks non-candidates."""
    after = (key > last_r2[:, None]) | ((key == last_r2[:, None]) & (p > last_p[:, None]))
    elig = (key < jnp.inf) & after
    inf = jnp.full_like(key, jnp.inf)
    m = jnp.min(jnp.where(elig, key, inf), axis=1)
    big = jnp.full_like(p, jnp.iinfo(jnp.int32).max)
    pm = jnp.min(jnp.where(elig & (key == m[:, None]), p, big), axis=1)
    return m, pm


def _compact(cfg: _Cfg, ctx, refs, cand, wi, wrap_ref, idx_ref, shift_ref):
    """Order "any": every slot emptied, then each type's neighbours written in candidate order, a
    candidate's slot its rank among the row's earlier candidates of its type (a running count over the
    chunks plus a cumulative sum within one), those ranked past ``sel[t]`` dropped. Returns the number of
    neighbours of each type, ((BA,) int32 per type), before truncation."""
    ba, cc = cfg.ba, cfg.chunk
    dtype = wi[0].dtype
    rows = lax.broadcasted_iota(jnp.int32, (ba, cc), 0)

    def clear(col, carry):
        idx_ref[:, col] = jnp.full((ba,), -1, jnp.int32)
        for k in range(3):
            shift_ref[:, col, k] = jnp.zeros((ba,), dtype)
        return carry

    nnei = sum(cfg.sel)
    lax.fori_loop(0, nnei, clear, 0)
    first = [sum(cfg.sel[:t]) for t in range(len(cfg.sel))]

    def chunk_body(c, counts):
        _, _, valid, ctype, jj, img = cand if cand is not None else _candidates(cfg, c * cc, ctx, refs)
        shift = [(img[k].astype(dtype) + wi[k][:, None]) - wrap_ref[jj, k] for k in range(3)]
        out = []
        for t, nsel in enumerate(cfg.sel):
            ok = valid & (ctype == t)
            n = ok.astype(jnp.int32)
            rank = counts[t][:, None] + jnp.cumsum(n, axis=1) - n
            keep = ok & (rank < nsel)
            # masked-off lanes all point at the spare last column: Pallas' interpreter writes their old
            # values back, which must not land on a real slot
            col = jnp.where(keep, first[t] + rank, nnei)
            plt.store(idx_ref.at[rows, col], jj, mask=keep)
            for k in range(3):
                plt.store(shift_ref.at[rows, col, k], shift[k], mask=keep)
            out.append(counts[t] + jnp.sum(n, axis=1, dtype=jnp.int32))
        return tuple(out)

    zeros = tuple(jnp.zeros((ba,), jnp.int32) for _ in cfg.sel)
    return chunk_body(0, zeros) if cand is not None else lax.fori_loop(0, cfg.nchunks, chunk_body, zeros)


def _nl_kernel(cw_ref, wrap_ref, c3_ref, atype_ref, table_ref, box_ref, idx_ref, shift_ref, nn_ref, *, cfg, order):
    ba = cfg.ba
    rows_i = pl.program_id(1) * ba + lax.broadcasted_iota(jnp.int32, (ba,), 0)
    ci = [cw_ref[rows_i, k] for k in range(3)]
    wi = [wrap_ref[rows_i, k] for k in range(3)]
    c3i = [c3_ref[rows_i, k] for k in range(3)]
    real_i = atype_ref[rows_i] >= 0
    ctx = (rows_i, ci, c3i, real_i)
    refs = (cw_ref, atype_ref, table_ref, box_ref)
    dtype = ci[0].dtype
    inf = jnp.full((ba, cfg.chunk), jnp.inf, dtype)

    single = cfg.nchunks == 1
    cand = _candidates(cfg, jnp.int32(0), ctx, refs) if single else None  # all in registers, computed once
    if order == "any":
        counts = _compact(cfg, ctx, refs, cand, wi, wrap_ref, idx_ref, shift_ref)

    base = 0
    for t, nsel in enumerate(cfg.sel):
        # neighbours of type t within rcut (before truncation to sel)
        if single:
            p, r2, valid, ctype = cand[:4]
            key_t = jnp.where(valid & (ctype == t), r2, inf)
        if order == "any":
            count = counts[t]
        elif single:
            count = jnp.sum((valid & (ctype == t)).astype(jnp.int32), axis=1, dtype=jnp.int32)
        else:

            def count_body(c, acc, t=t):
                _, _, valid, ctype, _, _ = _candidates(cfg, c * cfg.chunk, ctx, refs)
                return acc + jnp.sum((valid & (ctype == t)).astype(jnp.int32), axis=1, dtype=jnp.int32)

            count = lax.fori_loop(0, cfg.nchunks, count_body, jnp.zeros((ba,), jnp.int32))
        nn_ref[:, t] = count

        def step(s, carry, t=t, base=base):
            last_r2, last_p = carry
            if single:
                m, pm = _lexmin(key_t, p, last_r2, last_p)
            else:

                def chunk_body(c, best):
                    bm, bp = best
                    pc, r2c, validc, ctypec, _, _ = _candidates(cfg, c * cfg.chunk, ctx, refs)
                    keyc = jnp.where(validc & (ctypec == t), r2c, inf)
                    mc, pmc = _lexmin(keyc, pc, last_r2, last_p)
                    take = (mc < bm) | ((mc == bm) & (pmc < bp))
                    return jnp.where(take, mc, bm), jnp.where(take, pmc, bp)

                init = (jnp.full((ba,), jnp.inf, dtype), jnp.full((ba,), jnp.iinfo(jnp.int32).max, jnp.int32))
                m, pm = lax.fori_loop(0, cfg.nchunks, chunk_body, init)
            found = m < jnp.inf
            j, img = _decode(cfg, jnp.where(found, pm, 0), c3i, table_ref)
            jj = jnp.where(found, j, 0)
            col = base + lax.convert_element_type(s, jnp.int32)
            idx_ref[:, col] = jnp.where(found, j, -1)
            zero = jnp.zeros((ba,), dtype)
            for k in range(3):
                sk = (img[k].astype(dtype) + wi[k]) - wrap_ref[jj, k]
                shift_ref[:, col, k] = jnp.where(found, sk, zero)
            return jnp.where(found, m, last_r2), jnp.where(found, pm, last_p)

        # nearest first by extraction: always for order "nearest"; for "any" only where a centre of the
        # block has more neighbours of type t than its slots (it then overwrites the block's type-t slots)
        init = (jnp.full((ba,), -1.0, dtype), jnp.full((ba,), -1, jnp.int32))
        if order == "nearest":
            lax.fori_loop(0, nsel, step, init)
        else:  # both bounds int32 (a loop with a traced bound lowers to scf.for, which wants one type)
            trips = jnp.where(jnp.max(count) > nsel, jnp.int32(nsel), jnp.int32(0))
            lax.fori_loop(jnp.int32(0), trips, step, init)
        base += nsel


@jit_enabled
def _nl_call(cfg: _Cfg, order: str, cw4, wrap4, c3_4, atype, table, box16, interpret: bool):
    nf, na, _ = cw4.shape
    nc, cap = table.shape[1:]
    nnei = sum(cfg.sel) + (order == "any")  # "any": one more column, where masked-off scatter lanes point
    ntypes = len(cfg.sel)
    ba = cfg.ba
    frame = lambda shape: pl.BlockSpec((None,) + shape, lambda f, a: (f,) + (0,) * len(shape))
    return pl.pallas_call(
        functools.partial(_nl_kernel, cfg=cfg, order=order),
        out_shape=(
            jax.ShapeDtypeStruct((nf, na, nnei), jnp.int32),
            jax.ShapeDtypeStruct((nf, na, nnei, 3), cw4.dtype),
            jax.ShapeDtypeStruct((nf, na, ntypes), jnp.int32),
        ),
        grid=(nf, na // ba),
        in_specs=[frame((na, 4)), frame((na, 4)), frame((na, 4)), frame((na,)), frame((nc, cap)), frame((16,))],
        out_specs=(
            pl.BlockSpec((None, ba, nnei), lambda f, a: (f, a, 0)),
            pl.BlockSpec((None, ba, nnei, 3), lambda f, a: (f, a, 0, 0)),
            pl.BlockSpec((None, ba, ntypes), lambda f, a: (f, a, 0)),
        ),
        interpret=interpret,
        compiler_params=triton_params(),
        name="neighbor_list",
    )(cw4, wrap4, c3_4, atype, table, box16)


# ----------------------------------------------------------------------------------------------
# Public API
# ----------------------------------------------------------------------------------------------


def build(
    spec,
    coord: jax.Array,
    box: jax.Array | None,
    atype: jax.Array,
    *,
    order: str = "nearest",
    box_inverse: jax.Array | None = None,
    interpret: bool = False,
) -> NeighborList:
    """Build the neighbour list of each frame with the Pallas kernel.

    Args:
      spec: a ``jaxmd_dp.geometry.neighbor.NeighborSpec`` (static).
      coord: (nframes, natoms, 3) Å.
      box: (nframes, 3, 3) Å, rows are cell vectors; ignored (may be None) when ``spec.pbc`` is False.
      atype: (natoms,) or (nframes, natoms) int, atom types; −1 marks padding atoms (never neighbours).
      order: "nearest": each type's slots nearest first; "any": in candidate order (no selection: one
        pass over the candidates), except in blocks of centres where one has more neighbours of a type
        than its ``sel`` slots, which get that type's nearest. The same neighbours either way wherever
        no type overflows, so the same model outputs up to float rounding.
      box_inverse: (nframes, 3, 3) 1/Å, the inverse of ``box``, where the caller has it (a GPU computes
        ``jnp.linalg.inv`` with a few cuSOLVER kernels); by default that.
      interpret: run the kernel with Pallas' interpreter (CPU).

    Returns:
      A :class:`NeighborList` with ``nnei = sum(spec.sel)`` slots per atom; with order "nearest" identical
      to the jnp build's, with "any" to its order "any" wherever no type overflows.
    """
    if order not in ("nearest", "any"):
        raise ValueError(f"order must be 'nearest' or 'any', not {order!r}")
    coord = lax.stop_gradient(jnp.asarray(coord))
    dtype = coord.dtype
    nf, natoms = coord.shape[:2]
    atype = jnp.broadcast_to(jnp.asarray(atype), (nf, natoms)).astype(jnp.int32)
    pbc = bool(spec.pbc) and box is not None
    if pbc:
        box = lax.stop_gradient(jnp.asarray(box, dtype))
        inv = jnp.linalg.inv(box) if box_inverse is None else lax.stop_gradient(jnp.asarray(box_inverse, dtype))
    else:
        box = inv = jnp.zeros((nf, 3, 3), dtype)
    cfg = plan(spec, natoms)
    prepare = jax.vmap(lambda c, b, bi, t: _prepare_frame(cfg, pbc, c, b, bi, t))
    cw, wrap, c3, table, counts = prepare(coord, box, inv, atype)
    if pbc and spec.method == "cell":
        overflow = jnp.any(counts > spec.capacity)
    else:
        overflow = jnp.asarray(False)
    na = cfg.natoms_p
    cw4 = pad_axis(pad_axis(cw, 2, 4), 1, na)
    wrap4 = pad_axis(pad_axis(wrap, 2, 4), 1, na)
    c3_4 = pad_axis(pad_axis(c3, 2, 4), 1, na)
    at = pad_axis(atype, 1, na, -1)
    idx, shift, nneigh = _nl_call(cfg, order, cw4, wrap4, c3_4, at, table, _box16(box, nf, dtype), interpret)
    nnei = sum(cfg.sel)
    return NeighborList(idx[:, :natoms, :nnei], shift[:, :natoms, :nnei], nneigh[:, :natoms], overflow)


def candidates_per_atom(spec, natoms: int) -> int:
    """Candidates the kernel examines per centre atom (cells within reach × padded capacity)."""
    return plan(spec, natoms).ncand


__all__ = ["NeighborList", "build", "plan", "candidates_per_atom"]
