"""computed_once: x itself, with its derivatives, held in memory by a while loop XLA CPU keeps."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxmd_dp.geometry.computed_once import computed_once


def _loss(x, once):
    y = computed_once(x * 2.0) if once else x * 2.0
    return jnp.sum(jnp.sin(y) ** 2 * x)


def test_values_and_derivatives_are_those_of_x():
    x = jnp.asarray(np.random.default_rng(0).random((4, 3)))
    ref, got = (lambda z: _loss(z, False)), (lambda z: _loss(z, True))
    np.testing.assert_array_equal(got(x), ref(x))
    np.testing.assert_allclose(jax.grad(got)(x), jax.grad(ref)(x), rtol=0, atol=1e-14)
    np.testing.assert_allclose(jax.hessian(got)(x), jax.hessian(ref)(x), rtol=0, atol=1e-13)
    t = jnp.ones_like(x)
    np.testing.assert_allclose(jax.jvp(got, (x,), (t,))[1], jax.jvp(ref, (x,), (t,))[1], rtol=0, atol=1e-13)
    # reverse over forward, as the training step differentiates the forces in the weights
    np.testing.assert_allclose(
        jax.grad(lambda z: jax.jvp(got, (z,), (t,))[1])(x),
        jax.grad(lambda z: jax.jvp(ref, (z,), (t,))[1])(x),
        rtol=0,
        atol=1e-13,
    )


@pytest.mark.parametrize(
    "x",
    [np.array([[True, False], [False, True]]), np.arange(6, dtype=np.int32), np.array([np.nan, 1.0]), np.zeros((0, 3))],
)
def test_any_dtype_nan_and_empty(x):
    got = jax.jit(computed_once)(jnp.asarray(x))
    assert got.dtype == x.dtype and got.shape == x.shape
    np.testing.assert_array_equal(np.asarray(got), x)


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="the loop is used on the CPU only")
def test_xla_keeps_the_loop_that_holds_x():
    """The mechanism: XLA CPU must keep the while loop (trip count unknown at compile time), else each reader
    of x recomputes it again. Fails if a later XLA proves the trip count and removes the loop."""
    x = jnp.asarray(np.random.default_rng(1).random((64, 3)))
    idx = jnp.asarray(np.random.default_rng(2).integers(0, 64, (64, 8)))

    def f(x, idx, once):
        d = x[idx] - x[:, None, :]  # a gather, as the pair vectors
        d = computed_once(d) if once else d
        r = jnp.sqrt(jnp.sum(d * d, axis=-1))
        return jnp.stack([d[..., 0] / r, d[..., 1] / r**2, d[..., 2] / r**3], axis=-1)

    hlo = jax.jit(f, static_argnums=2).lower(x, idx, True).compile().as_text()
    assert len(re.findall(r"\swhile\(", hlo)) == 1
    np.testing.assert_allclose(
        jax.jit(f, static_argnums=2)(x, idx, True), jax.jit(f, static_argnums=2)(x, idx, False), rtol=1e-14, atol=0
    )
