"""Start-up and step time against the number of atom types, ours and (``--deepmd``) DeePMD-kit TF side by side.

    .venv/bin/python bench/ntypes_scaling.py [--ntypes 1 2 3 4 5 6] [--type-one-side false true] [--steps 200]
        [--five-types] [--deepmd] [--compile] [--repeats 1] [--variant NAME:MODULE.ATTR=EXPR ...] [--out DIR]

The inputs are relabelled Al-Cu-Mg data (no new DFT; ``tests/many_types_data.py``): its 16-atom systems with
virials and more than one element, each cell tripled along its shortest vector (48 atoms a frame), the atoms
split into ntypes types by index (atom i gets type i mod ntypes, whatever its element: an input for timing, not
for accuracy), sel ⌈100 / ntypes⌉ per type (the same slots per atom for every ntypes), rcut 5.5 Å, embedding
[16, 32, 64], fitting [64, 64, 64], virials in the loss, float64. ``--five-types`` adds a five-type
input like a perovskite's: atom i of a cell gets type [0, 0, 0, 0, 1, 2, 3, 4, 4, 4, 4, 4, 4, 4, 4, 4][i mod 16],
sel [20, 8, 8, 8, 48] (its atoms have at most [17, 6, 6, 6, 34] neighbours of each type within rcut), ``type_one_side:
false``. The inputs and runs are written under ``--out`` (default a new temporary directory).

Each run is the command-line trainer on a DeePMD-kit input.json, with an empty compilation cache; printed per
run: the first step (its compile included, from the trainer's log), s/step (the log's average past the first
window), the whole run's wall time, and DeePMD-kit TF's first 100-step window, s/step (median of its windows
after the first) and wall time (``../shared/bench/deepmd_kit.sh train tf``). With two ``--steps`` values (e.g.
``--steps 300 1500``) each code runs both, and the per-step time is also taken as the difference of the two
runs' wall times over the difference of their steps (start-up cancels). ``--repeats`` runs everything again,
ours and DeePMD-kit's alternating, and prints each run, so a slow spell of a shared machine shows.
``--variant NAME:MODULE.ATTR=EXPR`` adds a run of ours with a module attribute replaced (as in
``bench/step_time.py``, e.g. ``per_type:jaxmd_dp.model.fast.net_groups.MODE='never'``: the nets one by one).

``--compile`` times the training step's trace and XLA compile alone instead (a fresh process per input and
code, the trainer built, then the step lowered and compiled once), as wall and process CPU time: the CPU time
moves less than the wall time when other programs share the cores.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import checkout

sys.path.insert(0, str(checkout.ROOT / "tests"))
import numpy as np  # noqa: E402
from many_types_data import write_system  # noqa: E402
from train.tiny import LOSS_EFV  # noqa: E402

SHARED = checkout.ROOT.parent / "shared"
FIVE_PATTERN = [0, 0, 0, 0, 1, 2, 3] + [4] * 9
FIVE_SEL = [20, 8, 8, 8, 48]


def source_systems() -> list[Path]:
    """Al-Cu-Mg's 16-atom systems with virials and more than one element."""
    out = []
    for d in sorted(glob.glob(str(SHARED / "data" / "almgcu_jiang2021_subset" / "init.*"))):
        t = np.loadtxt(Path(d) / "type.raw", dtype=int, ndmin=1)
        if t.size == 16 and (Path(d) / "set.000" / "virial.npy").exists() and len(set(t.tolist())) > 1:
            out.append(Path(d))
    return out


def write_input(out: Path, name: str, pattern: list[int], sel: list[int], type_one_side: bool) -> Path:
    """The relabelled systems (by-index types ``pattern``) and a DeePMD-kit input.json for them."""
    ntypes = max(pattern) + 1
    type_map = [f"T{t}" for t in range(ntypes)]
    systems = []
    for src in source_systems():
        box = np.load(src / "set.000" / "box.npy").reshape(-1, 3, 3)[0]
        cells = [1, 1, 1]
        cells[int(np.argmin(np.linalg.norm(box, axis=1)))] = 3
        dst = out / "data" / name / src.name
        if not dst.exists():
            write_system(src, dst, [[0], [0], [0]], type_map, tuple(cells), by_index=pattern)
        systems.append(str(dst))
    inp = {
        "model": {
            "type_map": type_map,
            "descriptor": {
                "type": "se_e2_a",
                "sel": sel,
                "rcut": 5.5,
                "rcut_smth": 0.5,
                "neuron": [16, 32, 64],
                "axis_neuron": 16,
                "type_one_side": type_one_side,
                "resnet_dt": False,
                "precision": "float64",
                "seed": 1,
            },
            "fitting_net": {"neuron": [64, 64, 64], "resnet_dt": True, "precision": "float64", "seed": 1},
        },
        "learning_rate": {"type": "exp", "decay_steps": 5000, "start_lr": 1e-3, "stop_lr": 3.51e-8},
        "loss": {"type": "ener", **LOSS_EFV},
        "training": {
            "training_data": {"systems": systems, "batch_size": "auto"},
            "numb_steps": 1500,
            "seed": 10,
            "disp_file": "lcurve.out",
            "disp_freq": 100,
            "save_freq": 100000,
        },
    }
    path = out / f"{name}.json"
    path.write_text(json.dumps(inp, indent=1))
    return path


def run_ours(inp: Path, steps: int, run_dir: Path, variant: list[tuple[str, str, str]]) -> dict:
    """Our trainer on ``inp`` (a fresh process, compilation cache off): first step, s/step, wall time."""
    args = [
        str(inp),
        f"training.numb_steps={steps}",
        f"training.save_freq={steps}",
        "-o",
        str(run_dir),
        "--compile-cache",
        "off",
    ]
    patch = "".join(
        f"import importlib; m = importlib.import_module({mod!r}); setattr(m, {attr!r}, eval({expr!r}, vars(m)));"
        for mod, attr, expr in variant
    )
    code = f"import sys; sys.path.insert(0, {str(checkout.ROOT)!r}); {patch}from jaxmd_dp.cli.train import main; "
    code += f"sys.exit(main({args!r}))"
    env = {**os.environ, "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=checkout.ROOT)
    wall = time.perf_counter() - t
    log = proc.stdout + proc.stderr
    if proc.returncode:
        raise SystemExit(f"our run failed ({inp}):\n{log[-3000:]}")
    first = re.search(r"first training step \(including compilation\): ([\d.]+) s", log)
    per = re.search(r"average training time: ([\d.]+) s/batch", log)
    return {
        "first": float(first[1]) if first else float("nan"),
        "step": float(per[1]) if per else float("nan"),
        "wall": wall,
    }


COMPILE_ONLY = """
import sys, tempfile, time
sys.path.insert(0, {root!r})
{patch}
from jaxmd_dp.config import load_config
from jaxmd_dp.train.loop import Trainer
trainer = Trainer(load_config({inp!r}, ["training.numb_steps=1"]), tempfile.mkdtemp(), log=lambda *a, **k: None)
arrays, layout = trainer.prepare(trainer.batches.next())
c0, t0 = time.process_time(), time.perf_counter()
lowered = trainer.train_step.trace(trainer.state, trainer.stats, arrays, layout).lower()
c1, t1 = time.process_time(), time.perf_counter()
lowered.compile()
c2, t2 = time.process_time(), time.perf_counter()
print("TIMES", t1 - t0, c1 - c0, t2 - t1, c2 - c1)
"""


def run_compile(inp: Path, variant: list[tuple[str, str, str]]) -> dict:
    """The training step's trace and compile alone (wall and CPU seconds), in a fresh process."""
    patch = "".join(
        f"import importlib; m = importlib.import_module({mod!r}); setattr(m, {attr!r}, eval({expr!r}, vars(m)))\n"
        for mod, attr, expr in variant
    )
    code = COMPILE_ONLY.format(root=str(checkout.ROOT), patch=patch, inp=str(inp))
    env = {**os.environ, "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=checkout.ROOT)
    m = re.search(r"TIMES (\S+) (\S+) (\S+) (\S+)", proc.stdout)
    if proc.returncode or not m:
        raise SystemExit(f"compile run failed ({inp}):\n{(proc.stdout + proc.stderr)[-3000:]}")
    return dict(zip(("trace", "trace_cpu", "compile", "compile_cpu"), map(float, m.groups())))


def run_deepmd(inp: Path, steps: int, run_dir: Path) -> dict:
    """DeePMD-kit TF on ``inp``: its first window, median s/step of the later windows, wall time."""
    script = SHARED / "bench" / "deepmd_kit.sh"
    t = time.perf_counter()
    proc = subprocess.run(
        ["bash", str(script), "train", "tf", str(inp), str(run_dir), str(steps)], capture_output=True, text=True
    )
    wall = time.perf_counter() - t
    m = re.search(r"s_per_step_median ([\d.]+) first_window_s ([\d.]+) total_s ([\d.]+)", proc.stdout)
    if proc.returncode or not m:
        raise SystemExit(f"DeePMD-kit run failed ({inp}):\n{(proc.stdout + proc.stderr)[-3000:]}")
    return {"first": float(m[2]), "step": float(m[1]), "wall": wall}


def parse_variants(items: list[str]) -> dict[str, list[tuple[str, str, str]]]:
    out: dict[str, list[tuple[str, str, str]]] = {}
    for item in items:
        name, _, rest = item.partition(":")
        target, _, expr = rest.partition("=")
        module, _, attr = target.rpartition(".")
        if not (name and module and attr and expr):
            raise SystemExit(f"error: --variant {item!r}: expected NAME:MODULE.ATTR=EXPR")
        out.setdefault(name, []).append((module, attr, expr))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ntypes", type=int, nargs="*", default=[1, 2, 3, 4, 5, 6])
    p.add_argument("--type-one-side", nargs="+", default=["false", "true"], choices=["false", "true"])
    p.add_argument("--steps", type=int, nargs="+", default=[200], help="one or two run lengths")
    p.add_argument("--five-types", action="store_true", help="also the uneven five-type input")
    p.add_argument("--deepmd", action="store_true", help="DeePMD-kit TF side by side")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--variant", action="append", default=[], metavar="NAME:MODULE.ATTR=EXPR")
    p.add_argument("--out", default=None)
    p.add_argument("--compile", action="store_true", help="time the step's trace and compile alone (ours)")
    args = p.parse_args(argv)
    if len(args.steps) > 2:
        raise SystemExit("error: --steps takes one or two run lengths")
    out = Path(args.out or tempfile.mkdtemp(prefix="ntypes_scaling_"))
    out.mkdir(parents=True, exist_ok=True)
    inputs = []
    for tos in args.type_one_side:
        for n in args.ntypes:
            name = f"ntypes{n}_{'one_side' if tos == 'true' else 'pairs'}"
            inputs.append((name, n, tos, write_input(out, name, list(range(n)), [-(-100 // n)] * n, tos == "true")))
    if args.five_types:
        inputs.append(("five_types", 5, "false", write_input(out, "five_types", FIVE_PATTERN, FIVE_SEL, False)))
    codes = {"ours": []} | parse_variants(args.variant)
    if args.compile:
        print(f"inputs in {out}; the training step's trace and XLA compile, wall s (CPU s)")
        print("input            ntypes one_side code            trace        compile", flush=True)
        for _ in range(args.repeats):
            for name, n, tos, inp in inputs:
                for code, patch in codes.items():
                    r = run_compile(inp, patch)
                    print(
                        f"{name:16s} {n:6d} {tos:8s} {code:11s} {r['trace']:5.2f} ({r['trace_cpu']:5.2f}) "
                        f"{r['compile']:6.2f} ({r['compile_cpu']:6.2f})",
                        flush=True,
                    )
        return 0
    if args.deepmd:
        codes["deepmd_tf"] = None
    print(f"inputs and runs in {out}; 48 atoms a frame, batch 1, float64, virials")
    print("input            ntypes one_side code        steps  first step s  s/step   wall s", flush=True)
    results: dict = {}
    for r in range(args.repeats):
        for name, n, tos, inp in inputs:
            for steps in args.steps:
                for code, patch in codes.items():
                    run_dir = out / "runs" / f"{name}_{code}_{steps}_{r}"
                    res = run_deepmd(inp, steps, run_dir) if patch is None else run_ours(inp, steps, run_dir, patch)
                    results.setdefault((name, code, steps), []).append(res)
                    print(
                        f"{name:16s} {n:6d} {tos:8s} {code:11s} {steps:5d} {res['first']:12.1f} "
                        f"{res['step']:8.4f} {res['wall']:8.1f}",
                        flush=True,
                    )
    if len(args.steps) == 2:
        a, b = sorted(args.steps)
        print(f"per step from the wall times: (wall({b}) - wall({a})) / {b - a}, median over repeats")
        for name, *_ in inputs:
            for code in codes:
                wa = np.median([x["wall"] for x in results[(name, code, a)]])
                wb = np.median([x["wall"] for x in results[(name, code, b)]])
                print(f"{name:16s} {code:11s} {(wb - wa) / (b - a):.4f} s/step; whole {b}-step run {wb:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
