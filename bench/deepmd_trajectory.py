"""Step for step against DeePMD-kit: the same training, from the same weights, on the same batch.

    python bench/deepmd_trajectory.py INPUT.json [--steps 20] [--frames 2] [--adam-form tensorflow] [-o DIR]

INPUT: a DeePMD-kit input (e.g. ../shared/bench/copper_asc22.json). The script
  1. cuts a fixed batch: the first ``--frames`` frames of the input's first training system (every array
     of its first set), and sets batch_size to that many frames, so that every step of either code sees
     the same batch whatever order it draws frames in;
  2. has DeePMD-kit 3.2.0 (TensorFlow backend, via ../shared/bench/deepmd_kit.sh) write its initial
     weights and statistics (a 0-step run), and loads them into a jaxmd_dp model;
  3. trains ``--steps`` steps with each code from those weights: DeePMD-kit with the same seed (so the
     same initial weights), jaxmd_dp with ``--init-model``; the learning rate decays every steps/4 steps,
     so the schedule and the loss prefactors move within the run;
  4. prints the learning curves side by side (DeePMD-kit's line k is after k updates; ours is labelled
     k+1) and, for every weight array, the relative difference ‖W_ours − W_tf‖/‖W_tf‖ after the last
     step beside how far training moved it, ‖W_tf − W_0‖/‖W_0‖.

``--adam-form tensorflow`` (the default here) runs our Adam in TensorFlow's form, as DeePMD-kit's TF backend;
``pytorch`` is our training default (DeePMD-kit's PyTorch backend's form): with it, weights whose gradients
are near Adam's ε take different steps, and the two runs part at the ~1e-3 level from the first step.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import checkout  # noqa: F401  (this checkout's jaxmd_dp)
import numpy as np

DK = Path(__file__).resolve().parents[2] / "shared/bench/deepmd_kit.sh"
DUMP = """import sys, numpy as np, tensorflow as tf
r = tf.train.load_checkpoint(sys.argv[1])
np.savez(sys.argv[2], **{k: r.get_tensor(k) for k in r.get_variable_to_shape_map()})
"""


def fixed_batch_system(system: Path, frames: int, out: Path) -> int:
    """The first ``frames`` frames of ``system``'s first set as a one-set system in ``out``; returns
    how many frames it holds."""
    sets = sorted(system.glob("set.*"))
    if not sets:
        sys.exit(f"{system}: no set.* folder")
    (out / "set.000").mkdir(parents=True, exist_ok=True)
    n = 0
    for f in sorted(sets[0].glob("*.npy")):
        a = np.load(f)[:frames]
        np.save(out / "set.000" / f.name, a)
        n = len(a)
    for f in ("type.raw", "type_map.raw", "nopbc"):
        if (system / f).exists():
            shutil.copy(system / f, out / f)
    return n


def tf_to_ours(tf: dict, hyper):
    """DeePMD-kit TF variables (checkpoint names) → our (params, stats)."""
    import jax

    from jaxmd_dp.model.energy import Stats, param_shapes

    nt = hyper.ntypes

    def tf_name(path) -> str:
        top, net, layer, leaf = (p.key for p in path)
        k, li = int(net.split("_")[1]), int(layer.split("_")[1])
        if top == "descriptor":  # filter_type_{all | centre type}/{leaf}_{layer + 1}_{neighbour type}
            scope, j = ("filter_type_all", k) if hyper.type_one_side else (f"filter_type_{k % nt}", k // nt)
            return f"{scope}/{leaf}_{li + 1}_{j}"
        scope = f"layer_{li}_type_{k}" if li < len(hyper.fitting.neuron) else f"final_layer_type_{k}"
        return f"{scope}/{leaf}"

    params = jax.tree_util.tree_map_with_path(
        lambda path, s: np.asarray(tf[tf_name(path)], s.dtype).reshape(s.shape), param_shapes(hyper)
    )
    shape = (nt, hyper.nnei, 4)
    stats = Stats(
        tf["descrpt_attr/t_avg"].reshape(shape),
        tf["descrpt_attr/t_std"].reshape(shape),
        tf["fitting_attr/t_bias_atom_e"].reshape(nt),
    )
    return params, stats


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("input", type=Path)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--frames", type=int, default=2)
    p.add_argument("--adam-form", default="tensorflow", choices=("tensorflow", "pytorch"))
    p.add_argument("-o", "--out", type=Path, default=None)
    a = p.parse_args()
    import jax

    jax.config.update("jax_enable_x64", True)
    from flax.traverse_util import flatten_dict

    from jaxmd_dp.cli.plot import read_lcurve
    from jaxmd_dp.model.energy import ModelHyper
    from jaxmd_dp.model.io import load_model, save_model

    src = json.loads(a.input.read_text())
    out = (a.out or Path("runs/trajectory") / a.input.stem).resolve()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    systems = src["training"]["training_data"]["systems"]
    first = (a.input.parent / (systems if isinstance(systems, str) else systems[0])).resolve()
    nf = fixed_batch_system(first, a.frames, out / "batch")
    decay = max(1, a.steps // 4)
    training = src["training"]
    training["training_data"] = {"systems": [str(out / "batch")], "batch_size": nf}
    training.pop("validation_data", None)
    training.update(numb_steps=a.steps, disp_freq=1, save_freq=10 * a.steps)
    src["learning_rate"]["decay_steps"] = decay
    (out / "input.json").write_text(json.dumps(src, indent=1))
    (out / "input0.json").write_text(json.dumps({**src, "training": {**training, "numb_steps": 0}}, indent=1))
    print(f"batch: {nf} frames of {first}; {a.steps} steps, decay every {decay}", flush=True)

    tf_py = (
        Path(
            subprocess.run(
                ["bash", str(DK), "install", "tf"], check=True, capture_output=True, text=True
            ).stdout.split()[-1]
        ).parent
        / "python"
    )

    def dp_train(name: str, inp: str) -> dict:
        (out / name).mkdir()
        with open(out / name / "log", "w") as log:
            subprocess.run(
                ["bash", str(DK), "dp", "tf", "train", str(out / inp)],
                cwd=out / name,
                check=True,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        subprocess.run(
            [str(tf_py), "-c", DUMP, str(out / name / "model.ckpt"), str(out / name / "vars.npz")],
            check=True,
            capture_output=True,
        )
        z = np.load(out / name / "vars.npz")
        return {k: z[k] for k in z.files}

    hyper = ModelHyper.from_deepmd(src["model"])
    tf0 = dp_train("tf0", "input0.json")
    params0, stats = tf_to_ours(tf0, hyper)
    save_model(out / "init", hyper, params0, stats)
    tfN = dp_train("tf", "input.json")
    with open(out / "ours.log", "w") as log:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "jaxmd_dp.train",
                str(out / "input.json"),
                "--init-model",
                str(out / "init"),
                "-o",
                str(out / "ours"),
                "--force",
                f"optimizer.adam_form={a.adam_form}",
            ],
            check=True,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(checkout.ROOT)},
        )
    _, paramsN, _ = load_model(out / "ours")

    lt, lo = read_lcurve(out / "tf" / "lcurve.out"), read_lcurve(out / "ours" / "lcurve.out")
    cols = [c for c in lt if c != "step"]
    ours_row = {int(s): i for i, s in enumerate(lo["step"])}
    print(f"{'step':>5} " + " ".join(f"{c + ' tf':>14} {'ours':>9}" for c in cols))
    worst, worst_abs = np.zeros(len(cols)), np.zeros(len(cols))
    for i, k in enumerate(lt["step"].astype(int)):
        if k + 1 not in ours_row:
            continue
        t, o = [lt[c][i] for c in cols], [lo[c][ours_row[k + 1]] for c in cols]
        worst = np.maximum(worst, [abs(x - y) / max(abs(x), 1e-300) for x, y in zip(t, o)])
        worst_abs = np.maximum(worst_abs, [abs(x - y) for x, y in zip(t, o)])
        print(f"{k:5d} " + " ".join(f"{x:14.3e} {y:9.3e}" for x, y in zip(t, o)))
    print(
        "largest difference per column (of 3 printed digits), relative / absolute: "
        + ", ".join(f"{c} {w:.1e} / {v:.1e}" for c, w, v in zip(cols, worst, worst_abs))
    )

    oursN, start, tfN_ours = (
        {k: np.asarray(v, np.float64) for k, v in flatten_dict(tree, sep="/").items()}
        for tree in (paramsN, params0, tf_to_ours(tfN, hyper)[0])
    )
    print(f"\nweights after {a.steps} steps (adam_form={a.adam_form}):")
    print(f"{'array':38s} {'|ours-tf|/|tf|':>15} {'|tf-W0|/|W0|':>13}")
    worst = 0.0
    for k in sorted(tfN_ours):
        diff = np.linalg.norm(oursN[k] - tfN_ours[k]) / np.linalg.norm(tfN_ours[k])
        moved = np.linalg.norm(tfN_ours[k] - start[k]) / np.linalg.norm(start[k])
        worst = max(worst, diff)
        print(f"{k:38s} {diff:15.2e} {moved:13.2e}")
    print(f"largest weight difference: {worst:.2e}")


if __name__ == "__main__":
    main()
