"""The Pallas environment-matrix kernels (interpret mode) against the jnp ``env_mat``.

- values: ≤ 1e-12 (float64), ≤ 1e-5 (float32);
- first order: ∂E/∂coord (forces) and ∂E/∂box of E = Σ tanh(R W + b)·v, ≤ 1e-12 relative to the scale;
- second order, as training needs it: ∂/∂(W, b, v) of a loss on forces and box gradients, ≤ 1e-12;
- second order in the positions (the backward's own geometry dependence), ≤ 1e-12.
Geometries: a random triclinic cell, a cell smaller than 2·rcut, no PBC (see ``pallas_cases``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from pallas_cases import RCUT_SMTH, SEL, energy, energy_params, make_case, max_err, rel_err, run_fast, stats

from jaxmd_dp.geometry import env_mat as ref_env
from jaxmd_dp.geometry import neighbor as ref_nb
from pallas_kernels import env_mat as pem

TOL64 = 1e-12
TOL32 = 1e-5


def _kernel_env(*args):
    return pem.env_mat(*args, interpret=True)


def _setup(name, dtype=jnp.float64, seed=0):
    case = make_case(name, seed)
    spec = ref_nb.allocate(case.coord, case.box, case.rcut, SEL, "brute")
    nl = ref_nb.build(spec, case.coord, case.box, case.atype)
    davg, dstd = stats(sum(SEL))
    coord = jnp.asarray(case.coord, dtype)
    box = None if case.box is None else jnp.asarray(case.box, dtype)
    atype = jnp.asarray(case.atype)
    consts = (
        atype,
        nl.idx,
        nl.shift.astype(dtype),
        case.rcut,
        RCUT_SMTH,
        jnp.asarray(davg, dtype),
        jnp.asarray(dstd, dtype),
    )
    return case, coord, box, consts


def _all_quantities(envf, consts, has_box, weight_grad=True):
    """R, forces, ∂E/∂box, and the weight gradient of a force/virial loss — one function."""
    atype, idx, shift, rcut, rcs, davg, dstd = consts

    def R_of(c, b):
        return envf(c, b, atype, idx, shift, rcut, rcs, davg, dstd)

    def first(params, c, b):
        E = lambda c_, b_: energy(params, R_of(c_, b_))
        if has_box:
            gc, gb = jax.grad(E, argnums=(0, 1))(c, b)
        else:
            gc, gb = jax.grad(E)(c, None), jnp.zeros((c.shape[0], 3, 3), c.dtype)
        return -gc, gb

    def loss(params, c, b):
        F, gb = first(params, c, b)
        return jnp.sum((F - 0.1) ** 2) + 0.5 * jnp.sum(jnp.sin(gb)), (F, gb)

    def run(params, c, b):
        if not weight_grad:
            return R_of(c, b), *first(params, c, b)
        grads, (F, gb) = jax.grad(loss, has_aux=True)(params, c, b)
        return R_of(c, b), F, gb, grads

    return run


@pytest.mark.parametrize("name", ["triclinic", "small", "nopbc"])
def test_values_and_gradients_float64(name):
    case, coord, box, consts = _setup(name)
    params = jax.tree_util.tree_map(jnp.asarray, energy_params())
    want = run_fast(_all_quantities(ref_env.env_mat, consts, box is not None), params, coord, box)
    got = run_fast(_all_quantities(_kernel_env, consts, box is not None), params, coord, box)
    R_w, F_w, B_w, P_w = want
    R_g, F_g, B_g, P_g = got
    assert R_g.shape == R_w.shape and R_g.dtype == R_w.dtype
    errs = {
        "R": max_err(R_g, R_w),
        "force": rel_err(F_g, F_w),
        "box_grad": rel_err(B_g, B_w),
        **{f"dloss/d{k}": rel_err(P_g[k], P_w[k]) for k in P_w},
    }
    print(name, errs)
    assert all(e <= TOL64 for e in errs.values()), errs
    assert np.abs(np.asarray(F_w)).max() > 1e-3  # non-trivial forces
    assert all(np.abs(np.asarray(P_w[k])).max() > 1e-6 for k in P_w)


def test_values_and_gradients_float32():
    case, coord, box, consts = _setup("triclinic", jnp.float32, seed=5)
    params = jax.tree_util.tree_map(lambda x: jnp.asarray(x, jnp.float32), energy_params())
    want = run_fast(_all_quantities(ref_env.env_mat, consts, True, weight_grad=False), params, coord, box)
    got = run_fast(_all_quantities(_kernel_env, consts, True, weight_grad=False), params, coord, box)
    assert got[0].dtype == jnp.float32
    assert max_err(got[0], want[0]) <= TOL32
    assert rel_err(got[1], want[1]) <= 1e-5
    assert rel_err(got[2], want[2]) <= 1e-5


def test_second_order_in_positions():
    """∂/∂coord and ∂/∂box of Σ F² (F = −∂E/∂coord): exercises the backward's own vjp in the geometry."""
    case, coord, box, consts = _setup("triclinic", seed=6)
    atype, idx, shift, rcut, rcs, davg, dstd = consts
    params = jax.tree_util.tree_map(jnp.asarray, energy_params())

    def make(envf):
        def sq_force(c, b):
            E = lambda c_: energy(params, envf(c_, b, atype, idx, shift, rcut, rcs, davg, dstd))
            return jnp.sum(jax.grad(E)(c) ** 2)

        return jax.grad(sq_force, argnums=(0, 1))

    want = run_fast(make(ref_env.env_mat), coord, box)
    got = run_fast(make(_kernel_env), coord, box)
    errs = [rel_err(g, w) for g, w in zip(got, want)]
    print("second order in positions", errs)
    assert max(errs) <= TOL64, errs


def test_empty_slots_and_padding_atoms():
    """Empty slots give (−davg)/dstd rows; padding atoms (type −1) are normalised with type 0."""
    case, coord, box, consts = _setup("triclinic", seed=7)
    atype, idx, shift, rcut, rcs, davg, dstd = consts
    R = run_fast(lambda c, b: _kernel_env(c, b, atype, idx, shift, rcut, rcs, davg, dstd), coord, box)
    t = np.maximum(np.asarray(atype), 0)
    empty = np.asarray(idx) < 0
    assert empty.any()
    expect = (-np.asarray(davg)[t]) / np.asarray(dstd)[t]
    np.testing.assert_allclose(np.asarray(R)[empty], expect[empty], rtol=0, atol=1e-14)
