"""Tabulated embedding net for training: Σ_j R_jᵀ G(s_j) from a node table, as one matmul per atom.

DeePMD-kit's "model compression" replaces the embedding net G(s) of a trained model by a table of
polynomials. Here the same idea speeds up *training* (``training.embedding_table``): each step evaluates
the net with its first and second derivatives (forward mode) on ``nodes`` evenly spaced points spanning
the step's s values, and G(s) between two nodes is the quintic Hermite polynomial matching value, slope
and curvature at both ends. The interpolant is C², and its error falls as h⁶ with the node spacing
h = (s range) / (nodes − 1): at 64 nodes G is within ~4e-11 and dG/ds within ~5e-9 of a DeePMD-sized
net (relative, s in [−1, 6]; ``tests/model/test_embed_table.py``).

The descriptor needs G only inside T = Σ_j R_jᵀ G(s_j) (4 × M1 per atom). With the table,
G(s_j) = Σ_c b_c(t_j) Y_c[k_j] (six basis weights b of the position t_j of s_j between nodes k_j and
k_j + 1, and the node rows Y: values, h·slopes, h²·curvatures), so

    T = Σ_k A[k]ᵀ Y[k],   A[k] = Σ_{j: node k} R_j ⊗ b(t_j)      (per atom: A is nodes × 3 × 4)

Each pair adds 2 × 12 numbers to its atom's A (a scatter-add), and one matmul per atom over the node
axis gives T. Nothing per pair is M1 wide, which is what the net on every pair (or a row-gathering
table) spends its time on: gathers, element-wise layers and their second-order derivatives over
(pairs × M1) arrays. The cost now grows with the node count (atoms × nodes × M1), so a few dozen nodes
are the right size. Gradients reach the weights through the node rows, so the weights train as usual
and the trained model is an ordinary se_e2_a model (inference, ``test`` and freeze use the exact net).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxmd_dp.config import TABLE_MAX_NODES, TABLE_MIN_NODES
from jaxmd_dp.model.fast.bilinear import with_written_transposes
from jaxmd_dp.model.nets import PRECISION

MIN_NODES, MAX_NODES = TABLE_MIN_NODES, TABLE_MAX_NODES


@jax.custom_jvp
def quintic_basis(t: jax.Array) -> jax.Array:
    """Quintic Hermite basis at t ∈ [0, 1] (...,) → (..., 6): the weights of y₀, h·y₀′, h²·y₀″ (the node
    left of t) and y₁, h·y₁′, h²·y₁″ (the node right of it)."""
    t2 = t * t
    t3 = t2 * t
    t4, t5 = t3 * t, t3 * t2
    return jnp.stack(
        [
            1 - 10 * t3 + 15 * t4 - 6 * t5,
            t - 6 * t3 + 8 * t4 - 3 * t5,
            0.5 * (t2 - 3 * t3 + 3 * t4 - t5),
            10 * t3 - 15 * t4 + 6 * t5,
            -4 * t3 + 7 * t4 - 3 * t5,
            0.5 * (t3 - 2 * t4 + t5),
        ],
        axis=-1,
    )


@quintic_basis.defjvp
def _quintic_basis_jvp(primals, tangents):
    """The basis' slopes in factored form, s = 1 − t. Autodiff of the powers above gave dozens of
    operations per pair, and XLA CPU evaluates them again for each of the 24 entries of the (b ⊗ R) tangent
    it feeds."""
    (t,), (dt,) = primals, tangents
    s = 1 - t
    t2, s2 = t * t, s * s
    c = 30 * t2 * s2
    slopes = [
        -c,
        s2 * (1 + t * (2 - 15 * t)),
        0.5 * t * s2 * (2 - 5 * t),
        c,
        t2 * (t * (28 - 15 * t) - 12),
        0.5 * t2 * s * (3 - 5 * t),
    ]
    # stacked products, not slopes · dt[..., None]: the transpose is then a sum of six element-wise
    # terms, not a reduction over the last axis (slow in XLA CPU's float32 path, YNNPACK)
    return quintic_basis(t), jnp.stack([q * dt for q in slopes], axis=-1)


def _outer_in_a_t(b: jax.Array, ct: jax.Array) -> jax.Array:
    return sum(ct[..., :, q] * b[..., q : q + 1] for q in range(b.shape[-1]))


def _outer_in_b_t(a: jax.Array, ct: jax.Array) -> jax.Array:
    return sum(ct[..., p, :] * a[..., p : p + 1] for p in range(a.shape[-1]))


def _outer(a: jax.Array, b: jax.Array) -> jax.Array:
    """a ⊗ b: (..., P), (..., Q) → (..., P, Q), for the training step (as :data:`outer`).

    Its transposes are sums of Q (for a's cotangent) or P (for b's) element-wise products, so keep the
    side whose cotangent is needed short. Autodiff's own transposes, reductions over the last few
    entries, ran in XLA CPU's float32 path (YNNPACK) at a fraction of memory speed (the water step's
    b ⊗ R of (atoms × slots × 6 × 4), the empty-slot blocks of large ``sel``). Its tangents are
    ``linear_call`` terms (:func:`jaxmd_dp.model.fast.bilinear.with_written_transposes`): no vmap, and a and b
    must carry no tangent where the transposes are differentiated again (the training step
    differentiates the forces in the weights only)."""
    return a[..., :, None] * b[..., None, :]


outer = with_written_transposes(_outer, _outer_in_a_t, _outer_in_b_t)


def node_rows(net, lo: jax.Array, h: jax.Array, nodes: int) -> jax.Array:
    """The table: Y (nodes, 3, M1) = [G, h·G′, h²·G″] at s = lo + h·k, k = 0 … nodes − 1.

    net: an embedding net callable as net(s) → G and net(s, ds) → (G, G′·ds) (:class:`EmbeddingNet`)."""
    grid = (lo + h * jnp.arange(nodes, dtype=lo.dtype))[:, None]
    one = jnp.ones_like(grid)
    (values, slopes), (_, curvatures) = jax.jvp(lambda g: net(g, one), (grid,), (one,))
    return jnp.stack([values, h * slopes, h * h * curvatures], axis=1)


def table_env_product(net, R: jax.Array, mask: jax.Array, nodes: int) -> jax.Array:
    """Σ_j R_jᵀ G(s_j) over the real slots of each atom, G interpolated from ``nodes`` nodes.

    R: (nf, n, s, 4) normalised environment rows of one neighbour type's section (s_j = R_j0,
    dimensionless); mask: (nf, n, s) True where a slot holds a neighbour (empty slots add nothing here:
    their share is :func:`jaxmd_dp.model.fast.pair_pack.empty_slot_term`). Returns (nf, n, 4, M1).
    The grid spans the smallest to the largest real s (held constant under differentiation), so every
    real s lies inside it.
    """
    if not MIN_NODES <= nodes <= MAX_NODES:
        raise ValueError(f"an embedding table needs {MIN_NODES} to {MAX_NODES} nodes, got {nodes}")
    nf, n, s, _ = R.shape
    x = R[..., 0]
    inf = jnp.asarray(jnp.inf, x.dtype)
    lo = jax.lax.stop_gradient(jnp.min(jnp.where(mask, x, inf)))
    hi = jax.lax.stop_gradient(jnp.max(jnp.where(mask, x, -inf)))
    lo, hi = jnp.where(hi >= lo, lo, 0), jnp.where(hi >= lo, hi, 0)  # no real pair: any grid
    h = jnp.where(hi > lo, (hi - lo) / (nodes - 1), jnp.ones_like(hi))
    Y = node_rows(net, lo, h, nodes)  # (nodes, 3, M1)
    u = (x - lo) / h
    k = jnp.clip(jnp.floor(jax.lax.stop_gradient(u)).astype(jnp.int32), 0, nodes - 2)
    b = jnp.where(mask[..., None], quintic_basis(u - k.astype(u.dtype)), 0)  # (nf, n, s, 6)
    w = outer(b, R).reshape(nf * n * s * 2, 12)  # rows for nodes k and k + 1
    row = jnp.arange(nf * n, dtype=jnp.int32).reshape(nf, n, 1) * nodes + k  # (nf, n, s): atom's node k
    rows = jnp.stack([row, row + 1], axis=-1).reshape(-1)
    A = jnp.zeros((nf * n * nodes, 12), R.dtype).at[rows].add(w)
    return jnp.einsum("fnkca,kcm->fnam", A.reshape(nf, n, nodes, 3, 4), Y, precision=PRECISION)
