"""Our DPA-1 (se_atten, se_atten_v2) with DeePMD-kit's weights gives DeePMD-kit's energies, forces, virials and
atomic energies: the fixtures of tests/data/dpa1_fixtures (DeePMD-kit 3.2.0's JAX backend, see its README)."""

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from fixture_models import max_rel

from jaxmd_dp.geometry.neighbor import allocate, build
from jaxmd_dp.model.deepmd_file import load_deepmd
from jaxmd_dp.model.energy import Stats, predict
from jaxmd_dp.model.plan import ExecutionPlan
from jaxmd_dp.model.se_atten import SeAtten, SeAttenV2

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "dpa1_fixtures"
CASES = ("water_v2_attn2", "water_v2_attn0", "water_concat", "water_exclude", "almgcu_v2", "almgcu_concat")


def load(name: str):
    hyper, params, stats = load_deepmd(FIXTURES / name / "model.dp")
    with np.load(FIXTURES / name / "predictions.npz") as z:
        pred = {k: z[k] for k in z.files}
    return hyper, params, stats, pred


def _predict(name: str, precision: str):
    hyper, params, stats, p = load(name)
    if precision == "float32":
        hyper = hyper.replace(precision="float32", fit_precision="float32")
        params = jax.tree_util.tree_map(lambda x: np.asarray(x, np.float32), params)
    spec = allocate(p["coord"], p["box"], hyper.rcut, hyper.sel)

    @jax.jit
    def run(coord, box, atype):
        nl = build(spec, coord, box, atype)
        return predict(hyper, params, Stats(*stats), coord, box, atype, nl), nl.nneigh

    out, nneigh = run(jnp.asarray(p["coord"]), jnp.asarray(p["box"]), jnp.asarray(p["atype"]))
    if name != "water_concat":  # the one fixture whose sel is below the most neighbours
        assert np.all(np.asarray(nneigh) <= hyper.sel[0]), "fixture frames overflow sel"
    return out, p


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("precision,tol", [("float64", 1e-10), ("float32", 1e-5)])
def test_matches_deepmd_kit(name, precision, tol):
    out, p = _predict(name, precision)
    for key in ("energy", "force", "virial", "atom_energy"):
        err = max_rel(getattr(out, key), p[key])
        assert err <= tol, f"{name} {precision} {key}: max rel error {err:.2e} > {tol:g}"


def test_fixtures_cover_the_options():
    """What the fixtures were made for: each DPA-1 option at a non-default value somewhere, sel both above the
    most neighbours and below it (the nearest of any type are kept), two and three elements."""
    hypers = {name: load(name)[0] for name in CASES}
    ds = {name: h.descriptor for name, h in hypers.items()}
    assert {type(d) for d in ds.values()} == {SeAtten, SeAttenV2}
    assert {d.attn_layer for d in ds.values()} >= {0, 1, 2}
    assert {d.tebd_input_mode for d in ds.values()} == {"concat", "strip"}
    for field in ("type_one_side", "smooth_type_embedding", "concat_output_tebd", "use_tebd_bias", "attn_dotr"):
        assert {getattr(d, field) for d in ds.values()} == {True, False}, field
    assert any(not d.normalize and d.temperature is not None and not d.trainable_ln for d in ds.values())
    assert any(d.scaling_factor != 1.0 for d in ds.values()) and any(d.exclude_types for d in ds.values())
    assert {h.ntypes for h in hypers.values()} == {2, 3}
    most = {}
    for name in ("water_concat", "water_v2_attn2"):
        p = load(name)[3]
        nl = build(
            allocate(p["coord"], p["box"], hypers[name].rcut, hypers[name].sel), p["coord"], p["box"], p["atype"]
        )
        most[name] = int(np.asarray(nl.nneigh).max())
    assert (
        most["water_concat"] > hypers["water_concat"].sel[0]
        and most["water_v2_attn2"] <= hypers["water_v2_attn2"].sel[0]
    )


@pytest.mark.parametrize("name", [c for c in CASES if c != "water_concat"])
def test_cut_list_matches_deepmd_kit(name):
    """The training step's list cut to the slots the frames fill (FastPaths.cut): the cut slots' share comes
    from the empty rows, and DeePMD-kit's numbers are unchanged."""
    hyper, params, stats, p = load(name)
    full = build(allocate(p["coord"], p["box"], hyper.rcut, hyper.sel), p["coord"], p["box"], p["atype"])
    keep = (int(np.asarray(full.nneigh).max()),)
    assert keep[0] < hyper.sel[0]
    nl = build(allocate(p["coord"], p["box"], hyper.rcut, keep), p["coord"], p["box"], p["atype"])
    run = jax.jit(predict, static_argnums=0, static_argnames="plan")
    out = run(hyper, params, Stats(*stats), p["coord"], p["box"], p["atype"], nl, plan=ExecutionPlan(keep=keep))
    for key in ("energy", "force", "virial", "atom_energy"):
        assert max_rel(getattr(out, key), p[key]) <= 1e-10, key
