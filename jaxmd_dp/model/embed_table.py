"""Tabulated embedding net for training: G(s) interpolated from the net's values and slopes on a grid.

DeePMD-kit's "model compression" replaces the embedding net G(s) of a trained model by a table of
polynomials. Here the same idea speeds up *training* (``training.embedding_table``): each step evaluates
the net and its slope dG/ds (forward mode) on ``nodes`` evenly spaced points spanning the step's s values,
and every neighbour pair takes its G(s) by cubic Hermite interpolation between the two nodes around it.
A pair then costs four row gathers and a few multiply-adds per channel instead of the net's three layers,
their activations and the second-order derivatives the force loss needs; the net itself runs on
``nodes`` rows. Gradients reach the weights through the node values and slopes, so the weights train as
usual and the trained model is an ordinary se_e2_a model (inference, ``test`` and freeze use the exact
net).

The interpolant is C¹ (value and slope match at the nodes), so energies and forces stay continuous,
and its error is at most h⁴/384 · max|G⁗| for a node spacing h = (s range) / (nodes − 1): about 1e-11
relative in the water model's energy at 1,024 nodes (``tests/model/test_embed_table.py``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.custom_derivatives import SymbolicZero

MIN_NODES = 16


def hermite_basis(t: jax.Array) -> jax.Array:
    """Cubic Hermite basis at t ∈ [0, 1] (...,) → (..., 4): weights of Y_k, h·Y'_k, Y_{k+1}, h·Y'_{k+1}."""
    t2, t3 = t * t, t * t * t
    return jnp.stack([1 - 3 * t2 + 2 * t3, t - 2 * t2 + t3, 3 * t2 - 2 * t3, t3 - t2], axis=-1)


def hermite_basis_slope(t: jax.Array) -> jax.Array:
    """d/dt of :func:`hermite_basis`: (...,) → (..., 4)."""
    t2 = t * t
    return jnp.stack([6 * t2 - 6 * t, 1 - 4 * t + 3 * t2, 6 * t - 6 * t2, 3 * t2 - 2 * t], axis=-1)


def _combine(basis: jax.Array, rows) -> jax.Array:
    """Σ_c basis[..., c] · rows[c]: basis (..., 4), rows four (..., M1) arrays (None: zero) → (..., M1)."""
    terms = [basis[..., c:c + 1] * r for c, r in enumerate(rows) if r is not None]
    return sum(terms[1:], terms[0])


@jax.custom_jvp
def hermite(t: jax.Array, y0: jax.Array, m0: jax.Array, y1: jax.Array, m1: jax.Array) -> jax.Array:
    """Cubic Hermite interpolation at t ∈ [0, 1] (...,) between rows y0, y1 (..., M1) with scaled slopes
    m0 = h·y0', m1 = h·y1' → (..., M1). Its t-derivative is one combination of the rows (so the cotangent
    of t is one reduction over M1, not one per basis weight)."""
    return _combine(hermite_basis(t), (y0, m0, y1, m1))


def _hermite_jvp(primals, tangents):
    t, *rows = primals
    dt, *drows = tangents
    drows = [None if isinstance(d, SymbolicZero) else d for d in drows]
    parts = [] if all(d is None for d in drows) else [_combine(hermite_basis(t), drows)]
    if not isinstance(dt, SymbolicZero):
        parts.append(_combine(hermite_basis_slope(t), rows) * dt[..., None])
    return hermite(t, *rows), sum(parts[1:], parts[0])


hermite.defjvp(_hermite_jvp, symbolic_zeros=True)


def tabulated_embedding(net, s: jax.Array, nodes: int) -> jax.Array:
    """G(s) for s: (..., 1) → (..., M1), cubic Hermite interpolation of ``net`` on ``nodes`` points.

    net: an embedding net callable as net(s) → G and net(s, ds) → (G, G'·ds) (:class:`EmbeddingNet`).
    The grid spans the smallest to the largest s given (held constant under differentiation), so every
    s lies inside it; s is the normalised first column of the environment matrix (dimensionless).
    """
    if nodes < MIN_NODES:
        raise ValueError(f"an embedding table needs at least {MIN_NODES} nodes, got {nodes}")
    x = s[..., 0].reshape(-1)  # flat: XLA CPU (YNNPACK) ran the t-cotangent's reduction over M1 on the
    # (1, pairs, M1) float32 array of a one-frame batch at a tenth of its speed on (pairs, M1)
    lo, hi = jax.lax.stop_gradient(jnp.min(x)), jax.lax.stop_gradient(jnp.max(x))
    h = jnp.where(hi > lo, (hi - lo) / (nodes - 1), jnp.ones_like(hi))
    grid = (lo + h * jnp.arange(nodes, dtype=x.dtype))[:, None]
    values, slopes = net(grid, jnp.ones_like(grid))  # (nodes, M1) each
    hslopes = h * slopes
    u = (x - lo) / h
    k = jnp.clip(jnp.floor(jax.lax.stop_gradient(u)).astype(jnp.int32), 0, nodes - 2)
    # four (pairs, M1) row gathers combined element-wise: faster on XLA CPU than one gather of
    # (pairs, 4, M1) blocks followed by a (1 × 4)·(4 × M1) product per pair
    g = hermite(u - k.astype(u.dtype), values[k], hslopes[k], values[k + 1], hslopes[k + 1])
    return g.reshape(s.shape[:-1] + g.shape[-1:])
