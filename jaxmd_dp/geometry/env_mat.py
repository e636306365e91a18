"""DeePMD's smooth environment matrix (se_e2_a), pure jnp.

For a centre atom i and a neighbour j with d = r_j − r_i (Å) and r = |d|, the row is

    w(r) · [1/r, dx/r², dy/r², dz/r²]

with the switch w(u) = u³(−6u² + 15u − 10) + 1, u = (clip(r, rcut_smth, rcut) − rcut_smth)/(rcut − rcut_smth).
Empty slots give a zero row. Every slot, empty ones included, is then normalised per centre type:
R = (row − davg[t_i]) / dstd[t_i] (DeePMD-kit does not re-mask empty slots, so they feed the embedding).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxmd_dp.geometry.computed_once import computed_once
from pallas_kernels import dispatch


def _switch_u(r: jax.Array, rcut_smth: float, rcut: float) -> jax.Array:
    """u = (clip(r, rcut_smth, rcut) − rcut_smth) / (rcut − rcut_smth) ∈ [0, 1]."""
    return (jnp.clip(r, rcut_smth, rcut) - rcut_smth) / (rcut - rcut_smth)


def smooth_weight(r: jax.Array, rcut_smth: float, rcut: float) -> jax.Array:
    """DeePMD's switch: 1 below ``rcut_smth``, 0 above ``rcut``, C² in between. r in Å."""
    u = _switch_u(r, rcut_smth, rcut)
    return u * u * u * (-6.0 * u * u + 15.0 * u - 10.0) + 1.0


def smooth_weight_slope(r: jax.Array, rcut_smth: float, rcut: float) -> jax.Array:
    """dw/dr of :func:`smooth_weight` (1/Å): −30 u²(1 − u)² / (rcut − rcut_smth) between the radii, else 0."""
    u = _switch_u(r, rcut_smth, rcut)
    return jnp.where((r > rcut_smth) & (r < rcut), -30.0 * u * u * (u - 1.0) * (u - 1.0) / (rcut - rcut_smth), 0.0)


def times_cell(x: jax.Array, m: jax.Array) -> jax.Array:
    """x (..., 3) @ m (..., 3, 3), broadcasting, written out as three products: XLA CPU runs a batched
    3 × 3 dot (one per atom, say) far slower than these element-wise terms."""
    return sum(x[..., k : k + 1] * m[..., k, :] for k in range(3))


def pair_vectors(coord: jax.Array, box: jax.Array | None, idx: jax.Array, shift: jax.Array) -> jax.Array:
    """Vectors from each centre atom to each neighbour slot, d = r_j − r_i + shift @ box.

    Args:
      coord: (nframes, natoms, 3) Å.
      box: (nframes, 3, 3) Å (rows are cell vectors), or (nframes, natoms, 3, 3): each centre atom's own
        box (frames merged into one list of atoms, :mod:`jaxmd_dp.train.merge`), or None without PBC.
      idx: (nframes, natoms, nnei) int, −1 for an empty slot.
      shift: (nframes, natoms, nnei, 3) periodic image in cell vectors.

    Returns:
      d: (nframes, natoms, nnei, 3) Å; empty slots hold arbitrary finite values (mask with ``idx >= 0``).
    """
    j = jnp.where(idx >= 0, idx, 0)
    rj = jax.vmap(lambda c, jj: c[jj])(coord, j)  # (nf, nloc, nnei, 3)
    d = rj - coord[:, :, None, :]
    if box is not None and box.ndim == 4:  # each centre atom's own box
        d = d + times_cell(shift.astype(coord.dtype), box[:, :, None])
    elif box is not None:
        d = d + jnp.einsum("fasi,fij->fasj", shift.astype(coord.dtype), box)
    return d


def env_rows(d: jax.Array, mask: jax.Array, rcut: float, rcut_smth: float) -> jax.Array:
    """Unnormalised environment rows w(r)·[1/r, d/r²] from pair vectors.

    d: (..., 3) Å; mask: (...) bool, True for a real neighbour. Returns (..., 4); empty slots are 0.
    Safe to differentiate: empty slots use a dummy unit vector, so no 0/0 appears. Its derivative in d
    is the closed-form Jacobian ∂row/∂d (4 × 3 per pair, :func:`_rows_and_jacobian`; DeePMD-kit's
    ``em_deriv``): forces contract it with ∂E/∂row, and the training step's weight gradient contracts
    it back, each one fused product instead of autodiff's pass through the square root, the switch
    and the divisions, forward and transposed. Higher derivatives differentiate that Jacobian.
    """
    return _env_rows(d, mask, float(rcut), float(rcut_smth))


def _rows_and_jacobian(d: jax.Array, mask: jax.Array, rcut: float, rcut_smth: float, jacobian: bool = True):
    """The four rows (each (...)) and their Jacobian J[a][k] = ∂row_a/∂d_k (each (...)), 0 in empty slots
    (``jacobian`` False: None instead, for the primal alone).

    With r = |d| and w′ = dw/dr: ∂(w/r)/∂d = (w′r − w)/r³ · d and
    ∂(w d_a/r²)/∂d_k = w/r² δ_ak + (w′r − 2w)/r⁴ · d_a d_k."""
    safe = jnp.where(mask[..., None], d, jnp.ones_like(d))
    comps = (safe[..., 0], safe[..., 1], safe[..., 2])  # element-wise: no reduction over a 3-wide axis
    r2 = comps[0] * comps[0] + comps[1] * comps[1] + comps[2] * comps[2]
    r = jnp.sqrt(r2)
    inv_r, inv_r2 = 1.0 / r, 1.0 / r2
    w = smooth_weight(r, rcut_smth, rcut)
    m = mask.astype(d.dtype)
    q = w * inv_r2 * m
    rows = [w * inv_r * m] + [q * c for c in comps]
    if not jacobian:
        return rows, None
    dw = smooth_weight_slope(r, rcut_smth, rcut)
    c0 = (dw * r - w) * inv_r2 * inv_r * m
    c1 = (dw * r - 2.0 * w) * inv_r2 * inv_r2 * m
    jac = [[c0 * c for c in comps]] + [
        [c1 * comps[a] * comps[k] + (q if a == k else 0.0) for k in range(3)] for a in range(3)
    ]
    return rows, jac


@functools.partial(jax.custom_jvp, nondiff_argnums=(2, 3))
def _env_rows(d, mask, rcut, rcut_smth):
    return jnp.stack(_rows_and_jacobian(d, mask, rcut, rcut_smth, jacobian=False)[0], axis=-1)


@_env_rows.defjvp
def _env_rows_jvp(rcut, rcut_smth, primals, tangents):
    d, mask = primals
    dd = tangents[0]
    rows, jac = _rows_and_jacobian(d, mask, rcut, rcut_smth)
    t = [dd[..., k] for k in range(3)]
    drows = [jac[a][0] * t[0] + jac[a][1] * t[1] + jac[a][2] * t[2] for a in range(4)]
    return jnp.stack(rows, axis=-1), jnp.stack(drows, axis=-1)


def normalize(rows: jax.Array, atype: jax.Array, davg: jax.Array, dstd: jax.Array) -> jax.Array:
    """(rows − davg[t_i]) / dstd[t_i] for every slot.

    rows: (nframes, natoms, nnei, 4); atype: (nframes, natoms) int (−1 padding → type 0, caller masks);
    davg, dstd: (ntypes, nnei, 4). Returns (nframes, natoms, nnei, 4).
    """
    t = jnp.maximum(atype, 0)
    return (rows - jnp.asarray(davg)[t]) / jnp.asarray(dstd)[t]


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
    kernels: str | None = None,
) -> jax.Array:
    """The normalised se_e2_a environment matrix.

    Args:
      coord: (nframes, natoms, 3) Å; box: (nframes, 3, 3) Å, per centre atom (nframes, natoms, 3, 3)
      (jnp only; see :func:`pair_vectors`), or None; atype: (nframes, natoms) int;
      idx, shift: a neighbour list (see ``neighbor.build``); rcut, rcut_smth: Å;
      davg, dstd: (ntypes, nnei, 4) normalisation statistics.
      kernels: "pallas" | "jnp" | "auto" (default: ``$JAXMD_DP_KERNELS``, else auto = Pallas on GPU).

    Returns:
      R: (nframes, natoms, nnei, 4), dimensionless after normalisation.
    """
    if dispatch.use_pallas(kernels):
        from pallas_kernels.env_mat import env_mat as env_mat_kernel

        return env_mat_kernel(
            coord,
            box,
            atype,
            idx,
            shift,
            rcut,
            rcut_smth,
            jnp.asarray(davg),
            jnp.asarray(dstd),
            interpret=dispatch.interpret_mode(),
        )
    # the pair vectors and the mask once into memory (CPU): the rows and each term of their Jacobian are
    # separate fusions, which would otherwise each redo the list's and the coordinates' gathers
    d = computed_once(pair_vectors(coord, box, idx, shift))
    rows = env_rows(d, computed_once(idx >= 0), rcut, rcut_smth)
    return normalize(rows, atype, davg, dstd)
