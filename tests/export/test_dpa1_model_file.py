"""DPA-1 (se_atten, se_atten_v2) models written as DeePMD-kit's model file (.dp / .yaml): the dict is the one
DeePMD-kit wrote for the same weights, DeePMD-kit's own code reads our files and gives our numbers, and reading
them back gives our model bit for bit. Cases: DeePMD-kit's DPA-1 fixtures and a se_atten_v2 model trained here.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from deepmd_cases import layout, same_model
from fixture_models import max_rel
from se_atten_case import DPA1_CASES, DPA1_FIXTURES, TRAINED_V2

from jaxmd_dp.model.deepmd_file import load_deepmd, read_deepmd_file, to_deepmd_dict

ALL = (*DPA1_CASES, TRAINED_V2)
TOL = 1e-10  # float64 throughout


def _arrays(x, path=""):
    """(path, array) of every array in a model dict, in order."""
    if isinstance(x, dict):
        for k, v in x.items():
            yield from _arrays(v, f"{path}/{k}")
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from _arrays(v, f"{path}[{i}]")
    elif isinstance(x, np.ndarray):
        yield path, x


@pytest.mark.parametrize("name", DPA1_CASES)
def test_dict_is_the_one_deepmd_kit_wrote(name):
    """The fixture's model read and written again: ``model`` laid out as DeePMD-kit's ``serialize()`` gave it
    (keys in its order, values, classes, versions, shapes, dtypes), every array bit for bit but ``out_std``
    (DeePMD-kit's per-type energy spread, which no energy uses; we write ones)."""
    theirs = read_deepmd_file(DPA1_FIXTURES / name / "model.dp")["model"]
    ours = to_deepmd_dict(*load_deepmd(DPA1_FIXTURES / name / "model.dp"))["model"]
    assert json.dumps(layout(ours)) == json.dumps(layout(theirs))
    pairs = list(zip(_arrays(ours), _arrays(theirs)))
    assert len(pairs) > 10 and all(p == q for (p, _), (q, _) in pairs)
    differ = [p for (p, x), (_, y) in pairs if not np.array_equal(x, y)]
    assert differ in ([], ["/@variables/out_std"]), differ


def test_model_def_script_builds_the_model(dpa1_cases, tmp_path):
    """``model_def_script`` is a DeePMD-kit ``model`` section our config reads back to the same model."""
    from jaxmd_dp.model.hyper import ModelHyper

    for name, case in dpa1_cases.items():
        script = to_deepmd_dict(case.hyper, case.params, case.stats)["model_def_script"]
        assert ModelHyper.from_deepmd(script) == case.hyper, name
        assert script["descriptor"]["type"] == case.hyper.descriptor.type_name


@pytest.mark.parametrize("name", ALL)
def test_deepmd_kit_numpy_backend_gives_our_energies(dpa1_cases, dpa1_deepmd_kit, name):
    """``deepmd.dpmodel`` (``load_dp_model``, ``BaseModel.deserialize``, the model called) on our .dp: our
    energies and atomic energies; forces and virials too where it gives finite ones."""
    case = dpa1_cases[name]
    got = np.load(dpa1_deepmd_kit.dir(name) / "np.npz")
    for key in ("energy", "atom_energy", "force", "virial"):
        if key in got.files and np.all(np.isfinite(got[key])):
            err = max_rel(got[key], getattr(case.ours, key))
            print(f"{name} deepmd.dpmodel {key} max rel {err:.2e}")
            assert err <= TOL, key
        else:
            assert key in ("force", "virial"), key


def test_deepmd_kit_reads_our_yaml(dpa1_cases, dpa1_deepmd_kit):
    case = dpa1_cases[TRAINED_V2]
    got = np.load(dpa1_deepmd_kit.dir(TRAINED_V2) / "yaml.npz")
    assert max_rel(got["energy"], case.ours.energy) <= TOL
    assert max_rel(got["atom_energy"], case.ours.atom_energy) <= TOL


def test_deepmd_kit_jax_backend_gives_our_forces_and_virials(dpa1_cases, dpa1_deepmd_kit):
    """``dp convert-backend model.dp model.hlo`` and ``DeepPot(model.hlo).eval`` (DeePMD-kit's JAX backend) on
    the trained se_atten_v2 model: our energies, forces, virials and atomic energies."""
    case = dpa1_cases[TRAINED_V2]
    got = np.load(dpa1_deepmd_kit.dir(TRAINED_V2) / "jax.npz")
    for key in ("energy", "force", "virial", "atom_energy"):
        err = max_rel(got[key], getattr(case.ours, key))
        print(f"{TRAINED_V2} model.hlo {key} max rel {err:.2e}")
        assert err <= TOL, key


@pytest.mark.parametrize("name", ALL)
def test_round_trip_is_exact(dpa1_cases, dpa1_deepmd_kit, name):
    """Our .dp read back: the same model bit for bit (hyper-parameters, weights and their dtypes, statistics)."""
    case = dpa1_cases[name]
    same_model(load_deepmd(dpa1_deepmd_kit.dir(name) / "model.dp"), (case.hyper, case.params, case.stats))


def test_yaml_round_trip_is_exact(dpa1_cases, dpa1_deepmd_kit):
    case = dpa1_cases[TRAINED_V2]
    same_model(load_deepmd(dpa1_deepmd_kit.dir(TRAINED_V2) / "model.yaml"), (case.hyper, case.params, case.stats))


def test_set_davg_zero_is_what_the_statistics_say(dpa1_cases):
    """se_atten's set_davg_zero (its default true) leaves davg zero; it is written as davg being all zero."""
    written = {}
    for name, case in dpa1_cases.items():
        written[name] = to_deepmd_dict(case.hyper, case.params, case.stats)["model"]["descriptor"]["set_davg_zero"]
        assert written[name] == (not np.any(case.stats.davg)), name
    assert set(written.values()) == {True, False}


def test_float32_round_trip_keeps_dtypes(tmp_path):
    """A float32 DPA-1 model (attention, layer norms, type embedding) is written and read back in float32."""
    import jax

    from jaxmd_dp.model.deepmd_file import save_deepmd

    hyper, params, stats = load_deepmd(DPA1_FIXTURES / "water_concat" / "model.dp")  # fixed layer norms
    hyper = hyper.replace(precision="float32", fit_precision="float32")
    params = jax.tree_util.tree_map(lambda x: np.asarray(x, np.float32), params)
    for suffix in (".dp", ".yaml"):
        path = save_deepmd(tmp_path / f"m{suffix}", hyper, params, stats)
        same_model(load_deepmd(path), (hyper, params, stats))
    desc = read_deepmd_file(tmp_path / "m.dp")["model"]["descriptor"]
    norm = desc["attention_layers"]["attention_layers"][0]["attn_layer_norm"]
    assert norm["precision"] == "float32" and norm["@variables"]["w"].dtype == np.float32 and not norm["trainable"]
