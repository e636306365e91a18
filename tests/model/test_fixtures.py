"""Our se_e2_a with DeePMD-kit's weights gives DeePMD-kit's energies, forces, virials, atomic energies."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from fixture_models import FIXTURES, load_fixture, max_rel

from jaxmd_dp.geometry.neighbor import allocate, build
from jaxmd_dp.model.energy import Stats, predict
from jaxmd_dp.model.plan import ExecutionPlan


def _predict(name, precision, capacity=None):
    hyper, params, stats, p = load_fixture(name)
    box = p.get("box")
    dtype = jnp.float64
    if precision == "float32":
        hyper = hyper.replace(precision="float32", fit_precision="float32")
        params = jax.tree_util.tree_map(lambda x: jnp.asarray(x, jnp.float32), params)
    spec = allocate(p["coord"], box, hyper.rcut, hyper.sel)

    @jax.jit
    def run(coord, box, atype):
        nl = build(spec, coord, box, atype)
        return predict(hyper, params, Stats(*stats), coord, box, atype, nl, plan=ExecutionPlan(capacity)), nl.nneigh

    coord = jnp.asarray(p["coord"], dtype)
    out, nneigh = run(coord, None if box is None else jnp.asarray(box, dtype), jnp.asarray(p["atype"]))
    assert np.all(np.asarray(nneigh).max(axis=(0, 1)) <= np.asarray(hyper.sel)), "fixture frames overflow sel"
    return out, p


@pytest.mark.parametrize("name", FIXTURES)
@pytest.mark.parametrize("precision,tol", [("float64", 1e-10), ("float32", 1e-5)])
def test_matches_deepmd_kit(name, precision, tol):
    out, p = _predict(name, precision)
    for key in ("energy", "force", "virial", "atom_energy"):
        err = max_rel(getattr(out, key), p[key])
        assert err <= tol, f"{name} {precision} {key}: max rel error {err:.2e} > {tol:g}"


@pytest.mark.parametrize("name", ["water_pairnets", "nopbc_cho"])
def test_per_type_capacity_is_exact(name):
    """Per-type nets on their own atoms only (capacity = atoms of each type) give the same numbers."""
    from jaxmd_dp.model.energy import type_capacity

    hyper, _, _, p = load_fixture(name)
    cap = type_capacity([p["atype"]], hyper.ntypes)
    assert sum(cap) == p["atype"].size
    out, p = _predict(name, "float64", cap)
    for key in ("energy", "force", "virial", "atom_energy"):
        assert max_rel(getattr(out, key), p[key]) <= 1e-10, key
