"""Row gathers whose transpose is a gather too: a linear map and its VJP, both as gathers.

Differentiating a gather gives a scatter-add into zeros, which XLA CPU runs element by element; when the
transpose of the map is known to be another gather (the rows go back where they came from), giving the
map a custom VJP in terms of that gather keeps every derivative a gather, the weight gradient through the
forces included. Used by the pair packing (:mod:`jaxmd_dp.model.pair_pack`) and the per-type blocks of the
training step (:mod:`jaxmd_dp.model.type_groups`). Reverse mode only (a ``custom_vjp``), as the training
step needs.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def _take_rows(x: jax.Array, rows: jax.Array, keep: jax.Array) -> jax.Array:
    """x (nf, m, ...) rows ``rows`` (nf, k) → (nf, k, ...), 0 where not ``keep`` (nf, k)."""
    r = jnp.take_along_axis(x, rows.reshape(rows.shape + (1,) * (x.ndim - 2)), axis=1)
    return jnp.where(keep.reshape(keep.shape + (1,) * (x.ndim - 2)), r, 0)


@jax.custom_vjp
def take(x: jax.Array, fwd: tuple, bwd: tuple) -> jax.Array:
    """Σ over (rows, keep) in ``fwd`` of x's rows ``rows``, 0 where not ``keep``: x (nf, m, ...) → (nf, k, ...)
    for rows, keep (nf, k). ``bwd`` lists the same for the transpose map (its VJP), (nf, m) each."""
    return sum(_take_rows(x, rows, keep) for rows, keep in fwd)


def _take_fwd(x, fwd, bwd):
    return take(x, fwd, bwd), (fwd, bwd)


def _take_bwd(res, ct):
    fwd, bwd = res
    return take(ct, bwd, fwd), jax.tree_util.tree_map(lambda _: None, fwd), jax.tree_util.tree_map(lambda _: None, bwd)


take.defvjp(_take_fwd, _take_bwd)
