"""Training cost per atom versus system size: the water box (192 atoms) and its 2×2×2 replica (1,536 atoms).

    .venv/bin/python bench/size_scaling.py [--steps 30] [--disp 5] [--frames 8] [--precision float64] [KEY=VALUE ...]

Builds DeePMD-format systems from the first ``--frames`` frames of water data_3 (the replica: every atom
copied to the 8 image cells, box doubled, energy × 8, forces copied), trains configs/water.yaml's model on
each for ``--steps`` steps (batch 1, no validation) in a subprocess, and prints s/step (median over lcurve
windows, the first excluded), s/step per atom, their ratio to the smallest system, first-step (compile)
time and peak RSS. The neighbour list is the cell list (O(N)) at both sizes.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from train_speed import windows  # bench/: the lcurve-window parser shared by the benchmarks

ROOT = Path(__file__).resolve().parent.parent
WATER = ROOT.parent / "shared" / "data" / "water" / "data_3"


def write_system(path: Path, coord, box, atype, energy, force, type_map=("O", "H")) -> None:
    """A DeePMD-kit npy system: coord (nf, n, 3) Å, box (nf, 3, 3) Å, energy (nf,) eV, force (nf, n, 3)."""
    (path / "set.000").mkdir(parents=True, exist_ok=True)
    np.savetxt(path / "type.raw", atype, fmt="%d")
    (path / "type_map.raw").write_text("\n".join(type_map) + "\n")
    nf = coord.shape[0]
    for name, arr in (("coord", coord), ("box", box), ("energy", energy), ("force", force)):
        np.save(path / "set.000" / f"{name}.npy", arr.reshape(nf, -1))


def replicate(coord, box, atype, energy, force, n: int):
    """The n×n×n supercell of every frame."""
    shifts = np.array(list(itertools.product(range(n), repeat=3)), float)  # (n³, 3)
    img = np.einsum("sk,fkj->fsj", shifts, box)  # (nf, n³, 3)
    c = (coord[:, None, :, :] + img[:, :, None, :]).reshape(coord.shape[0], -1, 3)
    return c, box * n, np.tile(atype, n**3), energy * n**3, np.tile(force, (1, n**3, 1))


def run(system: Path, steps: int, disp: int, precision: str, out: Path, overrides=()) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "jaxmd_dp.train",
        str(ROOT / "configs" / "water.yaml"),
        "-o",
        str(out),
        "--force",
        f"training.numb_steps={steps}",
        f"training.disp_freq={disp}",
        f"training.save_freq={steps}",
        f"training.training_data.systems=[{system}]",
        "training.validation_data=null",
        f"model.descriptor.precision={precision}",
        f"model.fitting_net.precision={precision}",
        "model.data_stat_nbatch=2",
        *overrides,
    ]
    log = out.with_suffix(".log")
    with open(log, "w") as f:
        p = subprocess.Popen(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(p.pid, 0)
    text = log.read_text()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"training failed, see {log}:\n" + "\n".join(text.splitlines()[-5:]))
    per = windows(text)
    first = re.search(r"first training step \(including compilation\): ([\d.]+) s", text)
    return {
        "s_step": statistics.median(per),
        "first_step_s": float(first.group(1)) if first else None,
        "rss_gb": usage.ru_maxrss / 1e6,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--disp", type=int, default=5)
    p.add_argument("--frames", type=int, default=8)
    p.add_argument("--precision", default="float64", choices=["float64", "float32"])
    p.add_argument("--sizes", type=int, nargs="+", default=[1, 2], help="replicas per box vector")
    p.add_argument("overrides", nargs="*", help="config overrides for every run, e.g. training.embedding_table=64")
    args = p.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from jaxmd_dp.data.system import load_system

    s = load_system(str(WATER), ["O", "H"])
    k = min(args.frames, s.nframes)
    base = (s.coord[:k], s.box[:k], np.asarray(s.atype), s.energy[:k], s.force[:k])
    tmp = Path(tempfile.mkdtemp(prefix="size_scaling_"))
    rows = []
    for n in args.sizes:
        c, b, t, e, f = replicate(*base, n) if n > 1 else base
        path = tmp / f"water_{n}x{n}x{n}"
        write_system(path, c, b, t, e, f)
        r = run(path, args.steps, args.disp, args.precision, tmp / f"run_{n}", args.overrides)
        r.update(natoms=int(c.shape[1]), s_step_atom=r["s_step"] / c.shape[1])
        rows.append(r)
        print(json.dumps({k: round(v, 6) if isinstance(v, float) else v for k, v in r.items()}), flush=True)
    print(f"\n| atoms | s/step | µs/step/atom | per-atom cost vs {rows[0]['natoms']} | first step s | peak RSS GB |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['natoms']} | {r['s_step']:.3f} | {1e6 * r['s_step_atom']:.0f} | "
            f"{r['s_step_atom'] / rows[0]['s_step_atom']:.2f}x | {r['first_step_s']} | {r['rss_gb']:.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
