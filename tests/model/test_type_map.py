"""A DeePMD-kit model moved onto a reordered, extended type map predicts what it predicted for frames of its
own types (the bias kept), with fresh nets and statistics for the new types; its energy bias then changes by
the least-squares fit of label − prediction (jaxmd_dp.model.type_map, jaxmd_dp.model.bias)."""

from pathlib import Path

import jax
import numpy as np
import pytest
from deepmd.utils.out_stat import compute_stats_from_redu
from fixture_models import load_fixture, max_rel
from shared_paths import require

from jaxmd_dp.data.sampler import find_systems, make_batch
from jaxmd_dp.data.system import load_system
from jaxmd_dp.model.bias import change_energy_bias
from jaxmd_dp.model.deepmd_file import load_deepmd
from jaxmd_dp.model.energy import Stats, init_params
from jaxmd_dp.model.trained import Model
from jaxmd_dp.model.type_map import change_type_map, changed_hyper, type_index

DPA1 = Path(__file__).resolve().parents[1] / "data" / "dpa1_fixtures"


def _fresh_stats(hyper, seed=3):
    """Statistics of the new model standing in for the new data's: any values (they reach the new types
    only, and dstd of the kept centres' new slots, whose davg is 0)."""
    rng = np.random.default_rng(seed)
    shape = hyper.descriptor.stat_shape(hyper.ntypes)
    return Stats(rng.normal(size=shape), rng.uniform(0.5, 2.0, size=shape), rng.normal(size=hyper.ntypes))


def _moved(hyper, params, stats, type_map, new_sel=None):
    new = changed_hyper(hyper, type_map, new_sel)
    fresh = jax.tree_util.tree_map(np.asarray, init_params(new, seed=5))
    p, s, notes = change_type_map(hyper, params, stats, new, fresh, _fresh_stats(new), seed=7)
    return new, p, s, notes


def _same_predictions(old, new, coord, box, atype_old):
    """The moved model on the same frames (its type indices) against the original model."""
    index = type_index(old.type_map, new.type_map)
    to_new = {o: i for i, o in enumerate(index) if o is not None}
    atype_new = np.array([to_new[int(t)] for t in atype_old])
    a, b = old.predict(coord, box, atype_old), new.predict(coord, box, atype_new)
    for key in ("energy", "force", "virial", "atom_energy"):
        err = max_rel(getattr(b, key), getattr(a, key))
        assert err <= 1e-10, f"{key}: max rel error {err:.2e}"
    return b


def test_index_as_deepmd_kit():
    assert type_index(["O", "H"], ["H", "Cu", "O"]) == [1, None, 0]


def test_se_e2_a_pair_nets_reordered_and_extended():
    """nopbc_cho (C, H, O, one embedding net per type pair) on [O, N, C, H]: the C/H/O frames give DeePMD-kit's
    numbers; N's nets are the fresh ones; the bias is kept (0 for N); nnei 12 → 16 rescales the fitting nets'
    first matrices by (16/12)²."""
    hyper, params, stats, p = load_fixture("nopbc_cho")
    new, moved, s, notes = _moved(hyper, params, stats, ["O", "N", "C", "H"], {"N": 4})
    assert notes == [] and new.sel == (4, 4, 4, 4) and new.ntypes == 4
    assert set(moved["descriptor"]) == {f"embed_{k}" for k in range(16)}
    # (neighbour O, centre C): old net 2·3 + 0, new 0·4 + 2
    np.testing.assert_array_equal(moved["descriptor"]["embed_2"]["layer_1"]["matrix"],
                                  params["descriptor"]["embed_6"]["layer_1"]["matrix"])  # fmt: skip
    np.testing.assert_allclose(
        moved["fitting"]["fit_0"]["layer_0"]["matrix"],
        np.asarray(params["fitting"]["fit_2"]["layer_0"]["matrix"]) * (16 / 12) ** 2,
        rtol=1e-15,
    )
    np.testing.assert_array_equal(
        s.energy_bias, [stats.energy_bias[2], 0.0, stats.energy_bias[0], stats.energy_bias[1]]
    )
    assert np.all(s.davg[2, 4:8] == 0.0) and np.all(s.davg[2, :4] == stats.davg[0, 8:12])
    b = _same_predictions(Model(hyper, params, stats), Model(new, moved, s), p["coord"], None, p["atype"])
    assert max_rel(b.energy, p["energy"]) <= 1e-10 and max_rel(b.force, p["force"]) <= 1e-10


def test_se_e2_a_drop_type():
    """A dropped type's nets and slots go; the kept types' nets and statistics stay."""
    hyper, params, stats, _ = load_fixture("nopbc_cho")
    new, moved, s, notes = _moved(hyper, params, stats, ["H", "C"])
    assert new.sel == (4, 4) and s.davg.shape == (2, 8, 4) and set(moved["fitting"]) == {"fit_0", "fit_1"}
    assert len(notes) == 1 and "'O'" in notes[0]  # its empty slots' rows were nonzero: energies change
    np.testing.assert_array_equal(moved["descriptor"]["embed_1"]["layer_0"]["bias"],
                                  params["descriptor"]["embed_3"]["layer_0"]["bias"])  # fmt: skip
    np.testing.assert_array_equal(s.dstd[1, :4], stats.dstd[0, 4:8])


@pytest.mark.parametrize("name,type_map", [("water_v2_attn2", ["H", "Cu", "O"]), ("water_exclude", ["Zn", "H", "O"])])
def test_dpa1_reordered_and_extended(name, type_map):
    """DPA-1: the type embedding's rows move (water_v2_attn2: tebd_dim 4 = 2·ntypes, a skip that the new 3 types
    do not have), exclude_types [[0, 1]] become [[2, 1]]; DeePMD-kit's predictions stay."""
    hyper, params, stats = load_deepmd(DPA1 / name / "model.dp")
    with np.load(DPA1 / name / "predictions.npz") as z:
        p = {k: z[k] for k in z.files}
    new, moved, s, _ = _moved(hyper, params, stats, type_map)
    if hyper.descriptor.exclude_types:
        assert new.descriptor.exclude_types == ((2, 1),)
    b = _same_predictions(Model(hyper, params, stats), Model(new, moved, s), p["coord"], p["box"], p["atype"])
    assert max_rel(b.energy, p["energy"]) <= 1e-10 and max_rel(b.force, p["force"]) <= 1e-10


def _cho_frames(type_map, nframes=3):
    root = require("nopbc_cho_combustion")
    systems = [load_system(path, type_map) for path in find_systems(root)]
    return [make_batch(sys, np.arange(nframes), k) for k, sys in enumerate(systems)]


def test_bias_change_is_the_least_squares_fit_of_the_residual():
    """After the move, "change-by-statistic" adds lstsq(counts, E − E_pred) (by hand, and with DeePMD-kit's
    compute_stats_from_redu); forces do not move, energies by counts·δ."""
    hyper, params, stats, _ = load_fixture("nopbc_cho")
    new, moved, s, _ = _moved(hyper, params, stats, ["O", "N", "C", "H"], {"N": 4})
    frames = _cho_frames(list(new.type_map))
    model = Model(new, moved, s)
    counts, residual = [], []
    for f in frames:
        pred = model.predict(f["coord"], None, f["atype"]).energy
        counts += [np.bincount(f["atype"], minlength=new.ntypes)] * len(pred)
        residual.append(f["energy"] - pred)
    counts, residual = np.asarray(counts, float), np.concatenate(residual)
    delta = np.linalg.lstsq(counts, residual, rcond=None)[0]
    assert delta[1] == pytest.approx(0.0, abs=1e-12)  # no N atom: the minimum-norm solution leaves it alone
    change = change_energy_bias(new, moved, s, frames, "change")
    np.testing.assert_allclose(change.new, s.energy_bias + delta, rtol=0, atol=1e-9)
    ref, _ = compute_stats_from_redu(residual.reshape(-1, 1), counts)
    np.testing.assert_allclose(change.new, s.energy_bias + ref[:, 0], rtol=0, atol=1e-9)
    after = Model(new, moved, Stats(s.davg, s.dstd, change.new))
    f = frames[0]
    a, b = model.predict(f["coord"], None, f["atype"]), after.predict(f["coord"], None, f["atype"])
    np.testing.assert_array_equal(a.force, b.force)
    np.testing.assert_allclose(b.energy - a.energy, np.bincount(f["atype"], minlength=4) @ delta, atol=1e-9)
    set_mode = change_energy_bias(new, moved, s, frames, "set")
    energies = np.concatenate([f["energy"] for f in frames])
    np.testing.assert_allclose(set_mode.new, np.linalg.lstsq(counts, energies, rcond=None)[0], atol=1e-9)
