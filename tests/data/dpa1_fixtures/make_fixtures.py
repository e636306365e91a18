"""Make the DPA-1 (se_atten, se_atten_v2) fixtures with DeePMD-kit 3.2.0's JAX backend.

Run with the Python of DeePMD-kit's JAX environment (``bash ../shared/bench/deepmd_kit.sh install jax``), from
the repository root:

    ~/.cache/jaxmd_dp_bench/jax/bin/python tests/data/dpa1_fixtures/make_fixtures.py ../shared/data [CASE ...]

For each case (all by default) in a temporary folder: copy the training frames into one system, ``dp --jax train
input.json`` for 10 steps (batch 1, CPU, float64), ``dp --jax freeze -c . -o model.dp`` (writes model.dp.hlo),
``dp convert-backend model.dp.hlo model.dp`` (the weights as DeePMD-kit's HDF5 model file), and
``deepmd.infer.DeepPot("model.dp.hlo").eval(..., atomic=True)`` on the prediction frames. Writes to
``tests/data/dpa1_fixtures/<case>/``: input.json, lcurve.out, model.dp (less the compiled StableHLO programs it
carries from the .hlo) and predictions.npz.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent

WATER = {"train": [("water/data_0", range(8))], "predict": ("water/data_3", [0, 1]), "type_map": ["O", "H"]}
ALMGCU = {
    "train": [("almgcu_jiang2021_subset/init.1000", range(6)), ("almgcu_jiang2021_subset/init.700", range(6))],
    "predict": ("almgcu_jiang2021_subset/init.1131", [0, 1, 2]),
    "type_map": ["Mg", "Al", "Cu"],
}
FITTING = {"neuron": [16, 16], "resnet_dt": True, "precision": "float64", "seed": 1}

CASES = {
    # se_atten_v2 (strip, smooth), two attention layers, davg from the data, a type embedding of 2·ntypes
    # (DeePMD-kit's skip then adds it twice), both type embeddings into the strip net
    "water_v2_attn2": (
        WATER,
        {
            "type": "se_atten_v2",
            "sel": 40,
            "rcut": 4.0,
            "rcut_smth": 0.5,
            "neuron": [4, 8, 16],
            "axis_neuron": 4,
            "tebd_dim": 4,
            "attn": 8,
            "attn_layer": 2,
            "attn_dotr": True,
            "precision": "float64",
            "seed": 1,
        },
    ),
    # no attention layer; one-side type embedding with a bias, no type embedding at the output, resnet_dt
    "water_v2_attn0": (
        WATER,
        {
            "type": "se_atten_v2",
            "sel": 40,
            "rcut": 4.0,
            "rcut_smth": 0.5,
            "neuron": [4, 8],
            "axis_neuron": 2,
            "tebd_dim": 3,
            "attn_layer": 0,
            "type_one_side": True,
            "use_tebd_bias": True,
            "concat_output_tebd": False,
            "resnet_dt": True,
            "precision": "float64",
            "seed": 1,
        },
    ),
    # se_atten with the type embedding concatenated to s; davg from the data (empty slots then feed the
    # embedding net with atom 0's type); no smoothing; sel below the most neighbours (the nearest 24 of any
    # type are kept); one layer, no normalisation, a temperature, no angular gate, fixed layer norms
    "water_concat": (
        WATER,
        {
            "type": "se_atten",
            "sel": 24,
            "rcut": 4.0,
            "rcut_smth": 0.5,
            "neuron": [4, 8],
            "axis_neuron": 4,
            "tebd_dim": 4,
            "tebd_input_mode": "concat",
            "set_davg_zero": False,
            "attn": 6,
            "attn_layer": 1,
            "attn_dotr": False,
            "normalize": False,
            "temperature": 0.5,
            "trainable_ln": False,
            "ln_eps": 1e-3,
            "precision": "float64",
            "seed": 1,
        },
    ),
    # an excluded type pair (O-H neighbours do not see each other): se_atten with concat and davg from the data
    "water_exclude": (
        WATER,
        {
            "type": "se_atten",
            "sel": 40,
            "rcut": 4.0,
            "rcut_smth": 0.5,
            "neuron": [4, 8],
            "axis_neuron": 4,
            "tebd_dim": 4,
            "set_davg_zero": False,
            "attn": 8,
            "attn_layer": 1,
            "exclude_types": [[0, 1]],
            "precision": "float64",
            "seed": 1,
        },
    ),
    # three elements, virials: se_atten_v2 with two layers and a scaling factor
    "almgcu_v2": (
        ALMGCU,
        {
            "type": "se_atten_v2",
            "sel": 100,
            "rcut": 6.0,
            "rcut_smth": 2.0,
            "neuron": [4, 8, 16],
            "axis_neuron": 4,
            "tebd_dim": 5,
            "attn": 8,
            "attn_layer": 2,
            "scaling_factor": 2.0,
            "precision": "float64",
            "seed": 1,
        },
    ),
    # three elements: se_atten (concat, set_davg_zero true by default) with smoothing, one-side embedding
    "almgcu_concat": (
        ALMGCU,
        {
            "type": "se_atten",
            "sel": 100,
            "rcut": 6.0,
            "rcut_smth": 2.0,
            "neuron": [4, 8],
            "axis_neuron": 4,
            "tebd_dim": 6,
            "tebd_input_mode": "concat",
            "smooth_type_embedding": True,
            "type_one_side": True,
            "attn": 8,
            "attn_layer": 2,
            "precision": "float64",
            "seed": 1,
        },
    ),
}


def input_json(data: dict, descriptor: dict) -> dict:
    return {
        "model": {
            "type_map": data["type_map"],
            "descriptor": descriptor,
            "fitting_net": FITTING,
            "data_stat_nbatch": 20,
        },
        "learning_rate": {"type": "exp", "start_lr": 0.001, "stop_lr": 0.0001, "decay_steps": 5},
        "loss": {
            "type": "ener",
            "start_pref_e": 0.02,
            "limit_pref_e": 1,
            "start_pref_f": 1000,
            "limit_pref_f": 1,
            "start_pref_v": 0.02 if data is ALMGCU else 0,
            "limit_pref_v": 1 if data is ALMGCU else 0,
        },
        "training": {
            "training_data": {"systems": [f"train_{k}" for k in range(len(data["train"]))], "batch_size": 1},
            "numb_steps": 10,
            "seed": 10,
            "disp_file": "lcurve.out",
            "disp_freq": 5,
            "save_freq": 10,
        },
    }


def copy_frames(src: Path, frames, dst: Path) -> None:
    (dst / "set.000").mkdir(parents=True)
    for f in ("type.raw", "type_map.raw"):
        shutil.copy(src / f, dst / f)
    for f in ("box", "coord", "energy", "force", "virial"):
        if (src / "set.000" / f"{f}.npy").exists():
            np.save(dst / "set.000" / f"{f}.npy", np.load(src / "set.000" / f"{f}.npy")[list(frames)])


def make(shared: Path, name: str) -> None:
    data, descriptor = CASES[name]
    out = HERE / name
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp())
    for k, (system, frames) in enumerate(data["train"]):
        copy_frames(shared / system, frames, work / f"train_{k}")
    inp = input_json(data, descriptor)
    (work / "input.json").write_text(json.dumps(inp, indent=2))
    dp = str(Path(sys.executable).parent / "dp")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "JAX_PLATFORMS": "cpu", "JAX_ENABLE_X64": "1"}
    for cmd in (
        ["--jax", "train", "input.json"],
        ["--jax", "freeze", "-c", ".", "-o", "model.dp"],
        ["convert-backend", "model.dp.hlo", "model.dp"],
    ):
        subprocess.run([dp, *cmd], cwd=work, env=env, check=True)

    from deepmd.infer import DeepPot

    system, frames = data["predict"]
    src = shared / system
    coord = np.load(src / "set.000" / "coord.npy")[frames].reshape(len(frames), -1, 3).astype(np.float64)
    box = np.load(src / "set.000" / "box.npy")[frames].reshape(len(frames), 3, 3).astype(np.float64)
    atype = np.loadtxt(src / "type.raw", dtype=np.int64).reshape(-1)
    e, f, v, ae, _ = DeepPot(str(work / "model.dp.hlo")).eval(
        coord.reshape(len(frames), -1), box.reshape(len(frames), 9), atype, atomic=True
    )
    np.savez_compressed(
        out / "predictions.npz",
        coord=coord,
        box=box,
        atype=atype,
        type_map=np.array(data["type_map"]),
        energy=np.asarray(e).reshape(-1),
        force=np.asarray(f).reshape(len(frames), -1, 3),
        virial=np.asarray(v).reshape(-1, 9),
        atom_energy=np.asarray(ae).reshape(len(frames), -1),
        frames=np.array(frames),
        system=system,
    )
    # the weights without the compiled programs (StableHLO) that convert-backend carries over from the .hlo
    from deepmd.dpmodel.utils.serialization import load_dp_model, save_dp_model

    model = load_dp_model(str(work / "model.dp"))
    model["@variables"] = {k: v for k, v in model.get("@variables", {}).items() if not k.startswith("stablehlo")}
    save_dp_model(str(out / "model.dp"), model)
    for f in ("input.json", "lcurve.out"):
        shutil.copy(work / f, out / f)
    shutil.rmtree(work)


def main(shared: str, names: list[str]) -> None:
    for name in names or list(CASES):
        make(Path(shared), name)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
