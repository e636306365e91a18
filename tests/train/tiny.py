"""A tiny, fast training set-up on real Cu data (32-atom frames) for process-level tests."""

import json

from shared_paths import require

# DeePMD-kit's energy, force and virial prefactors of the small training tests
LOSS_EFV = {
    "start_pref_e": 0.02,
    "limit_pref_e": 1,
    "start_pref_f": 1000,
    "limit_pref_f": 1,
    "start_pref_v": 0.02,
    "limit_pref_v": 1,
}


def tiny_cu_dict(numb_steps=40, **training):
    """A DeePMD-kit-style input dict: one Cu system, small nets, frequent lcurve lines and checkpoints."""
    cu = require("cu_asc22")
    return {
        "model": {
            "type_map": ["Cu"],
            "descriptor": {
                "type": "se_e2_a",
                "sel": [48],
                "rcut": 4.5,
                "rcut_smth": 2.0,
                "neuron": [4, 8],
                "axis_neuron": 2,
                "type_one_side": True,
                "seed": 1,
            },
            "fitting_net": {"neuron": [8, 8], "resnet_dt": True, "seed": 1},
            "data_stat_nbatch": 2,
        },
        "learning_rate": {"type": "exp", "start_lr": 1e-3, "stop_lr": 1e-4, "decay_steps": 10},
        "loss": dict(LOSS_EFV),
        "training": {
            "training_data": {"systems": [str(cu / "iter.000000/02.fp/data.000")], "batch_size": 1},
            "validation_data": {"systems": [str(cu / "iter.000016/02.fp/data.000")], "batch_size": 1, "numb_btch": 1},
            "numb_steps": numb_steps,
            "seed": 3,
            "disp_freq": 5,
            "save_freq": 10,
            "max_ckpt_keep": 10,
            **training,
        },
    }


def write_config(path, d) -> str:
    path.write_text(json.dumps(d))
    return str(path)


def small_water_model() -> dict:
    """The ``model`` section of the small water model that training and data-parallel tests share
    (DeePMD-kit's water sel and cut-offs, tiny nets)."""
    return {
        "type_map": ["O", "H"],
        "descriptor": {
            "type": "se_e2_a",
            "sel": [46, 92],
            "rcut": 6.0,
            "rcut_smth": 0.5,
            "neuron": [4, 8],
            "axis_neuron": 2,
            "type_one_side": True,
            "seed": 1,
        },
        "fitting_net": {"neuron": [16, 16], "resnet_dt": True, "seed": 1},
        "data_stat_nbatch": 2,
    }
