"""DeePMD-kit's side of the model-file tests, in one process (TensorFlow is imported once).

    python deepmd_kit_run.py JOBS.json

JOBS.json: a list of jobs, run in order:
- ``{"dp": [ARGS...]}``: the ``dp`` command with these arguments (``deepmd.main.main``, what ``dp`` runs);
- ``{"eval": MODEL, "system": DIR, "out": NPZ}``: ``deepmd.infer.DeepPot(MODEL).eval(..., atomic=True)`` on
  every frame of the DeePMD-kit system DIR: energy, force, virial, atom_energy into NPZ;
- ``{"dpmodel": MODEL, "system": DIR, "out": NPZ}``: the model file read by ``deepmd.dpmodel``'s own loader
  (``load_dp_model``), built by its ``BaseModel.deserialize`` and called (DeePMD-kit's NumPy reference code) on
  every frame of DIR: energy, atom_energy (and force, virial where it gives them) into NPZ;
- ``{"layout": INPUT_JSON, "out": JSON}``: the model dict ``deepmd.dpmodel`` serialises for the ``model``
  section of INPUT_JSON (arrays as "<dtype shape>"), written to JSON.
Exits with status 3 when DeePMD-kit is not importable.
"""

import json
import sys
from pathlib import Path

import numpy as np

try:
    import deepmd
    from deepmd.main import main as dp
except ImportError as e:
    print(f"DeePMD-kit is not installed ({e}): pip install -e '.[deepmd]'", file=sys.stderr)
    sys.exit(3)


def layout(x):
    if isinstance(x, dict):
        return {k: layout(v) for k, v in x.items()}
    if isinstance(x, list):
        return [layout(v) for v in x]
    if isinstance(x, np.ndarray):
        return f"<{x.dtype} {x.shape}>"
    return x


def evaluate(model: str, system: str, out: str) -> None:
    from deepmd.infer import DeepPot

    s = Path(system)
    atype = np.loadtxt(s / "type.raw", dtype=int, ndmin=1)
    coord = np.load(s / "set.000" / "coord.npy")
    box = np.load(s / "set.000" / "box.npy") if (s / "set.000" / "box.npy").exists() else None
    e, f, v, ae, _ = DeepPot(model).eval(coord, box, atype, atomic=True)
    np.savez(
        out,
        energy=e.reshape(-1),
        force=f.reshape(len(coord), -1, 3),
        virial=v.reshape(-1, 9),
        atom_energy=ae.reshape(len(coord), -1),
    )


def dpmodel_eval(model: str, system: str, out: str) -> None:
    from deepmd.dpmodel.model.base_model import BaseModel
    from deepmd.dpmodel.utils.serialization import load_dp_model

    s = Path(system)
    atype = np.loadtxt(s / "type.raw", dtype=int, ndmin=1)
    coord = np.load(s / "set.000" / "coord.npy")
    box = np.load(s / "set.000" / "box.npy") if (s / "set.000" / "box.npy").exists() else None
    nf = len(coord)
    ret = BaseModel.deserialize(load_dp_model(model)["model"])(coord, np.tile(atype, (nf, 1)), box)
    got = {"energy": ret["energy"].reshape(nf), "atom_energy": ret["atom_energy"].reshape(nf, -1)}
    if "force" in ret:
        got["force"] = ret["force"].reshape(nf, -1, 3)
    if "virial" in ret:
        got["virial"] = ret["virial"].reshape(nf, 9)
    np.savez(out, **got)


def main() -> None:
    print("deepmd-kit", deepmd.__version__, flush=True)
    for job in json.loads(Path(sys.argv[1]).read_text()):
        if "dp" in job:
            print("dp", " ".join(job["dp"]), flush=True)
            dp(job["dp"])
        elif "eval" in job:
            evaluate(job["eval"], job["system"], job["out"])
        elif "dpmodel" in job:
            dpmodel_eval(job["dpmodel"], job["system"], job["out"])
        elif "layout" in job:
            from deepmd.dpmodel.model.model import get_model

            section = json.loads(Path(job["layout"]).read_text())["model"]
            Path(job["out"]).write_text(json.dumps(layout(get_model(section).serialize())))
        else:
            raise ValueError(f"unknown job {job}")


if __name__ == "__main__":
    main()
