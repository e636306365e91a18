"""DeePMD se_e2_a environment matrix as Pallas (Triton) kernels, with a differentiable backward.

For a centre atom i and a slot holding neighbour j with d = r_j − r_i + shift @ box and r = |d|,
the unnormalised row is w(r)·[1/r, d/r²] (zero for an empty slot, idx = −1), with DeePMD's switch
w(u) = u³(−6u² + 15u − 10) + 1, u = (clip(r, rcut_smth, rcut) − rcut_smth)/(rcut − rcut_smth); every slot
is then normalised per centre type, R = (row − davg[t_i]) / dstd[t_i] — the same semantics as
``jaxmd_dp.geometry.env_mat.env_mat``.

Kernels (grid = frames × atom blocks × slot blocks; every program owns a (BA, BN) tile of slots):

* forward ``R``: gathers r_j from the frame's coordinates, builds d, the switch and the rows, normalises.
* ``vjp`` (DeePMD-kit's prod_force / prod_virial): from ∂E/∂R to ∂E/∂coord and ∂E/∂box. Per slot
  it recomputes dR/dd in registers (cheaper than storing the (…,4,3) Jacobian: 12 floats a slot written
  and read back versus the slot's idx and shift), forms g_d = (dR/dd)ᵀ ∂E/∂R, scatters +g_d onto the
  neighbour and −g_d onto the centre with atomic adds, and writes per-tile partial sums of
  shiftᵀ g_d (∂E/∂box), summed over tiles in jnp.
* ``jvp`` (tangent map): t_R = (dR/dd)·(t_j − t_i + shift @ t_box), the transpose of ``vjp`` in the
  cotangent. It is what reverse mode needs to differentiate ``vjp`` with respect to ∂E/∂R.

Differentiability: ``env_mat`` is a ``jax.custom_vjp`` whose backward calls ``_vjp_op``; ``_vjp_op`` and
``_jvp_op`` are ``custom_vjp`` functions whose backward passes call each other (the linear parts, as
kernels) plus a jnp term ∇_X⟨g, J_X t⟩ for the dependence of the Jacobian J on the coordinates / box
(second derivatives of the rows). Training differentiates a force loss with respect to the weights:
that needs only the linear parts (one jvp kernel); the jnp term is traced only when the geometry itself
is differentiated twice (symbolic zeros tell the rules which inputs are perturbed). So ``jax.grad``
works to any order in reverse mode; forward mode (``jax.jvp``, ``jacfwd``, ``hessian``) is not
supported, as for any ``custom_vjp``. ``davg`` and ``dstd`` are treated as constants (no gradient).
The forward kernel stores only R: the backward kernels recompute d and dR/dd in registers, which costs
~60 FLOPs a slot instead of writing and re-reading a (…, 4, 3) Jacobian (12 floats a slot).

Layouts inside the wrappers (padded to block multiples, sliced back): coord → (nf, NA, 4) (x, y, z, 0),
box → (nf, 16) (row-major 3×3, zero padded), idx → (nf, NA, NN) int32 (−1 padding), shift →
(nf, NA, NN, 4), davg/dstd → (ntypes, NN, 4) (0 / 1 padding).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from jax.custom_derivatives import SymbolicZero
from jax.experimental import pallas as pl

from ._common import box16 as _box16
from ._common import jit_enabled, next_pow2, pad_axis, round_up, triton_params

BLOCK_ATOMS = 16  # BA: centre atoms per program (power of two)
BLOCK_NEI = 32  # BN: slots per program (power of two)


class _Cfg(NamedTuple):
    """Static configuration (hashable): cut-offs, interpret mode and tile sizes."""

    rcut: float
    rcut_smth: float
    interpret: bool
    ba: int
    bn: int


# ----------------------------------------------------------------------------------------------
# In-kernel helpers (operate on (BA, BN) tiles)
# ----------------------------------------------------------------------------------------------


def _centre_rows(ba: int):
    return pl.program_id(1) * ba + lax.broadcasted_iota(jnp.int32, (ba,), 0)


def _pair_vectors(coord_ref, box_ref, shifts, jj, rows_i):
    """d_k = c[j]_k − c[i]_k + Σ_c shift_c box[c, k], k = 0..2, each (BA, BN)."""
    out = []
    for k in range(3):
        sb = shifts[0] * box_ref[k] + shifts[1] * box_ref[3 + k] + shifts[2] * box_ref[6 + k]
        ci = coord_ref[rows_i, k]
        cj = coord_ref[jj, k]
        out.append((cj - ci[:, None]) + sb)
    return out


def _load_tile(idx_ref, shift_ref):
    j = idx_ref[...]
    valid = j >= 0
    jj = jnp.where(valid, j, 0)
    shifts = [shift_ref[:, :, c] for c in range(3)]
    return valid, jj, shifts


def _geometry(d, valid, rcut: float, rcut_smth: float, need_jac: bool):
    """Switch and rows, and (optionally) the Jacobian coefficients of the rows.

    rows: w/r, (w/r²) d. Jacobian: ∂(w/r)/∂d = a0·d, ∂((w/r²) d_k)/∂d_m = b δ_km + c d_k d_m.
    Empty slots use the dummy vector (1, 1, 1) (no 0/0); callers mask them.
    """
    one = jnp.ones_like(d[0])
    dx, dy, dz = (jnp.where(valid, x, one) for x in d)
    r2 = dx * dx + dy * dy + dz * dz
    r = jnp.sqrt(r2)
    width = rcut - rcut_smth
    u = (jnp.minimum(jnp.maximum(r, rcut_smth), rcut) - rcut_smth) / width
    w = u * u * u * (-6.0 * u * u + 15.0 * u - 10.0) + 1.0
    geo = {"d": (dx, dy, dz), "r": r, "r2": r2, "w": w}
    if need_jac:
        dw = -30.0 * (u * u) * ((u - 1.0) * (u - 1.0)) / width  # dw/dr, 0 outside (rcut_smth, rcut)
        inv_r = 1.0 / r
        inv_r2 = 1.0 / r2
        geo["a0"] = (dw - w * inv_r) * inv_r2
        geo["b"] = w * inv_r2
        geo["c"] = (dw - 2.0 * w * inv_r) * (inv_r * inv_r2)
    return geo


def _norm_index(atype_ref, bn: int, ba: int):
    t = atype_ref[...]
    t2 = jnp.broadcast_to(t[:, None], (ba, bn))
    s2 = pl.program_id(2) * bn + lax.broadcasted_iota(jnp.int32, (ba, bn), 1)
    return t2, s2


# ----------------------------------------------------------------------------------------------
# Kernels
# ----------------------------------------------------------------------------------------------


def _fwd_kernel(coord_ref, box_ref, atype_ref, idx_ref, shift_ref, davg_ref, dstd_ref, out_ref, *, cfg):
    ba, bn = cfg.ba, cfg.bn
    rows_i = _centre_rows(ba)
    valid, jj, shifts = _load_tile(idx_ref, shift_ref)
    d = _pair_vectors(coord_ref, box_ref, shifts, jj, rows_i)
    g = _geometry(d, valid, cfg.rcut, cfg.rcut_smth, need_jac=False)
    zero = jnp.zeros_like(g["w"])
    w_r2 = g["w"] / g["r2"]
    rows = [g["w"] / g["r"], w_r2 * g["d"][0], w_r2 * g["d"][1], w_r2 * g["d"][2]]
    t2, s2 = _norm_index(atype_ref, bn, ba)
    for k in range(4):
        rk = jnp.where(valid, rows[k], zero)
        out_ref[:, :, k] = (rk - davg_ref[t2, s2, k]) / dstd_ref[t2, s2, k]


def _vjp_kernel(coord_ref, box_ref, atype_ref, idx_ref, shift_ref, dstd_ref, g_ref, gc_in_ref, gc_ref, gb_ref, *, cfg):
    del gc_in_ref  # aliased with gc_ref (zero-initialised accumulator)
    ba, bn = cfg.ba, cfg.bn
    rows_i = _centre_rows(ba)
    valid, jj, shifts = _load_tile(idx_ref, shift_ref)
    d = _pair_vectors(coord_ref, box_ref, shifts, jj, rows_i)
    geo = _geometry(d, valid, cfg.rcut, cfg.rcut_smth, need_jac=True)
    t2, s2 = _norm_index(atype_ref, bn, ba)
    g = [g_ref[:, :, k] / dstd_ref[t2, s2, k] for k in range(4)]
    dx, dy, dz = geo["d"]
    gdotd = g[1] * dx + g[2] * dy + g[3] * dz
    s = geo["a0"] * g[0] + geo["c"] * gdotd
    zero = jnp.zeros_like(s)
    gd = [jnp.where(valid, s * dm + geo["b"] * gm, zero) for dm, gm in zip(geo["d"], g[1:])]
    # neighbours get +g_d; empty slots add an exact 0 to their own centre (spreads atomic traffic)
    tgt = jnp.where(valid, jj, jnp.broadcast_to(rows_i[:, None], (ba, bn)))
    for m in range(3):
        jax.ref.addupdate(gc_ref, (tgt, m), gd[m])
    for m in range(3):
        jax.ref.addupdate(gc_ref, (rows_i, m), -jnp.sum(gd[m], axis=1))
    # ∂E/∂box[c, m] = Σ shift_c g_d,m: per-tile partial sums, padded to 16 entries
    lane = lax.broadcasted_iota(jnp.int32, (16,), 0)
    part = jnp.zeros((16,), gd[0].dtype)
    for c in range(3):
        for m in range(3):
            part = jnp.where(lane == 3 * c + m, jnp.sum(shifts[c] * gd[m]), part)
    gb_ref[...] = part


def _jvp_kernel(coord_ref, box_ref, atype_ref, idx_ref, shift_ref, dstd_ref, tc_ref, tb_ref, out_ref, *, cfg):
    ba, bn = cfg.ba, cfg.bn
    rows_i = _centre_rows(ba)
    valid, jj, shifts = _load_tile(idx_ref, shift_ref)
    d = _pair_vectors(coord_ref, box_ref, shifts, jj, rows_i)
    dd = _pair_vectors(tc_ref, tb_ref, shifts, jj, rows_i)
    geo = _geometry(d, valid, cfg.rcut, cfg.rcut_smth, need_jac=True)
    dx, dy, dz = geo["d"]
    dot = dx * dd[0] + dy * dd[1] + dz * dd[2]
    cdot = geo["c"] * dot
    t = [geo["a0"] * dot] + [geo["b"] * ddm + cdot * dm for ddm, dm in zip(dd, geo["d"])]
    t2, s2 = _norm_index(atype_ref, bn, ba)
    zero = jnp.zeros_like(dot)
    for k in range(4):
        out_ref[:, :, k] = jnp.where(valid, t[k], zero) / dstd_ref[t2, s2, k]


# ----------------------------------------------------------------------------------------------
# pallas_call wrappers (padded layouts)
# ----------------------------------------------------------------------------------------------


def _specs(cfg, nf, na, nn, ntypes):
    ba, bn = cfg.ba, cfg.bn
    return dict(
        coord=pl.BlockSpec((None, na, 4), lambda f, a, n: (f, 0, 0)),
        box=pl.BlockSpec((None, 16), lambda f, a, n: (f, 0)),
        atype=pl.BlockSpec((None, ba), lambda f, a, n: (f, a)),
        idx=pl.BlockSpec((None, ba, bn), lambda f, a, n: (f, a, n)),
        shift=pl.BlockSpec((None, ba, bn, 4), lambda f, a, n: (f, a, n, 0)),
        stat=pl.BlockSpec((ntypes, nn, 4), lambda f, a, n: (0, 0, 0)),
        tile4=pl.BlockSpec((None, ba, bn, 4), lambda f, a, n: (f, a, n, 0)),
    )


def _grid(cfg, nf, na, nn):
    return (nf, na // cfg.ba, nn // cfg.bn)


@jit_enabled
def _fwd_call(cfg, coord4, box16, atype, idx, shift, davg, dstd):
    nf, na, _ = coord4.shape
    nn = idx.shape[-1]
    sp = _specs(cfg, nf, na, nn, davg.shape[0])
    return pl.pallas_call(
        functools.partial(_fwd_kernel, cfg=cfg),
        out_shape=jax.ShapeDtypeStruct((nf, na, nn, 4), coord4.dtype),
        grid=_grid(cfg, nf, na, nn),
        in_specs=[sp["coord"], sp["box"], sp["atype"], sp["idx"], sp["shift"], sp["stat"], sp["stat"]],
        out_specs=sp["tile4"],
        interpret=cfg.interpret,
        compiler_params=triton_params(),
        name="env_mat_fwd",
    )(coord4, box16, atype, idx, shift, davg, dstd)


@jit_enabled
def _vjp_call(cfg, coord4, box16, atype, idx, shift, dstd, g):
    nf, na, _ = coord4.shape
    nn = idx.shape[-1]
    sp = _specs(cfg, nf, na, nn, dstd.shape[0])
    grid = _grid(cfg, nf, na, nn)
    gc0 = jnp.zeros_like(coord4)
    gc, gb = pl.pallas_call(
        functools.partial(_vjp_kernel, cfg=cfg),
        out_shape=(
            jax.ShapeDtypeStruct(coord4.shape, coord4.dtype),
            jax.ShapeDtypeStruct((nf, grid[1], grid[2], 16), coord4.dtype),
        ),
        grid=grid,
        in_specs=[sp["coord"], sp["box"], sp["atype"], sp["idx"], sp["shift"], sp["stat"], sp["tile4"], sp["coord"]],
        out_specs=(sp["coord"], pl.BlockSpec((None, None, None, 16), lambda f, a, n: (f, a, n, 0))),
        input_output_aliases={7: 0},
        interpret=cfg.interpret,
        compiler_params=triton_params(),
        name="env_mat_vjp",
    )(coord4, box16, atype, idx, shift, dstd, g, gc0)
    return gc, jnp.sum(gb, axis=(1, 2))


@jit_enabled
def _jvp_call(cfg, coord4, box16, atype, idx, shift, dstd, tc4, tb16):
    nf, na, _ = coord4.shape
    nn = idx.shape[-1]
    sp = _specs(cfg, nf, na, nn, dstd.shape[0])
    return pl.pallas_call(
        functools.partial(_jvp_kernel, cfg=cfg),
        out_shape=jax.ShapeDtypeStruct((nf, na, nn, 4), coord4.dtype),
        grid=_grid(cfg, nf, na, nn),
        in_specs=[sp["coord"], sp["box"], sp["atype"], sp["idx"], sp["shift"], sp["stat"], sp["coord"], sp["box"]],
        out_specs=sp["tile4"],
        interpret=cfg.interpret,
        compiler_params=triton_params(),
        name="env_mat_jvp",
    )(coord4, box16, atype, idx, shift, dstd, tc4, tb16)


# ----------------------------------------------------------------------------------------------
# jnp pieces: the rows on padded layouts (for the second-derivative term)
# ----------------------------------------------------------------------------------------------


def _rows_jnp(coord4, box16, idx, shift, rcut: float, rcut_smth: float):
    nf = coord4.shape[0]
    mask = idx >= 0
    j = jnp.where(mask, idx, 0)
    cj = jax.vmap(lambda c, jf: c[jf])(coord4[..., :3], j)
    box = box16[:, :9].reshape(nf, 3, 3)
    d = cj - coord4[:, :, None, :3] + jnp.einsum("fasc,fck->fask", shift[..., :3], box)
    safe = jnp.where(mask[..., None], d, jnp.ones_like(d))
    r2 = jnp.sum(safe * safe, axis=-1)
    r = jnp.sqrt(r2)
    u = (jnp.clip(r, rcut_smth, rcut) - rcut_smth) / (rcut - rcut_smth)
    w = u * u * u * (-6.0 * u * u + 15.0 * u - 10.0) + 1.0
    rows = jnp.concatenate([(w / r)[..., None], (w / r2)[..., None] * safe], axis=-1)
    return jnp.where(mask[..., None], rows, 0.0)


def _hess_term(cfg, coord4, box16, atype, idx, shift, dstd, g, tc4, tb16):
    """∇_(coord, box) ⟨g, J t⟩ with J = ∂R/∂(coord, box): the part of the vjp's derivative that comes
    from the Jacobian's own dependence on the geometry (jnp; only reached for position derivatives)."""
    inv = 1.0 / dstd[atype]  # (nf, NA, NN, 4)
    gs = g * inv

    def pairing(c4, b16):
        _, t = jax.jvp(lambda c, b: _rows_jnp(c, b, idx, shift, cfg.rcut, cfg.rcut_smth), (c4, b16), (tc4, tb16))
        return jnp.sum(gs * t)

    return jax.grad(pairing, argnums=(0, 1))(coord4, box16)


# ----------------------------------------------------------------------------------------------
# custom_vjp plumbing
# ----------------------------------------------------------------------------------------------


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _env(cfg, coord4, box16, atype, idx, shift, davg, dstd):
    return _fwd_call(cfg, coord4, box16, atype, idx, shift, davg, dstd)


def _env_fwd(cfg, coord4, box16, atype, idx, shift, davg, dstd):
    # call the custom_vjp function itself, so that an outer differentiation of this fwd rule (higher
    # order) goes through the custom rules rather than into the kernel body
    out = _env(cfg, coord4, box16, atype, idx, shift, davg, dstd)
    return out, (coord4, box16, atype, idx, shift, dstd)


def _env_bwd(cfg, res, g):
    coord4, box16, atype, idx, shift, dstd = res
    gc, gb = _vjp_op(cfg, coord4, box16, atype, idx, shift, dstd, g)
    return gc, gb, None, None, None, None, None


_env.defvjp(_env_fwd, _env_bwd)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _vjp_op(cfg, coord4, box16, atype, idx, shift, dstd, g):
    """(∂R/∂coord)ᵀ g, (∂R/∂box)ᵀ g — linear in g."""
    return _vjp_call(cfg, coord4, box16, atype, idx, shift, dstd, g)


def _values(args):
    """Strip ``CustomVJPPrimal`` records (symbolic-zeros mode): (values, perturbed flags)."""
    return [a.value for a in args], [bool(a.perturbed) for a in args]


def _flag(b: bool):
    """A static boolean that can travel in a residual pytree (as its structure, not as a leaf)."""
    return (None,) if b else ()


def _instantiate(ct, like):
    return jnp.zeros(like.shape, like.dtype) if isinstance(ct, SymbolicZero) else ct


# The vjp/jvp ops use symbolic zeros: their backward passes skip the work whose result nobody needs —
# the jnp second-derivative term when the geometry is not being differentiated (weight gradients of a
# force loss), the linear kernel when the cotangent / tangent input is a constant.


def _vjp_op_fwd(cfg, *args):
    vals, pert = _values(args)
    coord4, box16, atype, idx, shift, dstd, g = vals
    out = _vjp_op(cfg, *vals)
    geom = pert[0] or pert[1]
    return out, ((coord4, box16, atype, idx, shift, dstd), (g,) if geom else (), _flag(pert[6]))


def _vjp_op_bwd(cfg, res, ct):
    base, geom, g_perturbed = res
    coord4, box16 = base[:2]
    ct_c, ct_b = ct
    if isinstance(ct_c, SymbolicZero) and isinstance(ct_b, SymbolicZero):
        return (None,) * 7
    ct_c, ct_b = _instantiate(ct_c, coord4), _instantiate(ct_b, box16)
    t_g = _jvp_op(cfg, *base, ct_c, ct_b) if g_perturbed == _flag(True) else None
    h_c = h_b = None
    if geom:
        h_c, h_b = _hess_term(cfg, *base, geom[0], ct_c, ct_b)
    return h_c, h_b, None, None, None, None, t_g


_vjp_op.defvjp(_vjp_op_fwd, _vjp_op_bwd, symbolic_zeros=True)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _jvp_op(cfg, coord4, box16, atype, idx, shift, dstd, tc4, tb16):
    """(∂R/∂coord) tc + (∂R/∂box) tb — linear in (tc, tb)."""
    return _jvp_call(cfg, coord4, box16, atype, idx, shift, dstd, tc4, tb16)


def _jvp_op_fwd(cfg, *args):
    vals, pert = _values(args)
    out = _jvp_op(cfg, *vals)
    geom = pert[0] or pert[1]
    return out, (tuple(vals[:6]), tuple(vals[6:]) if geom else (), _flag(pert[6] or pert[7]))


def _jvp_op_bwd(cfg, res, ct):
    base, tangents, t_perturbed = res
    if isinstance(ct, SymbolicZero):
        return (None,) * 8
    g_c = g_b = h_c = h_b = None
    if t_perturbed == _flag(True):
        g_c, g_b = _vjp_op(cfg, *base, ct)
    if tangents:
        h_c, h_b = _hess_term(cfg, *base, ct, *tangents)
    return h_c, h_b, None, None, None, None, g_c, g_b


_jvp_op.defvjp(_jvp_op_fwd, _jvp_op_bwd, symbolic_zeros=True)


# ----------------------------------------------------------------------------------------------
# Public API
# ----------------------------------------------------------------------------------------------


def block_sizes(natoms: int, nnei: int) -> tuple[int, int]:
    """Tile (BA, BN) used for ``natoms`` atoms and ``nnei`` slots (powers of two)."""
    return min(BLOCK_ATOMS, next_pow2(natoms)), min(BLOCK_NEI, next_pow2(nnei))


def env_mat(
    coord: jax.Array,
    box: jax.Array | None,
    atype: jax.Array,
    idx: jax.Array,
    shift: jax.Array,
    rcut: float,
    rcut_smth: float,
    davg: jax.Array,
    dstd: jax.Array,
    *,
    interpret: bool = False,
) -> jax.Array:
    """The normalised se_e2_a environment matrix (Pallas kernels; same semantics as the jnp one).

    Args:
      coord: (nframes, natoms, 3) Å; box: (nframes, 3, 3) Å (rows are cell vectors) or None;
      atype: (nframes, natoms) or (natoms,) int (−1 padding atoms are normalised with type 0);
      idx: (nframes, natoms, nnei) int, −1 for an empty slot; shift: (nframes, natoms, nnei, 3) periodic
      image in cell vectors; rcut, rcut_smth: Å; davg, dstd: (ntypes, nnei, 4) (constants, no gradient);
      interpret: run the kernels with Pallas' interpreter (CPU).

    Returns:
      R: (nframes, natoms, nnei, 4). Differentiable (reverse mode, any order) in ``coord`` and ``box``.
    """
    coord = jnp.asarray(coord)
    dtype = coord.dtype
    nf, natoms = coord.shape[:2]
    nnei = idx.shape[-1]
    ba, bn = block_sizes(natoms, nnei)
    na, nn = round_up(natoms, ba), round_up(nnei, bn)
    cfg = _Cfg(float(rcut), float(rcut_smth), bool(interpret), ba, bn)

    coord4 = pad_axis(pad_axis(coord, 2, 4), 1, na)
    box16 = _box16(box, nf, dtype)
    at = jnp.broadcast_to(jnp.asarray(atype), (nf, natoms))
    at = pad_axis(jnp.maximum(at, 0).astype(jnp.int32), 1, na)
    idx_p = pad_axis(pad_axis(jnp.asarray(idx).astype(jnp.int32), 2, nn, -1), 1, na, -1)
    shift_p = jnp.asarray(lax.stop_gradient(shift)).astype(dtype)
    shift_p = pad_axis(pad_axis(pad_axis(shift_p, 3, 4), 2, nn), 1, na)
    davg_p = pad_axis(lax.stop_gradient(jnp.asarray(davg, dtype)), 1, nn, 0.0)
    dstd_p = pad_axis(lax.stop_gradient(jnp.asarray(dstd, dtype)), 1, nn, 1.0)
    out = _env(cfg, coord4, box16, at, idx_p, shift_p, davg_p, dstd_p)
    return out[:, :natoms, :nnei]
