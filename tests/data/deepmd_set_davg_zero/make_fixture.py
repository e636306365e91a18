"""Make the set_davg_zero fixture with DeePMD-kit 3.2.0 (PyTorch backend).

Run with the Python of DeePMD-kit's environment (bash ../shared/bench/deepmd_kit.sh install pt):

    ~/.cache/jaxmd_dp_bench/pt/bin/python tests/data/deepmd_set_davg_zero/make_fixture.py SHARED_DATA OUT_DIR

SHARED_DATA: the shared data folder (holds water/). Trains on the first 8 frames of water/data_0, predicts
water/data_3 frames 0-1, and writes input.json, out.json, lcurve.out, params.npz and predictions.npz to OUT_DIR.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

NFRAMES, PREDICT = 8, [0, 1]

INPUT = {
    "model": {
        "type_map": ["O", "H"],
        "descriptor": {
            "type": "se_e2_a",
            "sel": [46, 92],
            "rcut_smth": 0.5,
            "rcut": 6.0,
            "neuron": [4, 8, 16],
            "resnet_dt": False,
            "axis_neuron": 4,
            "type_one_side": True,
            "activation_function": "tanh",
            "precision": "float64",
            "seed": 1,
            "set_davg_zero": True,
        },
        "fitting_net": {
            "neuron": [16, 16],
            "resnet_dt": True,
            "activation_function": "tanh",
            "precision": "float64",
            "seed": 1,
        },
        "data_stat_nbatch": 10,
    },
    "learning_rate": {"type": "exp", "start_lr": 0.001, "stop_lr": 0.0001, "decay_steps": 5},
    "loss": {"type": "ener", "start_pref_e": 0.02, "limit_pref_e": 1, "start_pref_f": 1000, "limit_pref_f": 1},
    "training": {
        "training_data": {"systems": ["train_system"], "batch_size": 1},
        "numb_steps": 10,
        "seed": 10,
        "disp_file": "lcurve.out",
        "disp_freq": 5,
        "save_freq": 10,
    },
}


def main(shared_data: str, out_dir: str) -> None:
    water = Path(shared_data) / "water"
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp())
    system = work / "train_system"
    (system / "set.000").mkdir(parents=True)
    for f in ("type.raw", "type_map.raw"):
        shutil.copy(water / "data_0" / f, system / f)
    for f in ("box", "coord", "energy", "force"):
        np.save(system / "set.000" / f"{f}.npy", np.load(water / "data_0" / "set.000" / f"{f}.npy")[:NFRAMES])
    (work / "input.json").write_text(json.dumps(INPUT, indent=2))
    dp = str(Path(sys.executable).parent / "dp")
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "DP_INTRA_OP_PARALLELISM_THREADS": "1",
        "DP_INTER_OP_PARALLELISM_THREADS": "1",
    }
    subprocess.run([dp, "--pt", "train", "input.json"], cwd=work, env=env, check=True)
    subprocess.run([dp, "--pt", "freeze", "-o", "frozen.pth"], cwd=work, env=env, check=True)

    import torch
    from deepmd.infer import DeepPot

    ckpt = torch.load(work / "model.ckpt.pt", map_location="cpu", weights_only=False)["model"]
    sd = {
        k: v.detach().cpu().numpy().astype(np.float64)
        for k, v in ckpt.items()
        if hasattr(v, "detach") and "compress_" not in k and "_networks." not in k
    }
    np.savez_compressed(out / "params.npz", **sd)

    coord = np.load(water / "data_3" / "set.000" / "coord.npy")[PREDICT].reshape(len(PREDICT), -1, 3)
    box = np.load(water / "data_3" / "set.000" / "box.npy")[PREDICT].reshape(len(PREDICT), 3, 3)
    atype = np.loadtxt(water / "data_3" / "type.raw", dtype=np.int64)
    e, f, v, ae, _ = DeepPot(str(work / "frozen.pth")).eval(
        coord.reshape(len(PREDICT), -1), box.reshape(len(PREDICT), 9), atype, atomic=True
    )
    np.savez_compressed(
        out / "predictions.npz",
        coord=coord,
        box=box,
        atype=atype,
        type_map=np.array(["O", "H"]),
        energy=e.reshape(-1),
        force=f.reshape(len(PREDICT), -1, 3),
        virial=v.reshape(-1, 9),
        atom_energy=ae.reshape(len(PREDICT), -1),
        frames=np.array(PREDICT),
        system="water/data_3",
        train_frames=np.arange(NFRAMES),
        train_system="water/data_0",
    )
    for f in ("input.json", "out.json", "lcurve.out"):
        shutil.copy(work / f, out / f)
    shutil.rmtree(work)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
