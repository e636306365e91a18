"""Running counts of True along the last axis of a mask, as small matmuls.

A slot's rank among the earlier real ones (where it goes when a neighbour list or the pair packing
compacts a row) is a cumulative count. ``jnp.cumsum`` lowers to a reduce-window that XLA CPU runs element
by element; here each row is cut into blocks of ``block`` entries, the counts inside a block are one
product with a triangular matrix of ones, and the blocks' starts are the running count of the blocks'
totals, taken the same way (two products for rows up to block² entries). The products run in float32,
exact for any count below 2**24, at full precision (no TF32 or bfloat16 passes on a GPU). On the CPU the
products run in the matmul library, a few times faster than the element-by-element cumulative sum on the
row sizes of the neighbour-list builds.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def running_count(mask: jax.Array, block: int = 64) -> jax.Array:
    """Inclusive running count of True along the last axis.

    mask: (..., n) bool (or 0/1 numbers); block: entries per block, at least 2 (any n: the row is padded to a
    multiple of it). Returns (..., n) int32: out[..., k] = number of True in mask[..., :k + 1], the same
    as ``jnp.cumsum(mask, axis=-1, dtype=jnp.int32)``. Rows longer than 2**24 are refused (float32 counts).
    """
    n = mask.shape[-1]
    if n >= 2**24:
        raise ValueError(f"running_count: rows of {n} entries, counts past 2**24 are not exact in float32")
    return _running_sum(mask.astype(jnp.float32), max(2, int(block))).astype(jnp.int32)


def _running_sum(x: jax.Array, b: int) -> jax.Array:
    """Inclusive running sum of x (..., n) float32 holding whole numbers, in blocks of b: the sums within
    each block are one product with a b × b triangle of ones; the blocks' starts are the running sum of
    the blocks' totals, taken the same way. Each level costs n · b multiply-adds and holds only a b × b
    (or smaller) triangle, so long rows (the pair packing of a large frame) stay O(n · b)."""
    n = x.shape[-1]
    hi = jax.lax.Precision.HIGHEST
    if n <= b:
        return jnp.matmul(x, jnp.asarray(np.triu(np.ones((n, n), np.float32))), precision=hi)  # [i, k] = 1, i <= k
    nblocks = -(-n // b)
    if nblocks * b != n:
        x = jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, nblocks * b - n)])
    x = x.reshape(*x.shape[:-1], nblocks, b)
    inner = jnp.matmul(x, jnp.asarray(np.triu(np.ones((b, b), np.float32))), precision=hi)  # within each block
    total = inner[..., -1]  # (..., nblocks)
    start = _running_sum(total, b) - total  # the counts of the earlier blocks
    return (inner + start[..., None]).reshape(*x.shape[:-2], nblocks * b)[..., :n]
