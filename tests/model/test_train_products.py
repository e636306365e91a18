"""The training path's products with written derivatives (:mod:`jaxmd_dp.model.fast.train_products`) keep the
plain einsums' numbers and have the forms they were written for:

- ``env_product_train`` (T = Rᵀ·G) and ``descriptor_product_train`` (D = Tᵀ T<) have the plain einsums'
  gradients and the weight gradient of a loss on the forces, to 1e-12 in float64;
- in that weight gradient every batched dot contracts its left operand's innermost axis and none the
  4 rows of R or T (those products are element-wise) but D's own forward product, and the element-wise
  products read their small operands computed once;
- forward mode is refused, not silently wrong.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxmd_dp.model.fast.train_products import descriptor_product_train, env_product_train
from jaxmd_dp.model.se_e2_a import env_product

RNG = np.random.default_rng(3)
R = jnp.asarray(RNG.normal(size=(1, 3, 5, 4)))  # (nf, n, slots, 4)
G = jnp.asarray(RNG.normal(size=(1, 3, 5, 6)))  # (nf, n, slots, M1)
T = jnp.asarray(RNG.normal(size=(1, 3, 4, 6)))  # (nf, n, 4, M1)
WD = jnp.asarray(RNG.normal(size=(1, 3, 6, 2)))  # weights on D (nf, n, M1, M2)
M2 = 2


def _energy(prod, r, g):
    return jnp.sum(jnp.tanh(prod(r, g * jnp.sum(r, -1, keepdims=True))))  # G depends on R, as in the model


def _plain_descriptor_product(t, m2):
    return jnp.einsum("fnam,fnak->fnmk", t, t[..., :m2])


def _d_energy(prod, r, g):
    """D through T = Rᵀ·G (the training form), with G depending on R: the descriptor's chain with one
    stand-in net."""
    t = env_product_train(r, g * jnp.sum(r, -1, keepdims=True))
    return jnp.sum(jnp.tanh(prod(jnp.tanh(t), M2)) * WD)


def _derivatives(energy):
    return {
        "grad": lambda p: jax.grad(energy, (1, 2))(p, R, G),
        # the training step's case: the G-gradient of a loss on the R-gradient ("forces")
        "grad_of_force_loss": lambda p: jax.grad(lambda g: jnp.sum(jax.grad(energy, 1)(p, R, g) ** 2))(G),
    }


PRODUCT_DERIVATIVES = _derivatives(_energy)
D_DERIVATIVES = _derivatives(_d_energy)
CASES = [("env", name, env_product_train, env_product) for name in sorted(PRODUCT_DERIVATIVES)] + [
    ("descriptor", name, descriptor_product_train, _plain_descriptor_product) for name in sorted(D_DERIVATIVES)
]


@pytest.mark.parametrize("which,name,train,plain", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_derivatives_equal_einsum(which, name, train, plain):
    table = PRODUCT_DERIVATIVES if which == "env" else D_DERIVATIVES
    got, want = table[name](train), table[name](plain)
    for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def _force_loss_weight_gradient(which):
    if which == "env":
        return jax.make_jaxpr(lambda: PRODUCT_DERIVATIVES["grad_of_force_loss"](env_product_train))()
    return jax.make_jaxpr(lambda: D_DERIVATIVES["grad_of_force_loss"](descriptor_product_train))()


@pytest.mark.parametrize("which,loops", [("env", 5), ("descriptor", 9)])
def test_element_wise_products_read_their_operands_computed_once(which, loops):
    """One-trip while loops (:func:`~jaxmd_dp.geometry.computed_once.computed_once` on the CPU) hold the
    operands of the element-wise products: T's cotangent in the forces' pass and in the weight gradient's
    (XLA CPU otherwise fused that sum, a transpose included, into every output element), the
    cotangents of the written products and R transposed (next test). The descriptor's chain runs through
    both products: Rᵀ·G's 5 and D's 4."""
    jaxpr = str(_force_loss_weight_gradient(which))
    assert jaxpr.count("while[") == (loops if jax.default_backend() == "cpu" else 0), jaxpr


def _dot_generals(jaxpr) -> list:
    """(lhs shape, lhs contracted axes) of every dot_general in a jaxpr, sub-jaxprs included."""
    found = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            found.append((eqn.invars[0].aval.shape, tuple(eqn.params["dimension_numbers"][0][0])))
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            found += _dot_generals(sub)
    return found


@pytest.mark.parametrize("which,forward_k4", [("env", 0), ("descriptor", 1)])
def test_products_contract_the_left_operands_innermost_axis(which, forward_k4):
    """Every batched dot of the force loss's weight gradient through the product contracts its left
    operand's innermost axis, which XLA CPU hands to its matmul library (on both cores; the others to its
    generic dot, on one), and none contracts 4 rows (those products are element-wise), but D's own
    forward product, Σ_a T_a ⊗ T<_a, which XLA CPU runs in the library from a
    copy of Tᵀ. The plain einsums' derivatives fail it. The test data has no other axis of size 4."""
    dots = _dot_generals(_force_loss_weight_gradient(which).jaxpr)
    k4 = [(shape, axes) for shape, axes in dots if axes == (len(shape) - 2,) and shape[-2] == 4]
    assert len(k4) == forward_k4 and k4 == [((1, 3, 4, 6), (2,))] * forward_k4, k4
    rest = [d for d in dots if d not in k4]
    assert len(rest) >= 4 and all(axes == (len(shape) - 1,) and shape[-1] != 4 for shape, axes in rest), rest


@pytest.mark.parametrize("which", ["env", "descriptor"])
def test_forward_mode_is_refused(which):
    """Reverse mode only, as documented: a jvp is an error, not a silently wrong number."""
    with pytest.raises(TypeError, match="custom_vjp"):
        if which == "env":
            jax.jvp(lambda r, g: _energy(env_product_train, r, g), (R, G), (G[..., :4], R[..., :1] * G))
        else:
            jax.jvp(lambda t: descriptor_product_train(t, M2), (T,), (T,))
