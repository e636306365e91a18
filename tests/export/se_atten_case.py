"""A tiny se_atten_v2 model trained here for a few steps (Mg/Al/Cu, virials in the loss), shared by the DPA-1
model-file tests and the interface tests, with the frames it is evaluated on and its predictions there.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from shared_paths import require
from train.tiny import LOSS_EFV

ALMGCU = "almgcu_jiang2021_subset"
TRAIN = ("init.1000", "init.700")  # 32 and 16 atoms, every element present, virials labelled
PREDICT = "init.1131"  # 32 atoms: 21 Mg, 3 Al, 8 Cu
NFRAMES = 2
TRAINED_V2 = "trained_v2"  # its name among the DPA-1 model-file cases


@dataclass
class TinyRun:
    out: Path  # the training output directory (checkpoint, out.json, lcurve.out)
    trainer: object
    model: object  # jaxmd_dp.model.trained.Model
    system: Path  # the prediction system (DeePMD-kit npy), its first NFRAMES frames evaluated
    coord: np.ndarray  # (NFRAMES, 32, 3) Å
    box: np.ndarray  # (NFRAMES, 3, 3) Å
    atype: np.ndarray  # (32,)
    ours: object  # Model.predict on the frames (numpy arrays)


def tiny_config():
    from jaxmd_dp.config import config_from_dict

    data = require(ALMGCU)
    return config_from_dict(
        {
            "model": {
                "type_map": ["Mg", "Al", "Cu"],
                "descriptor": {
                    "type": "se_atten_v2",
                    "sel": 48,
                    "rcut": 5.0,
                    "rcut_smth": 1.0,
                    "neuron": [4, 8],
                    "axis_neuron": 4,
                    "attn": 8,
                    "attn_layer": 2,
                    "tebd_dim": 4,
                    "precision": "float64",
                    "seed": 1,
                },
                "fitting_net": {"neuron": [8, 8], "resnet_dt": True, "precision": "float64", "seed": 1},
                "data_stat_nbatch": 1,
            },
            "learning_rate": {"type": "exp", "start_lr": 1e-3, "stop_lr": 1e-4, "decay_steps": 2},
            "loss": dict(LOSS_EFV),
            "training": {
                "training_data": {"systems": [str(data / s) for s in TRAIN], "batch_size": 1},
                "numb_steps": 4,
                "seed": 7,
                "disp_freq": 2,
                "save_freq": 4,
            },
        }
    )


def train_tiny(out: Path) -> TinyRun:
    from jaxmd_dp.train import Trainer

    trainer = Trainer(tiny_config(), out, log=lambda *a: None)
    trainer.fit()
    system = require(ALMGCU) / PREDICT
    s = system / "set.000"
    coord = np.load(s / "coord.npy")[:NFRAMES].reshape(NFRAMES, -1, 3).astype(np.float64)
    box = np.load(s / "box.npy")[:NFRAMES].reshape(NFRAMES, 3, 3).astype(np.float64)
    atype = np.loadtxt(system / "type.raw", dtype=int)
    model = trainer.model
    pred = model.predict(coord, box, atype)
    ours = type(pred)(*(np.asarray(x) for x in pred))
    return TinyRun(out, trainer, model, system, coord, box, atype, ours)


# DeePMD-kit's DPA-1 models and their frames (tests/data/dpa1_fixtures, see its README)
DPA1_FIXTURES = Path(__file__).resolve().parents[1] / "data" / "dpa1_fixtures"
DPA1_CASES = ("water_v2_attn2", "water_v2_attn0", "water_concat", "water_exclude", "almgcu_v2", "almgcu_concat")


def load_dpa1_fixture(name: str):
    """(hyper, params, stats, coord (nf, natoms, 3) Å, box (nf, 3, 3) Å, atype (natoms,)) of a DPA-1 fixture,
    the model read from DeePMD-kit's own model.dp."""
    from jaxmd_dp.model.deepmd_file import load_deepmd

    hyper, params, stats = load_deepmd(DPA1_FIXTURES / name / "model.dp")
    with np.load(DPA1_FIXTURES / name / "predictions.npz") as p:
        coord, box, atype = p["coord"], p["box"].reshape(-1, 3, 3), p["atype"]
    return hyper, params, stats, coord, box, atype
