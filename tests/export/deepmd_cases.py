"""The DeePMD-kit model-file tests' cases and helpers (their fixtures are in conftest.py).

Cases: the four DeePMD-kit fixtures (their weights, their frames) and two small water models trained here
for a few steps (one net per type pair in float64, one net per neighbour type in float32; resnet_dt on
in both), each with our predictions on its frames.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from fixture_models import FIXTURES
from shared_paths import require

HERE = Path(__file__).parent
TRAINED = {"trained_pairs_f64": (False, "float64"), "trained_one_side_f32": (True, "float32")}
CASES = FIXTURES + tuple(TRAINED)
YAML_CASE = "trained_one_side_f32"  # also written as .yaml and read by DeePMD-kit
BACK_CASE = "trained_pairs_f64"  # its .pb converted back to .dp by DeePMD-kit


@dataclass
class Case:
    name: str
    hyper: object
    params: object
    stats: object
    coord: np.ndarray  # (nf, natoms, 3) Å
    box: np.ndarray | None  # (nf, 3, 3) Å
    atype: np.ndarray  # (natoms,)
    ours: object  # our Prediction on the frames

    @property
    def tol(self) -> float:
        """DeePMD-kit against us: 1e-10 relative in float64; float32 nets round differently."""
        return 1e-10 if self.hyper.to_dict()["precision"] == "float64" else 1e-5


def train_small(tos: bool, precision: str, out: Path):
    from jaxmd_dp.config import config_from_dict
    from jaxmd_dp.train import Trainer

    water = require("water")
    cfg = config_from_dict(
        {
            "model": {
                "type_map": ["O", "H"],
                "descriptor": {
                    "type": "se_e2_a",
                    "sel": [46, 92],
                    "rcut": 6.0,
                    "rcut_smth": 0.5,
                    "neuron": [4, 8],
                    "axis_neuron": 2,
                    "type_one_side": tos,
                    "resnet_dt": True,
                    "precision": precision,
                    "seed": 1,
                },
                "fitting_net": {"neuron": [8, 8], "resnet_dt": True, "precision": precision, "seed": 1},
                "data_stat_nbatch": 1,
            },
            "learning_rate": {"type": "exp", "start_lr": 1e-3, "stop_lr": 1e-4, "decay_steps": 2},
            "loss": {"start_pref_e": 0.02, "limit_pref_e": 1, "start_pref_f": 1000, "limit_pref_f": 1},
            "training": {
                "training_data": {"systems": [str(water / "data_0")], "batch_size": 1},
                "numb_steps": 4,
                "seed": 7,
                "disp_freq": 4,
                "save_freq": 4,
            },
        }
    )
    trainer = Trainer(cfg, out, log=lambda *a: None)
    trainer.fit()
    model = trainer.model
    s = water / "data_3" / "set.000"
    coord = np.load(s / "coord.npy")[:2].reshape(2, -1, 3).astype(np.float64)
    box = np.load(s / "box.npy")[:2].reshape(2, 3, 3).astype(np.float64)
    atype = np.loadtxt(water / "data_3" / "type.raw", dtype=int)
    return model.hyper, model.params, model.stats, coord, box, atype


def write_system(path: Path, case: Case) -> Path:
    """A DeePMD-kit data system of the case's frames, labelled with our predictions."""
    s = path / "set.000"
    s.mkdir(parents=True)
    nf = len(case.coord)
    np.savetxt(path / "type.raw", case.atype, fmt="%d")
    (path / "type_map.raw").write_text("\n".join(case.hyper.type_map) + "\n")
    np.save(s / "coord.npy", case.coord.reshape(nf, -1))
    if case.box is None:
        (path / "nopbc").write_text("")
    else:
        np.save(s / "box.npy", case.box.reshape(nf, 9))
    np.save(s / "energy.npy", case.ours.energy.reshape(nf))
    np.save(s / "force.npy", case.ours.force.reshape(nf, -1))
    np.save(s / "virial.npy", case.ours.virial.reshape(nf, 9))
    return path


def deepmd_kit_env() -> dict:
    return {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "CUDA_VISIBLE_DEVICES": "",
        "DP_INTRA_OP_PARALLELISM_THREADS": "1",
        "DP_INTER_OP_PARALLELISM_THREADS": "1",
    }


def venv_tool(name: str) -> Path:
    """A program of this Python's environment (DeePMD-kit's ``dp``, LAMMPS's ``lmp``); fails when absent."""
    tool = Path(sys.executable).parent / name
    if not tool.exists():
        pytest.fail(f"{tool} not found: install DeePMD-kit with LAMMPS (pip install -e '.[deepmd]')", pytrace=False)
    return tool


@dataclass
class DeepmdKitRun:
    root: Path

    def dir(self, name: str) -> Path:
        return self.root / name

    def detail(self, name: str, backend: str, kind: str) -> np.ndarray:
        """DeePMD-kit's predictions from ``dp test -d`` (backend "np": model.dp, "tf": model.pb, "yaml"),
        kind "e" (nf,), "f" (nf·natoms, 3) or "v" (nf, 9)."""
        data = np.loadtxt(self.root / name / backend / f"detail.{kind}.out", ndmin=2)
        return data[:, data.shape[1] // 2 :]


def layout(x):
    """The dict with each array replaced by "<dtype shape>"."""
    if isinstance(x, dict):
        return {k: layout(v) for k, v in x.items()}
    if isinstance(x, list):
        return [layout(v) for v in x]
    if isinstance(x, np.ndarray):
        return f"<{x.dtype} {x.shape}>"
    return x


def same_model(a, b) -> None:
    """Equal hyper-parameters, weights bit for bit (dtypes too), statistics bit for bit."""
    import jax

    (ha, pa, sa), (hb, pb, sb) = a, b
    assert ha == hb
    la, lb = jax.tree_util.tree_leaves_with_path(pa), jax.tree_util.tree_leaves_with_path(pb)
    assert [p for p, _ in la] == [p for p, _ in lb]
    for (path, x), (_, y) in zip(la, lb):
        assert np.asarray(x).dtype == np.asarray(y).dtype and np.array_equal(x, y), jax.tree_util.keystr(path)
    for x, y in zip(sa, sb):
        assert np.array_equal(np.asarray(x), np.asarray(y))
