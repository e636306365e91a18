"""DPA-1's gated attention layer (jaxmd_dp.model.attention) against its formula written out in NumPy, slot by slot:
with and without normalisation, smoothing and r̂·r̂, empty slots, and a slot whose q, k and v rows are zero (x/|x|
is then the zero vector, and the gradients stay finite)."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxmd_dp.model.attention import SHIFT, GatedAttentionLayer

NNEI, M, D = 7, 5, 4


def unit(x):
    n = np.linalg.norm(x, axis=-1, keepdims=True)
    return np.where(n > 0, x / np.where(n > 0, n, 1.0), 0.0)


def reference(p, g, real, switch, direction, scaling, normalize, smooth, dotr, eps=1e-5):
    """The layer for one atom: g (nnei, M), real (nnei,), switch (nnei,), direction (nnei, 3)."""
    w_in, b_in = p["in_proj"]["matrix"], p["in_proj"]["bias"]
    q, k, v = np.split(g @ w_in + b_in, 3, axis=-1)
    if normalize:
        q, k, v = unit(q), unit(k), unit(v)
    logits = scaling * q @ k.T
    if smooth:
        pair = np.outer(switch, switch)
        z = (logits + SHIFT) * pair - SHIFT
        w = np.exp(z - z.max(-1, keepdims=True))
        w = w / w.sum(-1, keepdims=True) * pair
    else:
        z = np.where(real[None, :], logits, -np.inf)
        w = np.exp(z - z.max(-1, keepdims=True))
        w = np.where(real[:, None], w / w.sum(-1, keepdims=True), 0.0)
    if dotr:
        w = w * (direction @ direction.T)
    x = g + (w @ v) @ p["out_proj"]["matrix"] + p["out_proj"]["bias"]
    x = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps)
    return x * p["layer_norm"]["scale"] + p["layer_norm"]["offset"]


def inputs(seed=0):
    rng = np.random.default_rng(seed)
    g = rng.normal(size=(NNEI, M))
    real = np.array([True] * 5 + [False] * 2)
    switch = np.where(real, rng.uniform(0.2, 1.0, NNEI), 0.0)
    direction = np.where(real[:, None], unit(rng.normal(size=(NNEI, 3))), 0.0)
    g[2] = 0.0  # with zero biases this slot's q, k and v are zero
    return g, real, switch, direction


@pytest.mark.parametrize("normalize,smooth,dotr", list(itertools.product([True, False], repeat=3)))
def test_layer_is_its_formula(normalize, smooth, dotr):
    g, real, switch, direction = inputs()
    layer = GatedAttentionLayer(D, 0.7, normalize, smooth, dotr, True, 1e-5, jnp.float64)
    args = tuple(jnp.asarray(a) for a in (g, real, switch, direction))
    params = layer.init(jax.random.PRNGKey(0), *args)
    rng = np.random.default_rng(1)
    params = jax.tree_util.tree_map(lambda a: jnp.asarray(rng.normal(size=a.shape)), params)
    params["params"]["in_proj"]["bias"] = jnp.zeros(3 * D)  # the zero row of g stays a zero q, k, v
    out = np.asarray(layer.apply(params, *args))
    p = jax.tree_util.tree_map(np.asarray, params["params"])
    want = reference(p, g, real, switch, direction, 0.7, normalize, smooth, dotr)
    np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-12)

    def loss(params, g, switch, direction):
        return jnp.sum(jnp.sin(layer.apply(params, g, args[1], switch, direction)))

    grads = jax.grad(loss, argnums=(0, 1, 2, 3))(params, *args[:1], *args[2:])
    assert all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree_util.tree_leaves(grads))
