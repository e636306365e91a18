"""Fixtures of the DeePMD-kit model-file tests, made once per session.

``cases``: the models (:mod:`deepmd_cases`) with our predictions; ``dpa1_cases``: DeePMD-kit's DPA-1 fixtures
and ``tiny_v2``, a se_atten_v2 model trained here (:mod:`se_atten_case`), with ours. ``deepmd_kit`` writes every
case's ``.dp`` and a DeePMD-kit data system of its frames (labels: our predictions), then runs DeePMD-kit on them in one
process (``deepmd_kit_run.py``): ``dp test -m model.dp`` (its NumPy backend), ``dp convert-backend model.dp
model.pb``, ``dp test -m model.pb`` and ``DeepPot(model.pb)`` atomic energies (TensorFlow);
``dpa1_deepmd_kit`` the same for the DPA-1 cases: ``deepmd.dpmodel`` reads each ``.dp`` (and the trained
model's ``.yaml``) and runs it (NumPy), and ``dp convert-backend model.dp model.hlo`` with ``DeepPot(model.hlo)``
gives the trained model's forces and virials (DeePMD-kit's JAX backend). DeePMD-kit must be
installed (``pip install -e '.[deepmd]'``): without it these tests fail.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from deepmd_cases import (
    BACK_CASE,
    HERE,
    TRAINED,
    YAML_CASE,
    Case,
    DeepmdKitRun,
    deepmd_kit_env,
    train_small,
    write_system,
)
from fixture_models import FIXTURES, fixture_dir, load_fixture
from se_atten_case import DPA1_CASES, TRAINED_V2, TinyRun, load_dpa1_fixture, train_tiny


@pytest.fixture(scope="session")
def cases(tmp_path_factory) -> dict[str, Case]:
    from jaxmd_dp.model.trained import Model

    out = {}
    for name in FIXTURES:
        hyper, params, stats, p = load_fixture(name)
        box = p.get("box")
        coord, box = p["coord"], None if box is None else box.reshape(-1, 3, 3)
        out[name] = (hyper, params, stats, coord, box, p["atype"])
    for name, (tos, precision) in TRAINED.items():
        out[name] = train_small(tos, precision, tmp_path_factory.mktemp(name))
    result = {}
    for name, (hyper, params, stats, coord, box, atype) in out.items():
        ours = Model(hyper, params, stats).predict(coord, box, atype)
        result[name] = Case(name, hyper, params, stats, coord, box, atype, type(ours)(*(np.asarray(x) for x in ours)))
    return result


@pytest.fixture(scope="session")
def deepmd_kit(cases, tmp_path_factory) -> DeepmdKitRun:
    from jaxmd_dp.model.deepmd_file import save_deepmd

    root = tmp_path_factory.mktemp("deepmd_kit")
    jobs = []
    for name, case in cases.items():
        d = root / name
        d.mkdir()
        save_deepmd(d / "model.dp", case.hyper, case.params, case.stats)
        system = str(write_system(d / "system", case))
        for sub in ("np", "tf"):
            (d / sub).mkdir()
        jobs += [
            {"dp": ["test", "-m", str(d / "model.dp"), "-s", system, "-d", str(d / "np" / "detail")]},
            {"dp": ["convert-backend", str(d / "model.dp"), str(d / "model.pb")]},
            {"dp": ["test", "-m", str(d / "model.pb"), "-s", system, "-d", str(d / "tf" / "detail")]},
            {"eval": str(d / "model.pb"), "system": system, "out": str(d / "tf" / "atomic.npz")},
        ]
    d = root / YAML_CASE
    case = cases[YAML_CASE]
    save_deepmd(d / "model.yaml", case.hyper, case.params, case.stats)
    (d / "yaml").mkdir()
    jobs.append(
        {"dp": ["test", "-m", str(d / "model.yaml"), "-s", str(d / "system"), "-d", str(d / "yaml" / "detail")]}
    )
    jobs.append({"dp": ["convert-backend", str(root / BACK_CASE / "model.pb"), str(root / BACK_CASE / "back.dp")]})
    for name in ("water_se_e2_a", "water_pairnets"):
        jobs.append({"layout": str(fixture_dir(name) / "out.json"), "out": str(root / name / "layout.json")})
    return _run_deepmd_kit(root, jobs)


def _run_deepmd_kit(root, jobs) -> DeepmdKitRun:
    """DeePMD-kit runs the jobs (``deepmd_kit_run.py``) in one process; a failure fails the test."""
    (root / "jobs.json").write_text(json.dumps(jobs, indent=1))
    run = subprocess.run(
        [sys.executable, str(HERE / "deepmd_kit_run.py"), str(root / "jobs.json")],
        capture_output=True,
        text=True,
        env=deepmd_kit_env(),
        timeout=1800,
    )
    if run.returncode != 0:
        pytest.fail(f"DeePMD-kit failed (status {run.returncode}):\n{run.stderr[-3000:]}", pytrace=False)
    return DeepmdKitRun(root)


@pytest.fixture(scope="session")
def tiny_v2(tmp_path_factory) -> TinyRun:
    return train_tiny(tmp_path_factory.mktemp("tiny_v2"))


@pytest.fixture(scope="session")
def dpa1_cases(tiny_v2) -> dict[str, Case]:
    from jaxmd_dp.model.trained import Model

    out = {}
    for name in DPA1_CASES:
        hyper, params, stats, coord, box, atype = load_dpa1_fixture(name)
        ours = Model(hyper, params, stats).predict(coord, box, atype)
        out[name] = Case(name, hyper, params, stats, coord, box, atype, type(ours)(*(np.asarray(x) for x in ours)))
    t = tiny_v2
    out[TRAINED_V2] = Case(TRAINED_V2, t.model.hyper, t.model.params, t.model.stats, t.coord, t.box, t.atype, t.ours)
    return out


@pytest.fixture(scope="session")
def dpa1_deepmd_kit(dpa1_cases, tmp_path_factory) -> DeepmdKitRun:
    from jaxmd_dp.model.deepmd_file import save_deepmd

    root = tmp_path_factory.mktemp("deepmd_kit_dpa1")
    jobs = []
    for name, case in dpa1_cases.items():
        d = root / name
        d.mkdir()
        save_deepmd(d / "model.dp", case.hyper, case.params, case.stats)
        system = str(write_system(d / "system", case))
        jobs.append({"dpmodel": str(d / "model.dp"), "system": system, "out": str(d / "np.npz")})
    d = root / TRAINED_V2
    save_deepmd(d / "model.yaml", *(getattr(dpa1_cases[TRAINED_V2], k) for k in ("hyper", "params", "stats")))
    jobs += [
        {"dpmodel": str(d / "model.yaml"), "system": str(d / "system"), "out": str(d / "yaml.npz")},
        {"dp": ["convert-backend", str(d / "model.dp"), str(d / "model.hlo")]},
        {"eval": str(d / "model.hlo"), "system": str(d / "system"), "out": str(d / "jax.npz")},
    ]
    return _run_deepmd_kit(root, jobs)
