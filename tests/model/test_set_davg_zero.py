"""A DeePMD-kit model trained with ``set_davg_zero: true`` (tests/data/deepmd_set_davg_zero), converted with
convert_deepmd's functions, gives DeePMD-kit's energies, forces and virials to 1e-10 (float64)."""

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from fixture_models import max_rel

from jaxmd_dp.cli.convert_deepmd import hyper_from_deepmd, load_state_dict, params_from_state_dict, read_input
from jaxmd_dp.geometry.neighbor import allocate, build
from jaxmd_dp.model.energy import Stats, predict

FIXTURE = Path(__file__).absolute().parents[1] / "data" / "deepmd_set_davg_zero"


def test_fixture_is_small_and_says_how_it_was_made():
    assert sum(f.stat().st_size for f in FIXTURE.iterdir()) < 200_000
    assert read_input(FIXTURE / "input.json")["model"]["descriptor"]["set_davg_zero"] is True
    assert "make_fixture.py" in (FIXTURE / "README.md").read_text()


def test_set_davg_zero_model_matches_deepmd_kit():
    hyper = hyper_from_deepmd(read_input(FIXTURE / "input.json")["model"], "input.json")
    params, stats = params_from_state_dict(load_state_dict(FIXTURE / "params.npz"), hyper, "params.npz")
    assert np.all(np.asarray(stats.davg) == 0.0)  # what set_davg_zero keeps
    assert np.all(np.asarray(stats.dstd) > 0.0)
    with np.load(FIXTURE / "predictions.npz") as z:
        p = {k: z[k] for k in z.files}
    coord = jnp.asarray(p["coord"], jnp.float64)
    box = jnp.asarray(p["box"], jnp.float64)
    atype = jnp.asarray(p["atype"], jnp.int32)
    spec = allocate(np.asarray(coord), np.asarray(box), hyper.rcut, hyper.sel)

    @jax.jit
    def run(coord, box, atype):
        nl = build(spec, coord, box, atype)
        return predict(hyper, params, Stats(*stats), coord, box, atype, nl), nl.nneigh

    out, nneigh = run(coord, box, atype)
    assert np.all(np.asarray(nneigh).max(axis=(0, 1)) <= np.asarray(hyper.sel))
    for key in ("energy", "force", "virial", "atom_energy"):
        err = max_rel(getattr(out, key), p[key])
        assert err <= 1e-10, f"{key}: max rel error {err:.2e}"
