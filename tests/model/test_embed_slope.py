"""The embedding net's value and slope with a written-out VJP (jaxmd_dp.model.fast.embed_slope) against autodiff
of the same net: values, the weight VJP, and the training step's case, the weight gradient of a loss on
∂/∂s through G + G′·(s − s̄)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxmd_dp.model.fast.embed_slope import net_value_and_slope, with_slope
from jaxmd_dp.model.nets import EmbeddingNet

# (neuron, resnet_dt, activation): skips of out = 2·in and out = in, idt or not; gelu takes the autodiff path
CASES = [((4, 8, 16), False, "tanh"), ((3, 6, 6), True, "tanh"), ((2, 4, 8), True, "gelu")]


def _setup(neuron, resnet_dt, activation):
    net = EmbeddingNet(neuron, activation, resnet_dt, jnp.float64)
    s = jnp.asarray(np.random.default_rng(0).uniform(-1.0, 4.0, (37, 1)))
    params = net.init(jax.random.PRNGKey(1), s)
    # idt away from its initial 0.1 ± 0.001, so that a wrong idt term shows
    params = jax.tree_util.tree_map_with_path(
        lambda path, x: x + 0.3 * jnp.arange(x.size).reshape(x.shape) / x.size if path[-1].key == "idt" else x, params
    )
    return net, s, params


def _slope_path(net, params, s):
    return net.apply(params, s, method=net_value_and_slope)


def _autodiff_path(net, params, s):
    return net.apply(params, s, jnp.ones_like(s))  # the net in forward mode


@pytest.mark.parametrize("neuron,resnet_dt,activation", CASES)
def test_value_slope_and_weight_vjp(neuron, resnet_dt, activation):
    net, s, params = _setup(neuron, resnet_dt, activation)
    got, vjp_got = jax.vjp(lambda p: _slope_path(net, p, s), params)
    want, vjp_want = jax.vjp(lambda p: _autodiff_path(net, p, s), params)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-13, atol=1e-13)
    rng = np.random.default_rng(2)
    cts = tuple(jnp.asarray(rng.standard_normal(g.shape)) for g in got)
    for g, w in zip(jax.tree_util.tree_leaves(vjp_got(cts)), jax.tree_util.tree_leaves(vjp_want(cts))):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("neuron,resnet_dt,activation", CASES)
def test_weight_gradient_through_the_slope(neuron, resnet_dt, activation):
    """∂/∂weights of a loss on ∂E/∂s, E = Σ c·G(s) (what forces are to the training step)."""
    net, s, params = _setup(neuron, resnet_dt, activation)
    c = jnp.asarray(np.random.default_rng(3).standard_normal((s.shape[0], neuron[-1])))

    def energy_slope(p, x):
        return jnp.sum(c * with_slope(*_slope_path(net, p, jax.lax.stop_gradient(x)), x))

    def energy_plain(p, x):
        return jnp.sum(c * net.apply(p, x))

    def loss(energy, p):
        e, f = jax.value_and_grad(energy, argnums=1)(p, s)
        return e**2 + jnp.sum(jnp.sin(f))

    np.testing.assert_allclose(
        jax.grad(energy_slope, argnums=1)(params, s),
        jax.grad(energy_plain, argnums=1)(params, s),
        rtol=1e-12,
        atol=1e-12,
    )
    got = jax.grad(lambda p: loss(energy_slope, p))(params)
    want = jax.grad(lambda p: loss(energy_plain, p))(params)
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(g, w, rtol=1e-11, atol=1e-11)
