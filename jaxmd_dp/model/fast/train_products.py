"""The descriptor's two per-atom products on the training path, with their derivatives written out:

    T = Σ_s R_sᵀ G_s     (4 × M1)       :func:`env_product_train`
    D = Tᵀ T[:, :M2]     (M1 × M2)      :func:`descriptor_product_train`

Same values and the same first and second reverse-mode derivatives as the plain einsums (forces and
virials through R, then the weight gradient through those), in forms that XLA CPU runs faster:

- every batched dot contracts its left operand's innermost axis, which XLA CPU hands to its matmul
  library, on both cores (it ran the others through its generic dot, on one);
- every product that contracts R's 4 columns is four element-wise products (:func:`_outer_sum`), where
  autodiff gave batched dots with an inner size of 4, which run at a small fraction of the matmul
  library's rate;
- the small operands those element-wise products read are computed once into memory
  (:func:`~jaxmd_dp.geometry.computed_once.computed_once`), not recomputed for each output element.

Reverse mode only (``custom_vjp``: no ``jax.jvp``), no vmap (``linear_call``), no second derivative in R or
T through the written terms (their ``linear_call`` residuals carry no tangent). The training step needs no
more; elsewhere use the plain einsums (:func:`jaxmd_dp.model.se_e2_a.env_product`).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.custom_derivatives import linear_call

from jaxmd_dp.geometry.computed_once import computed_once
from jaxmd_dp.model.fast.bilinear import with_written_transposes
from jaxmd_dp.model.nets import PRECISION


def _outer_sum(U: jax.Array, V: jax.Array) -> jax.Array:
    """Σ_a U_a ⊗ V_a over the 4 rows: U (nf, n, 4, p), V (nf, n, 4, q) → (nf, n, p, q), as four element-wise
    products. V is computed once: as T's cotangent it is a sum of the cotangents of T's readers, which XLA
    CPU otherwise fused, a transpose included, into each output element, itself fused into the packed rows'
    gather, which then recomputed the sum for every element it gathered."""
    V = computed_once(V)
    return sum(U[..., a, :, None] * V[..., a, None, :] for a in range(U.shape[-2]))


def _einsum(spec: str):
    return lambda a, b: jnp.einsum(spec, a, b, precision=PRECISION)


# Rᵀ·G with R transposed, RT (nf, n, 4, s), G (nf, n, s, M1) → T (nf, n, 4, M1); G's cotangent Σ_a RT_a ⊗ ct_a
_product_rt = _einsum("fnas,fnsm->fnam")
_rt_g = with_written_transposes(_product_rt, transpose_in_second=_outer_sum)
# the forces' R-cotangent, ct (nf, n, 4, M1), G → (nf, n, 4, s); G's cotangent Σ_a u_a ⊗ ct_a
_ct_g = with_written_transposes(
    _einsum("fnam,fnsm->fnas"), transpose_in_second=lambda ct, u: _outer_sum(computed_once(u), ct)
)
# D's cotangent in T<: T< (nf, n, 4, M2), ct_D (nf, n, M1, M2) → (nf, n, 4, M1); ct_D's cotangent Σ_a u_a ⊗ T<_a
_tk_ct = with_written_transposes(
    _einsum("fnak,fnmk->fnam"), transpose_in_second=lambda tk, u: _outer_sum(computed_once(u), tk)
)
# D's cotangent in T: T (nf, n, 4, M1), ct_D → (nf, n, 4, M2); ct_D's cotangent Σ_a T_a ⊗ u_a
_tm_ct = with_written_transposes(
    _einsum("fnam,fnmk->fnak"), transpose_in_second=lambda t, u: _outer_sum(computed_once(t), u)
)


@jax.custom_vjp
def _env_product_rt(RT: jax.Array, G: jax.Array) -> jax.Array:
    """Rᵀ·G with R transposed (RT (nf, n, 4, s)); VJP: RT's cotangent by :data:`_ct_g`, G's by
    :func:`_outer_sum` (a ``linear_call`` whose transpose is the product again)."""
    return _rt_g(RT, G)


def _env_product_rt_fwd(RT, G):
    return _rt_g(RT, G), (RT, G)


def _env_product_rt_bwd(res, ct):
    RT, G = res
    return _ct_g(ct, G), linear_call(_outer_sum, _product_rt, RT, ct)


_env_product_rt.defvjp(_env_product_rt_fwd, _env_product_rt_bwd)


def env_product_train(R: jax.Array, G: jax.Array) -> jax.Array:
    """Σ_s R_sᵀ G_s: R (nf, n, s, 4), G (nf, n, s, M1) → T (nf, n, 4, M1), for the training step.

    R is transposed to (nf, n, 4, s) and computed once, so that the product and its tangents contract
    the left operand's innermost axis (XLA CPU then hands them to its matmul library). Its VJP is written
    out: R's cotangent through a product whose G-tangent is element-wise (autodiff gave a batched dot with
    an inner size of 4, which XLA CPU runs slowly), G's cotangent element-wise (:func:`_outer_sum`; as a
    batched dot with an inner size of 4 it was one of the step's slowest ops)."""
    return _env_product_rt(computed_once(jnp.swapaxes(R, -1, -2)), G)


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def descriptor_product_train(T: jax.Array, m2: int) -> jax.Array:
    """D = Tᵀ T[:, :m2] per atom: T (nf, n, 4, M1) → D (nf, n, M1, m2), for the training step. Its VJP
    is written out as two products that contract their left operand's innermost axis, each with an
    element-wise transpose in D's cotangent (autodiff gave batched dots through XLA CPU's generic dot, on
    one core)."""
    return jnp.einsum("fnam,fnak->fnmk", T, T[..., :m2], precision=PRECISION)


def _descriptor_product_fwd(T, m2):
    return descriptor_product_train(T, m2), T


def _descriptor_product_bwd(m2, T, ct):
    ct_T = _tk_ct(T[..., :m2], ct)
    return (ct_T.at[..., :m2].add(_tm_ct(T, ct)),)


descriptor_product_train.defvjp(_descriptor_product_fwd, _descriptor_product_bwd)
