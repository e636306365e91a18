"""``descriptor_product_train`` (D = Tᵀ T<, the training step's form with a written-out VJP) has the values
and the reverse-mode derivatives of the plain einsum, to every order the training step takes."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxmd_dp.model.se_e2_a import descriptor_product, descriptor_product_train

AXIS = 3
RNG = np.random.default_rng(5)
T = jnp.asarray(RNG.normal(size=(2, 3, 4, 7)))  # (nf, n, 4, M1)
X = jnp.asarray(RNG.normal(size=(2, 3, 4, 7)))  # stands in for the coordinates


def _energy(prod, x, w):
    """An energy through D whose T depends on "coordinates" x and "weights" w, as in the model."""
    D = prod(jnp.tanh(x * w + 0.3 * x ** 2), AXIS)
    return jnp.sum(jnp.tanh(D) * jnp.arange(D.shape[-1]))


DERIVATIVES = {
    "value": lambda p: p(T, AXIS),
    "grad": lambda p: jax.grad(lambda t: jnp.sum(jnp.sin(p(t, AXIS))))(T),
    # the training step's case: the weight gradient of a loss on the coordinate gradient ("forces")
    "grad_of_force_loss": lambda p: jax.grad(lambda w: jnp.sum(jax.grad(_energy, 1)(p, X, w) ** 2))(T),
    "vmap_grad": lambda p: jax.vmap(jax.grad(lambda t: jnp.sum(p(t, AXIS) ** 3)))(T),
}


@pytest.mark.parametrize("name", sorted(DERIVATIVES))
def test_descriptor_product_train_equals_einsum(name):
    got, want = DERIVATIVES[name](descriptor_product_train), DERIVATIVES[name](descriptor_product)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert np.all(np.isfinite(got)) and np.any(got != 0)


@pytest.mark.parametrize("axis", [1, 7])  # T[:, :1] and all of T (M2 = M1)
def test_descriptor_product_train_axis_bounds(axis):
    f = lambda p: jax.grad(lambda t: jnp.sum(jnp.cos(p(t, axis))))(T)
    np.testing.assert_allclose(f(descriptor_product_train), f(descriptor_product), rtol=1e-12, atol=1e-12)
