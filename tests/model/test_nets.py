"""The layers' matmul (``nets.dense``, a custom_jvp with a barriered weight gradient) has the derivatives
of a plain x @ w, in reverse and forward mode and to second order."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxmd_dp.model.nets import dense

RNG = np.random.default_rng(7)
X = RNG.normal(size=(2, 5, 3))  # (..., in)
W = RNG.normal(size=(3, 4))
W2 = RNG.normal(size=(4, 1))


def _energy(mm, x, w):
    return jnp.sum(jnp.tanh(jnp.tanh(mm(x, w)) @ W2))


def _plain(x, w):
    return x @ w


DERIVATIVES = {
    "grad_x": lambda mm: jax.grad(_energy, 1)(mm, X, W),
    "grad_w": lambda mm: jax.grad(_energy, 2)(mm, X, W),
    # the training step's case: the weight gradient of a force loss
    "grad_w_of_force_loss": lambda mm: jax.grad(lambda w: jnp.sum(jax.grad(_energy, 1)(mm, X, w) ** 2))(W),
    "jvp_x": lambda mm: jax.jvp(lambda x: _energy(mm, x, W), (X,), (X[::-1],))[1],
    "hessian_w": lambda mm: jax.hessian(_energy, 2)(mm, X, W),
    "jacfwd_x": lambda mm: jax.jacfwd(lambda x: jax.grad(_energy, 1)(mm, x, W))(X),
}


@pytest.mark.parametrize("name", sorted(DERIVATIVES))
def test_dense_derivatives_equal_plain_matmul(name):
    got, want = DERIVATIVES[name](dense), DERIVATIVES[name](_plain)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
