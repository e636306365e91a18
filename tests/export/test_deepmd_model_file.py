"""DeePMD-kit's model file (.dp / .yaml) out and in: DeePMD-kit's own code runs our exported models to our
numbers, the layout is the one ``deepmd.dpmodel`` writes, and reading a file back gives our model bit for bit.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest
import yaml
from deepmd_cases import BACK_CASE, CASES, YAML_CASE, layout, same_model
from fixture_models import max_rel

from jaxmd_dp.errors import InputError
from jaxmd_dp.model.deepmd_file import load_deepmd, read_deepmd_file, save_deepmd, to_deepmd_dict, write_deepmd_file
from jaxmd_dp.model.trained import Model

# ------------------------------------------------------------------------------- DeePMD-kit runs our files


@pytest.mark.parametrize("name", CASES)
def test_numpy_backend_energies(cases, deepmd_kit, name):
    """``dp test -m model.dp``: DeePMD-kit's NumPy reference implementation gives our energies."""
    case = cases[name]
    err = max_rel(deepmd_kit.detail(name, "np", "e")[:, 0], case.ours.energy)
    print(f"{name} dp test model.dp energy max rel {err:.2e}")
    assert err <= case.tol


@pytest.mark.parametrize("name", CASES)
def test_tensorflow_backend_predictions(cases, deepmd_kit, name):
    """``dp convert-backend model.dp model.pb``, then ``dp test -m model.pb`` and ``DeepPot(model.pb)``: our
    energies, forces, virials and atomic energies."""
    case = cases[name]
    nf = len(case.coord)
    atomic = np.load(deepmd_kit.dir(name) / "tf" / "atomic.npz")
    got = {
        "energy": deepmd_kit.detail(name, "tf", "e")[:, 0],
        "force": deepmd_kit.detail(name, "tf", "f").reshape(nf, -1, 3),
        "virial": deepmd_kit.detail(name, "tf", "v").reshape(nf, 9),
        "atom_energy": atomic["atom_energy"],
    }
    for key, value in got.items():
        err = max_rel(value, getattr(case.ours, key))
        print(f"{name} model.pb {key} max rel {err:.2e}")
        assert err <= case.tol, key
    assert max_rel(atomic["energy"], case.ours.energy) <= case.tol


def test_yaml_model_file_runs_in_deepmd_kit(cases, deepmd_kit):
    case = cases[YAML_CASE]
    assert max_rel(deepmd_kit.detail(YAML_CASE, "yaml", "e")[:, 0], case.ours.energy) <= case.tol


@pytest.mark.parametrize("name", ["water_se_e2_a", "water_pairnets"])
def test_layout_is_deepmd_kits(cases, deepmd_kit, name):
    """Our dict, but for the arrays' values, is what ``deepmd.dpmodel`` serialises for the same model section
    (keys in its order, hyper-parameters, classes, versions, array shapes and dtypes)."""
    case = cases[name]
    ours = layout(to_deepmd_dict(case.hyper, case.params, case.stats)["model"])
    theirs = json.loads((deepmd_kit.dir(name) / "layout.json").read_text())
    assert json.dumps(ours) == json.dumps(theirs)


def test_deepmd_kits_own_dp_file_of_our_pb(cases, deepmd_kit):
    """A .dp that DeePMD-kit made (``dp convert-backend model.pb back.dp``) reads as our model: the nets and
    davg/dstd bit for bit. DeePMD-kit does not carry a .pb's out_bias over, and the reader says so."""
    case = cases[BACK_CASE]
    with pytest.warns(UserWarning, match="zero energy bias"):
        hyper, params, stats = load_deepmd(deepmd_kit.dir(BACK_CASE) / "back.dp")
    assert read_deepmd_file(deepmd_kit.dir(BACK_CASE) / "back.dp")["backend"] == "TensorFlow"
    same_model((hyper, params, stats[:2]), (case.hyper, case.params, case.stats[:2]))
    assert np.any(case.stats.energy_bias)


# ------------------------------------------------------------------------------- our files read back


@pytest.mark.parametrize("name", CASES)
def test_round_trip_is_exact(cases, deepmd_kit, name):
    """model.dp → load_deepmd: the same model bit for bit, and the same predictions."""
    case = cases[name]
    back = load_deepmd(deepmd_kit.dir(name) / "model.dp")
    same_model(back, (case.hyper, case.params, case.stats))
    again = Model(*back).predict(case.coord, case.box, case.atype)
    for key in ("energy", "force", "virial", "atom_energy"):
        assert np.array_equal(np.asarray(getattr(again, key)), getattr(case.ours, key)), key


def test_yaml_round_trip_is_exact(cases, deepmd_kit):
    case = cases[YAML_CASE]
    same_model(load_deepmd(deepmd_kit.dir(YAML_CASE) / "model.yaml"), (case.hyper, case.params, case.stats))
    text = (deepmd_kit.dir(YAML_CASE) / "model.yaml").read_text()
    assert "'@class': np.ndarray" in text and "dtype: float32" in text


def test_file_written_atomically_with_the_usual_mode(cases, tmp_path):
    case = cases["water_pairnets"]
    old = os.umask(0o022)
    try:
        path = save_deepmd(tmp_path / "m.dp", case.hyper, case.params, case.stats)
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.dp"]  # no temporary file left


# ------------------------------------------------------------------------------- refused models, one line each


@pytest.fixture(scope="module")
def small(cases):
    """The float32 trained model's dict, to alter."""
    c = cases[YAML_CASE]
    return to_deepmd_dict(c.hyper, c.params, c.stats)


def _refusal(tmp_path, data, suffix=".yaml") -> str:
    path = write_deepmd_file(tmp_path / f"altered{suffix}", data)
    with pytest.raises(InputError) as e:
        load_deepmd(path)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(str(path))
    return msg


def _altered(data, change):
    import copy

    d = copy.deepcopy(data)
    change(d["model"])
    return d


@pytest.mark.parametrize(
    "change,words",
    [
        (lambda m: m["descriptor"].update(type="se_e2_r"), "descriptor 'se_e2_r'"),
        (lambda m: m["descriptor"].update(type="dpa2"), "only se_e2_a, se_atten (dpa1) and se_atten_v2"),
        (lambda m: m["descriptor"].update(type="dpa1"), "fitting.mixed_types is false"),
        (lambda m: m["fitting"].update(type="dipole"), "fitting 'dipole'"),
        (lambda m: m.update(type="linear_ener"), "'linear_ener' model"),
        (lambda m: m.update(type="zbl"), "'zbl' model"),
        (lambda m: m.update(atom_exclude_types=[1]), "model.atom_exclude_types is [1]"),
        (lambda m: m.update(pair_exclude_types=[[0, 1]]), "model.pair_exclude_types"),
        (lambda m: m["descriptor"].update(exclude_types=[[0, 1]]), "descriptor.exclude_types"),
        (lambda m: m["descriptor"].update(env_protection=1e-3), "descriptor.env_protection"),
        (lambda m: m["descriptor"]["env_mat"].update(use_exp_switch=True), "exponential switch"),
        (lambda m: m["descriptor"].update(compress={"@variables": {}}, **{"@version": 3}), "compressed"),
        (lambda m: m["fitting"].update(numb_fparam=2), "fitting.numb_fparam is 2: frame parameters"),
        (lambda m: m["fitting"].update(numb_aparam=1), "atomic parameters"),
        (lambda m: m["fitting"].update(atom_ener=[1.5, None]), "fitting.atom_ener"),
        (lambda m: m["fitting"].update(mixed_types=True), "one fitting net for all types"),
        (lambda m: m["fitting"].update(spin={"use_spin": [True, False]}), "fitting.spin"),
        (lambda m: m["fitting"].update(dim_case_embd=3), "case embeddings"),
        (lambda m: m["fitting"].update(trainable=[True, False, True]), "frozen (untrainable) layers"),
        (lambda m: m["descriptor"].update(activation_function="swish"), "model.descriptor.activation_function"),
        (lambda m: m["descriptor"].update(**{"@version": 9}), "layout version 9"),
        (lambda m: m["descriptor"].update(sel=[40, 92]), "davg/dstd have shape (2, 138, 4)"),
        (lambda m: m["descriptor"].update(type_one_side=False), "expected 4 nets"),
        (lambda m: m["descriptor"]["embeddings"]["networks"][0]["layers"].pop(), "has 1 layers, expected 2"),
    ],
)
def test_refused_with_one_line(small, tmp_path, change, words):
    assert words in _refusal(tmp_path, _altered(small, change))


def test_other_model_files_are_sent_to_convert_backend(tmp_path):
    for suffix in (".pb", ".pth"):
        (tmp_path / f"graph{suffix}").write_bytes(b"\0")
        with pytest.raises(InputError, match=rf"dp convert-backend graph\{suffix} graph\.dp"):
            load_deepmd(tmp_path / f"graph{suffix}")
    with pytest.raises(InputError, match="not '.npz'"):
        load_deepmd(tmp_path / "weights.npz")
    with pytest.raises(InputError, match="no such file"):
        load_deepmd(tmp_path / "absent.dp")
    (tmp_path / "broken.dp").write_text("not HDF5")
    with pytest.raises(InputError, match="not a readable HDF5 file"):
        load_deepmd(tmp_path / "broken.dp")


def test_without_h5py_one_line_and_no_file(cases, tmp_path, monkeypatch):
    case = cases["water_pairnets"]
    monkeypatch.setitem(sys.modules, "h5py", None)  # import h5py raises ImportError
    with pytest.raises(InputError, match=r"needs h5py \(pip install h5py, or the 'deepmd' extra"):
        save_deepmd(tmp_path / "m.dp", case.hyper, case.params, case.stats)
    assert not list(tmp_path.iterdir())
    save_deepmd(tmp_path / "m.yaml", case.hyper, case.params, case.stats)  # YAML needs no h5py
    with open(tmp_path / "m.yaml") as f:
        assert yaml.safe_load(f)["model"]["descriptor"]["type"] == "se_e2_a"


def test_model_deepmd_kit_cannot_hold_is_refused_before_writing(cases, tmp_path):
    case = cases["water_pairnets"]
    hyper = case.hyper.replace(precision="bfloat16", fit_precision="bfloat16")
    with pytest.raises(InputError, match="precision bfloat16"):
        save_deepmd(tmp_path / "m.dp", hyper, case.params, case.stats)
    assert not list(tmp_path.iterdir())
