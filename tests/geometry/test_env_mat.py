"""The environment rows' closed-form Jacobian (env_mat.env_rows's custom JVP) against autodiff of the
textbook formula: values, forward and reverse derivatives, and second derivatives, in every regime of the
switch (inside rcut_smth, between the radii, beyond rcut) and for empty slots."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxmd_dp.geometry.env_mat import env_rows, smooth_weight, smooth_weight_slope

RCUT, RCUT_SMTH = 6.0, 2.0


def plain_rows(d, mask):
    """w(r)·[1/r, d/r²], differentiated by autodiff (the formula env_rows implements)."""
    safe = jnp.where(mask[..., None], d, 1.0)
    r = jnp.sqrt(jnp.sum(safe * safe, axis=-1))
    w = smooth_weight(r, RCUT_SMTH, RCUT)
    rows = jnp.concatenate([(w / r)[..., None], (w / r**2)[..., None] * safe], axis=-1)
    return jnp.where(mask[..., None], rows, 0.0)


@pytest.fixture(scope="module")
def pairs():
    rng = np.random.default_rng(7)
    direction = rng.normal(size=(4, 9, 3))
    direction /= np.linalg.norm(direction, axis=-1, keepdims=True)
    r = rng.uniform(0.8, 7.5, size=(4, 9))
    assert (r < RCUT_SMTH).any() and ((r > RCUT_SMTH) & (r < RCUT)).any() and (r > RCUT).any()
    mask = rng.uniform(size=(4, 9)) < 0.8
    return jnp.asarray(direction * r[..., None]), jnp.asarray(mask)


def test_values_and_first_derivatives(pairs):
    d, mask = pairs
    np.testing.assert_allclose(env_rows(d, mask, RCUT, RCUT_SMTH), plain_rows(d, mask), rtol=1e-14, atol=1e-15)
    t = jnp.asarray(np.random.default_rng(1).normal(size=d.shape))
    _, got = jax.jvp(lambda x: env_rows(x, mask, RCUT, RCUT_SMTH), (d,), (t,))
    _, want = jax.jvp(lambda x: plain_rows(x, mask), (d,), (t,))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    ct = jnp.asarray(np.random.default_rng(2).normal(size=d.shape[:-1] + (4,)))
    got = jax.grad(lambda x: jnp.sum(env_rows(x, mask, RCUT, RCUT_SMTH) * ct))(d)
    want = jax.grad(lambda x: jnp.sum(plain_rows(x, mask) * ct))(d)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    assert np.all(np.asarray(got)[~np.asarray(mask)] == 0)  # empty slots: no force


def test_second_derivatives(pairs):
    d, mask = pairs
    ct = jnp.asarray(np.random.default_rng(3).normal(size=d.shape[:-1] + (4,)))
    got = jax.hessian(lambda x: jnp.sum(env_rows(x, mask, RCUT, RCUT_SMTH) * ct))(d)
    want = jax.hessian(lambda x: jnp.sum(plain_rows(x, mask) * ct))(d)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-13)


def test_switch_slope():
    r = jnp.linspace(0.5, 7.0, 301)
    want = jax.vmap(jax.grad(lambda x: smooth_weight(x, RCUT_SMTH, RCUT)))(r)
    np.testing.assert_allclose(smooth_weight_slope(r, RCUT_SMTH, RCUT), want, rtol=1e-12, atol=1e-15)
