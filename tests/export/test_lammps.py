"""MD in LAMMPS with an exported model: examples/lammps runs NVE water on the .pb that DeePMD-kit made from our
.dp; its first-step energy and forces are ours, and the total energy is conserved."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
from deepmd_cases import deepmd_kit_env, venv_tool
from fixture_models import max_rel
from shared_paths import require

from jaxmd_dp.model.trained import Model

EXAMPLE = Path(__file__).absolute().parents[2] / "examples" / "lammps"
STEPS = 20


def _thermo(log: str) -> np.ndarray:
    """The thermo table (step pe ke etotal temp press) of the run."""
    lines = log.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.split()[:2] == ["Step", "PotEng"]) + 1
    rows = []
    for ln in lines[start:]:
        if ln.startswith("Loop time"):
            break
        rows.append([float(x) for x in ln.split()])
    return np.array(rows)


def _dump_step0(text: str) -> np.ndarray:
    """(natoms, 8) id type x y z fx fy fz of the first snapshot of a LAMMPS custom dump."""
    lines = text.splitlines()
    assert lines[1].strip() == "0"
    natoms = int(lines[3])
    return np.array([[float(x) for x in ln.split()] for ln in lines[9 : 9 + natoms]])


def test_nve_water_in_lammps(cases, deepmd_kit, tmp_path):
    case = cases["water_se_e2_a"]  # the model of configs/water.yaml, DeePMD-kit's example water
    lmp = venv_tool("lmp")
    shutil.copy(EXAMPLE / "in.water", tmp_path)
    shutil.copy(deepmd_kit.dir("water_se_e2_a") / "model.pb", tmp_path / "model.pb")
    subprocess.run(
        [
            sys.executable,
            str(EXAMPLE / "make_data.py"),
            str(require("water") / "data_3"),
            "0",
            "-o",
            str(tmp_path / "water.data"),
        ],
        check=True,
        capture_output=True,
    )
    run = subprocess.run(
        [str(lmp), "-in", "in.water", "-var", "steps", str(STEPS)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=deepmd_kit_env(),
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    thermo = _thermo((tmp_path / "log.lammps").read_text())
    assert thermo[:, 0].tolist() == list(range(STEPS + 1))
    atoms = _dump_step0((tmp_path / "forces.dump").read_text())
    natoms = len(atoms)
    assert atoms[:, 0].tolist() == list(range(1, natoms + 1))

    # our prediction for the positions LAMMPS read (its types 1, 2 are the model's O, H)
    data = (tmp_path / "water.data").read_text().splitlines()
    box = np.diag([float(ln.split()[1]) for ln in data if ln.endswith(("xlo xhi", "ylo yhi", "zlo zhi"))])
    first = data.index("Atoms # atomic") + 2
    rows = np.array([[float(x) for x in ln.split()] for ln in data[first : first + natoms]])
    ours = Model(case.hyper, case.params, case.stats).predict(rows[:, 2:5], box, rows[:, 1].astype(int) - 1)

    e_err = abs(thermo[0, 1] - float(ours.energy)) / abs(float(ours.energy))
    f_err = max_rel(atoms[:, 5:8], ours.force)
    drift = np.max(np.abs(thermo[:, 3] - thermo[0, 3])) / natoms
    print(
        f"LAMMPS step 0: energy max rel {e_err:.2e}, forces max rel {f_err:.2e}; "
        f"total-energy drift over {STEPS} steps {drift:.2e} eV/atom"
    )
    assert e_err <= 1e-8
    assert f_err <= 1e-8
    assert drift < 1e-4
