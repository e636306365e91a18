"""Ours and DeePMD-kit 3.2.0 (its PyTorch and JAX backends) trained on the same GPU, on the same inputs,
in one run: ms per step, first step, last learning-curve row, as one table.

    python bench/gpu_side_by_side.py OUTDIR [--inputs water copper almgcu] [--steps 300] [--disp 50]
        [--codes ours-float64 ours-float32 dp-pt dp-jax] [--limit 150]

More codes of ours, float64 with one setting changed (``bench/gpu_loop_options.sh`` runs them):
``ours-float64-k1`` and ``-k50`` (``training.steps_per_dispatch``), and through ``XLA_FLAGS``: ``-cb-off``
(XLA's command buffers, CUDA graphs, off), ``-cb-while`` (extended to while and conditional ops),
``-autotune`` (GEMM autotuning at level 4) and ``-cublas`` (cuBLAS for every matrix product, no Triton GEMM
fusions).

Run by ``bench/gpu_side_by_side.sh`` (which installs DeePMD-kit from wheels on a machine with no package
index). Each input of ../shared/bench (DeePMD-kit's input.json, absolute data paths, numb_steps/disp_freq
set) is trained by each code in turn, each run under ``--limit`` seconds: ours with ``python -m
jaxmd_dp.train`` in float64 and float32 (its defaults: 10 steps per dispatch), DeePMD-kit with ``python -m
deepmd --pt|--jax train --skip-neighbor-stat`` (float64, the input's precision; the inputs give ``sel``, so
the neighbour statistics, over a minute on Cu with the JAX backend, would only check it). ms/step: the median
over the learning-curve windows after the first (DeePMD-kit's "Batch N: total wall time" lines, ours likewise);
first step: ours as logged (compilation included), DeePMD-kit's first window less (disp − 1) median
steps. The run's directories and logs stay under OUTDIR/runs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import checkout  # noqa: F401  (this checkout's jaxmd_dp first on the path)
import train_speed as ts

CB_ALL = "FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,WHILE,CONDITIONAL"
OURS = {  # ours' codes after "ours-<precision>": (config overrides, XLA_FLAGS added)
    "": ((), ""),
    "-k1": (("training.steps_per_dispatch=1",), ""),
    "-k50": (("training.steps_per_dispatch=50",), ""),
    "-cb-off": ((), "--xla_gpu_enable_command_buffer="),
    "-cb-while": ((), f"--xla_gpu_enable_command_buffer={CB_ALL}"),
    "-autotune": ((), "--xla_gpu_autotune_level=4"),
    "-cublas": ((), "--xla_gpu_enable_triton_gemm=false"),
}
DEFAULT_CODES = ("ours-float64", "ours-float32", "dp-pt", "dp-jax")
CODES = DEFAULT_CODES + tuple(f"ours-float64{v}" for v in OURS if v)


def run(cmd: list[str], cwd: Path, log: Path, limit: float, env: dict | None = None) -> tuple[int, float]:
    """(exit status, wall s) of ``cmd`` with its output in ``log``; killed after ``limit`` s (status 124)."""
    t = time.perf_counter()
    with open(log, "w") as f:
        try:
            rc = subprocess.run(cmd, cwd=cwd, stdout=f, stderr=subprocess.STDOUT, env=env, timeout=limit).returncode
        except subprocess.TimeoutExpired:
            rc = 124
    return rc, time.perf_counter() - t


def one(code: str, name: str, steps: int, disp: int, out: Path, limit: float) -> dict:
    prec = "float32" if "float32" in code else "float64"
    inp = ts.write_input(name, steps, disp, prec, out)
    d = out / f"{name}_{code}"
    d.mkdir(parents=True, exist_ok=True)
    log = d / "train.log"
    if code.startswith("ours"):
        overrides, flags = OURS[code.removeprefix(f"ours-{prec}")]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ts.ROOT), os.environ.get("PYTHONPATH")]))}
        xla = " ".join(filter(None, [env.pop("XLA_FLAGS", "").strip(), flags]))
        if xla:  # XLA_FLAGS must not be blank
            env["XLA_FLAGS"] = xla
        cmd = [sys.executable, "-m", "jaxmd_dp.train", str(inp), "-o", str(d), "--force", *overrides]
        rc, wall = run(cmd, ts.ROOT, log, limit, env)
    else:
        rc, wall = run(
            [sys.executable, "-m", "deepmd", f"--{code[3:]}", "train", str(inp), "--skip-neighbor-stat"], d, log, limit
        )
    text = log.read_text()
    if rc != 0:
        tail = text.strip().splitlines()[-1] if text.strip() else ""
        return {"rc": rc, "error": "time limit" if rc == 124 else tail[-120:]}
    w = ts.windows(text)
    med = statistics.median(w)
    if code.startswith("ours"):
        first = float(re.search(r"first training step \(including compilation\): ([\d.]+) s", text).group(1))
    else:
        b = re.search(r"batch\s+(\d+): total wall time = ([\d.]+) s", text, re.I)
        first = float(b.group(2)) - (int(b.group(1)) - 1) * med
    lines = [ln for ln in (d / "lcurve.out").read_text().splitlines() if ln.strip()]
    return {"rc": 0, "ms_step": 1e3 * med, "first_s": first, "wall_s": wall, "last": lines[-1].split()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--inputs", nargs="+", default=["water", "copper", "almgcu"], choices=["water", "copper", "almgcu"])
    p.add_argument("--codes", nargs="+", default=list(DEFAULT_CODES), choices=CODES)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--disp", type=int, default=50)
    p.add_argument("--limit", type=float, default=150.0, help="seconds per run")
    args = p.parse_args(argv)
    out = Path(args.out).resolve() / "runs"
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.inputs:
        for code in args.codes:
            r = one(code, name, args.steps, args.disp, out, args.limit)
            print(f"{name} {code}: {json.dumps(r)}", flush=True)
            rows.append((name, code, r))
    print(f"\n{args.steps} steps, lcurve every {args.disp}; ms/step: median over windows after the first\n")
    print("| input | code | ms/step | ÷ ours float64 | first step s | wall s | last lcurve row |")
    print("|---|---|---|---|---|---|---|")
    for name, code, r in rows:
        if r["rc"]:
            print(f"| {name} | {code} | failed: {r['error']} | | | | |")
            continue
        ref = next((x for n, c, x in rows if n == name and c == "ours-float64" and not x["rc"]), None)
        ratio = f"{r['ms_step'] / ref['ms_step']:.1f}×" if ref else ""
        print(
            f"| {name} | {code} | {r['ms_step']:.2f} | {ratio} | {r['first_s']:.1f} | {r['wall_s']:.0f} "
            f"| {' '.join(r['last'])} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
