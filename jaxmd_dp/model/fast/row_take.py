"""Row gathers whose transpose is a gather too: a linear map and its VJP, both as gathers.

Differentiating a gather gives a scatter-add into zeros, which XLA CPU runs element by element; when the
transpose of the map is known to be another gather (the rows go back where they came from), giving the
map a custom VJP in terms of that gather keeps every derivative a gather, the weight gradient through the
forces included. Used by the pair packing (:mod:`jaxmd_dp.model.fast.pair_pack`) and the per-type blocks of the
training step (:mod:`jaxmd_dp.model.fast.type_groups`). Reverse mode only (a ``custom_vjp``), as the training
step needs.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def _take_rows(x: jax.Array, rows: jax.Array, keep: jax.Array) -> jax.Array:
    """x (nf, m, ...) rows ``rows`` (nf, k) → (nf, k, ...), 0 where not ``keep`` (nf, k)."""
    r = jnp.take_along_axis(x, rows.reshape(rows.shape + (1,) * (x.ndim - 2)), axis=1)
    return jnp.where(keep.reshape(keep.shape + (1,) * (x.ndim - 2)), r, 0)


def _take_spec(x: jax.Array, spec: tuple) -> jax.Array:
    """One gather of :func:`take`: (rows, keep), or (rows, keep, (pre_rows, pre_keep)) for rows of
    x + (x's rows ``pre_rows`` (nf, m), 0 where not ``pre_keep``): the sum of two gathers as one, so that
    XLA materialises one array, not two whose sum every reader recomputes."""
    rows, keep, *pre = spec
    if pre:
        x = x + _take_rows(x, *pre[0])
    return _take_rows(x, rows, keep)


@jax.custom_vjp
def take(x: jax.Array, fwd: tuple, bwd: tuple) -> jax.Array:
    """Σ over the specs in ``fwd`` of x's rows ``rows``, 0 where not ``keep``: x (nf, m, ...) → (nf, k, ...)
    for rows, keep (nf, k); a spec (rows, keep, (pre_rows, pre_keep)) takes the rows of x plus x's rows
    ``pre_rows`` (nf, m) (:func:`_take_spec`). ``bwd`` lists the same for the transpose map (its VJP)."""
    return sum(_take_spec(x, spec) for spec in fwd)


def _take_fwd(x, fwd, bwd):
    return take(x, fwd, bwd), (fwd, bwd)


def _take_bwd(res, ct):
    fwd, bwd = res
    return take(ct, bwd, fwd), jax.tree_util.tree_map(lambda _: None, fwd), jax.tree_util.tree_map(lambda _: None, bwd)


take.defvjp(_take_fwd, _take_bwd)
