"""Training speed, side by side with DeePMD-kit, on the same DeePMD-kit input in the same run.

    .venv/bin/python bench/train_speed.py [--inputs water copper almgcu] [--steps 200] [--repeats 2]
                                         [--precision float64 float32] [--backends tf pt] [--ours-only]
                                         [--table 64] [--checkout NAME=DIR ...]
                                         [--ours-override NAME:KEY=VALUE ...]

For each input of ../shared/bench (water_se_e2_a.json, copper_asc22.json, almgcu.json, and DeePMD-kit's
DPA-1 example water_se_atten_v2.json as ``--inputs water_se_atten_v2``, not run by default: DeePMD-kit takes
seconds per step on it, so give it few ``--steps``) and precision, it
writes one input file (absolute data paths, numb_steps/disp_freq set, descriptor and fitting precision),
then alternates runs of jaxmd_dp (``python -m jaxmd_dp.train``) and DeePMD-kit (``deepmd_kit.sh train
<backend>``) on it, ``--repeats`` times. Printed per run and summarised per (input, precision):
s/step median over lcurve windows (the first window, with compilation, excluded), its ratio to ours,
start-up: the overhead (whole-run wall time minus steps × s/step: imports, statistics, compiles,
validation, checkpoints) and ours in parts (neighbour scan, data statistics, first step with compilation);
our first ``--cold`` runs (default 1) start with an empty compilation cache (cold), later repeats load from it
(warm). Also peak
RSS, rmse_e/rmse_f of the last lcurve line, and for ours FLOPs per step (XLA cost analysis, from the model summary)
and the
achieved GFLOP/s against a 2048² matmul measured in this run. ``--table N`` adds runs of ours with
``training.embedding_table=N`` (code ``jaxmd_dp-table``), and a column of each s/step ÷ that one's. Before
the table: per input and precision the fastest DeePMD-kit backend and how many times faster each of ours is,
and our float32 ÷ float64. ``--checkout old=/tmp/old`` adds runs of another checkout's jaxmd_dp (code
``jaxmd_dp-old``, run from that directory), in turn with this one's: old against new in one run.
``--ours-override k10:training.steps_per_dispatch=10`` adds runs of ours with that config key set (code
``jaxmd_dp-k10``), in turn with the others.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "bench"
INPUTS = {
    "water": "water_se_e2_a.json",
    "copper": "copper_asc22.json",
    "almgcu": "almgcu.json",
    "water_se_atten_v2": "water_se_atten_v2.json",
}


def matmul_gflops(dtype: str, n: int = 2048, reps: int = 5) -> float:
    """Rate of an n×n matmul through XLA in this process (GFLOP/s)."""
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    a = jnp.ones((n, n), dtype)
    f = jax.jit(lambda x: x @ x)
    f(a).block_until_ready()
    t = time.perf_counter()
    for _ in range(reps):
        f(a).block_until_ready()
    return 2 * n**3 * reps / (time.perf_counter() - t) / 1e9


def write_input(name: str, steps: int, disp: int, precision: str, out: Path) -> Path:
    src = SHARED / INPUTS[name]
    d = json.loads(src.read_text())
    fix = lambda s: s if os.path.isabs(s) else os.path.normpath(os.path.join(src.parent, s))  # noqa: E731
    for key in ("training_data", "validation_data"):
        sec = d["training"].get(key)
        if sec:
            s = sec["systems"]
            sec["systems"] = fix(s) if isinstance(s, str) else [fix(x) for x in s]
    d["training"].update(numb_steps=steps, disp_freq=disp, save_freq=steps)
    d["training"].pop("tensorboard", None)
    for sec in ("descriptor", "fitting_net"):
        d["model"][sec]["precision"] = precision
    path = out / f"{name}_{precision}.json"
    path.write_text(json.dumps(d, indent=2))
    return path


def run(cmd: list[str], cwd: Path, log: Path, env: dict | None = None) -> tuple[int, float, float]:
    """Run ``cmd``; returns (exit status, wall s, peak RSS GB of it and its children)."""
    t = time.perf_counter()
    with open(log, "w") as f:
        p = subprocess.Popen(cmd, cwd=cwd, stdout=f, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(p.pid, 0)
    return os.waitstatus_to_exitcode(status), time.perf_counter() - t, usage.ru_maxrss / 1e6


def windows(text: str) -> list[float]:
    """s/step of each lcurve window from the 'batch N: total wall time = X s' lines (first excluded)."""
    w = [(int(b), float(s)) for b, s in re.findall(r"batch\s+(\d+): total wall time = ([\d.]+) s", text, re.I)]
    seq = ([(0, 0.0)] if w and w[0][0] != 1 else []) + w
    per = [s / (b - pb) for (pb, _), (b, s) in zip(seq, seq[1:])]
    return per[1:] or per


def last_rmse(lcurve: Path) -> dict:
    lines = lcurve.read_text().splitlines()
    head = lines[0].lstrip("#").split()
    row = [ln for ln in lines if not ln.startswith("#")][-1].split()
    return {k: float(v) for k, v in zip(head, row) if k in ("rmse_e_trn", "rmse_f_trn", "rmse_e_val", "rmse_f_val")}


def ours(inp: Path, run_dir: Path, cache: Path, overrides: list[str] = (), root: Path = ROOT) -> dict:
    """A run of ``python -m jaxmd_dp.train`` with the jaxmd_dp of the checkout ``root``."""
    log = run_dir.with_suffix(".log")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), *filter(None, [os.environ.get("PYTHONPATH")])])}
    rc, wall, rss = run(
        [
            sys.executable,
            "-m",
            "jaxmd_dp.train",
            str(inp),
            "-o",
            str(run_dir),
            "--force",
            "--compile-cache",
            str(cache),
            *overrides,
        ],
        root,
        log,
        env,
    )
    text = log.read_text()
    if rc != 0:
        return {"rc": rc, "error": text.strip().splitlines()[-1] if text.strip() else ""}
    num = lambda pat: float(m.group(1)) if (m := re.search(pat, text)) else None  # noqa: E731
    w = windows(text)
    return {
        "rc": 0,
        "s_step": statistics.median(w),
        "wall": wall,
        "rss_gb": rss,
        "scan_s": num(r"neighbour scan of \d+ frames in ([\d.]+) s"),
        "stats_s": num(r"data statistics in ([\d.]+) s"),
        "first_step_s": num(r"first training step \(including compilation\): ([\d.]+) s"),
        "gflop": num(r"training step \(.*?\): ([\d.e+-]+) GFLOP"),
        **last_rmse(run_dir / "lcurve.out"),
    }


def deepmd(backend: str, inp: Path, run_dir: Path) -> dict:
    log = run_dir.with_suffix(".log")
    rc, wall, rss = run(["bash", str(SHARED / "deepmd_kit.sh"), "train", backend, str(inp), str(run_dir)], ROOT, log)
    text = log.read_text()
    if rc != 0:
        return {"rc": rc, "error": text.strip().splitlines()[-1] if text.strip() else ""}
    w = windows((run_dir / "train.log").read_text())
    return {
        "rc": 0,
        "s_step": statistics.median(w),
        "wall": wall,
        "rss_gb": rss,
        "first_window_s": float(re.search(r"first_window_s ([\d.]+)", text).group(1)),
        **last_rmse(run_dir / "lcurve.out"),
    }


def print_headline(table) -> None:
    """The comparisons from the summary rows: per (input, precision) the fastest DeePMD-kit backend and
    how many times faster each of our codes is; per input and code our float32 ÷ float64 s/step."""
    med = {(name, prec, code): s for name, prec, code, s, *_ in table if s is not None}
    print()
    for name, prec in dict.fromkeys((n, p) for n, p, _ in med):
        dk = {c: s for (n, p, c), s in med.items() if (n, p) == (name, prec) and c.startswith("deepmd-")}
        if not dk:
            continue
        fastest = min(dk, key=dk.get)
        ours = ", ".join(
            f"{c} {dk[fastest] / s:.2f}x faster"
            for (n, p, c), s in med.items()
            if (n, p) == (name, prec) and c.startswith("jaxmd_dp")
        )
        print(
            f"{name} {prec}: fastest DeePMD-kit backend {fastest.removeprefix('deepmd-')} "
            f"({dk[fastest]:.4f} s/step); {ours}"
        )
    for (name, prec, code), s in med.items():
        if prec == "float32" and code.startswith("jaxmd_dp") and (name, "float64", code) in med:
            print(f"{name} {code}: float32 is {med[(name, 'float64', code)] / s:.2f}x float64")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--inputs", nargs="+", default=["water", "copper", "almgcu"], choices=list(INPUTS))
    p.add_argument("--steps", type=int, default=200, help="training steps per run")
    p.add_argument("--disp", type=int, default=20, help="steps per lcurve window")
    p.add_argument("--repeats", type=int, default=2, help="alternating runs of each code")
    p.add_argument("--precision", nargs="+", default=["float64", "float32"], choices=["float64", "float32"])
    p.add_argument("--backends", nargs="+", default=["tf"], choices=["tf", "pt", "jax"])
    p.add_argument("--ours-only", action="store_true", help="skip DeePMD-kit")
    p.add_argument("--out", default=None, help="keep runs here (default: a temp dir)")
    p.add_argument("--table", type=int, default=0, help="also run ours with training.embedding_table=N")
    p.add_argument(
        "--cold",
        type=int,
        default=1,
        help="our first N runs of each code start with an empty compilation cache; later ones load from it",
    )
    p.add_argument(
        "--checkout",
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="also run the jaxmd_dp of another checkout DIR, as code jaxmd_dp-NAME",
    )
    p.add_argument(
        "--ours-override",
        action="append",
        default=[],
        metavar="NAME:KEY=VALUE",
        help="also run ours with config key KEY set to VALUE, as code jaxmd_dp-NAME",
    )
    args = p.parse_args(argv)
    overrides = {}
    for item in args.ours_override:
        name, _, kv = item.partition(":")
        overrides[f"jaxmd_dp-{name}"] = [kv]
    others = {}
    for item in args.checkout:
        name, _, path = item.partition("=")
        if not (name and path and (Path(path) / "jaxmd_dp" / "__init__.py").is_file()):
            raise SystemExit(f"error: --checkout {item!r}: expected NAME=DIR, DIR holding jaxmd_dp/")
        others[f"jaxmd_dp-{name}"] = Path(path).resolve()
    out = Path(args.out or tempfile.mkdtemp(prefix="train_speed_"))
    out.mkdir(parents=True, exist_ok=True)
    mm = {dt: matmul_gflops(dt) for dt in args.precision}
    print(f"runs in {out}; 2048^2 matmul: " + ", ".join(f"{k} {v:.1f} GFLOP/s" for k, v in mm.items()), flush=True)
    table = []
    for name in args.inputs:
        for prec in args.precision:
            inp = write_input(name, args.steps, args.disp, prec, out)
            codes = [("jaxmd_dp", None)] + [(c, "checkout") for c in others]
            codes += [("jaxmd_dp-table", "table")] if args.table else []
            codes += [(c, "override") for c in overrides]
            codes += [] if args.ours_only else [(f"deepmd-{b}", b) for b in args.backends]
            res: dict[str, list[dict]] = {c: [] for c, _ in codes}
            caches = {
                c: out / f"xla_cache_{name}_{prec}{c.removeprefix('jaxmd_dp')}"
                for c, b in codes
                if b in (None, "table", "checkout", "override")
            }
            for rep in range(args.repeats):
                if rep < args.cold:  # our first runs compile (cold), later ones load (warm)
                    for cache in caches.values():
                        shutil.rmtree(cache, ignore_errors=True)
                for code, backend in codes:
                    d = out / f"{name}_{prec}_{code}_{rep}"
                    if backend in (None, "table", "checkout", "override"):
                        extra = [f"training.embedding_table={args.table}"] if backend == "table" else []
                        extra += overrides.get(code, [])
                        r = {
                            **ours(inp, d, caches[code], extra, others.get(code, ROOT)),
                            "cache": "cold" if rep < args.cold else "warm",
                        }
                    else:
                        r = deepmd(backend, inp, d)
                    if r["rc"] == 0:  # everything that is not a steady-state step: imports, statistics, compiles, ...
                        r["overhead_s"] = r["wall"] - r["s_step"] * args.steps
                    res[code].append(r)
                    print(
                        f"{name} {prec} {code} run {rep}: "
                        + json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()}),
                        flush=True,
                    )
            mine = [r["s_step"] for r in res["jaxmd_dp"] if r["rc"] == 0]
            tab = [r["s_step"] for r in res.get("jaxmd_dp-table", []) if r["rc"] == 0]
            for code, _ in codes:
                ok = [r for r in res[code] if r["rc"] == 0]
                if not ok:
                    table.append((name, prec, code, None, None, None, "", "", "", ""))
                    continue
                s = statistics.median(r["s_step"] for r in ok)
                ratio = s / statistics.median(mine) if mine else None
                ratio_t = s / statistics.median(tab) if tab else None
                ours_run = code.startswith("jaxmd_dp")
                over = " / ".join(f"{r['overhead_s']:.1f}" for r in ok)
                start = (
                    f"overhead {over} s ({' / '.join(r['cache'] for r in ok)} cache); scan "
                    f"{ok[0]['scan_s']:.1f} s, stats {ok[0]['stats_s']:.1f} s, first step "
                    + " / ".join(f"{r['first_step_s']:.1f}" for r in ok)
                    + " s"
                    if ours_run
                    else f"overhead {over} s; first window {ok[0]['first_window_s']:.1f} s"
                )
                rate = (
                    f"{ok[0]['gflop']:.2f} GFLOP/step, {ok[0]['gflop'] / s:.1f} GFLOP/s = "
                    f"{100 * ok[0]['gflop'] / s / mm[prec]:.0f}% of matmul"
                    if ok[0].get("gflop")
                    else ""
                )
                rmse = f"e {ok[-1].get('rmse_e_trn', float('nan')):.2e} f {ok[-1].get('rmse_f_trn', float('nan')):.2e}"
                table.append(
                    (name, prec, code, s, ratio, ratio_t, start, f"{max(r['rss_gb'] for r in ok):.2f}", rmse, rate)
                )
    print_headline(table)
    print(
        "\n| input | precision | code | s/step (median) | its s/step ÷ ours | ÷ ours-table | start-up | peak RSS GB "
        "| last rmse (trn) | FLOP rate |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, prec, code, s, ratio, ratio_t, start, rss, rmse, rate in table:
        sv = f"{s:.4f}" if s is not None else "failed"
        rv, rt = (f"{r:.2f}x" if r is not None else "" for r in (ratio, ratio_t))
        print(f"| {name} | {prec} | {code} | {sv} | {rv} | {rt} | {start} | {rss} | {rmse} | {rate} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
