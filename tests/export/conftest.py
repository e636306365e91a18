"""Fixtures of the DeePMD-kit model-file tests, made once per session.

``cases``: the models (:mod:`deepmd_cases`) with our predictions. ``deepmd_kit`` writes every case's ``.dp``
and a DeePMD-kit data system of its frames (labels: our predictions), then runs DeePMD-kit on them in one
process (``deepmd_kit_run.py``): ``dp test -m model.dp`` (its NumPy backend), ``dp convert-backend model.dp
model.pb``, ``dp test -m model.pb`` and ``DeepPot(model.pb)`` atomic energies (TensorFlow). DeePMD-kit must be
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
