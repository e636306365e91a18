"""How a training step's ops share the cores: a ``jax.profiler`` trace of a few steps, each waited for, and
per step its wall time, the op time summed over threads, the time at least one op runs (their union), the
overlap (sum − union) and the gaps with no op running.

    .venv/bin/python bench/step_overlap.py CONFIG [--precision float64] [--table 64] [--steps 10] [--out DIR]

CONFIG: our YAML or a DeePMD-kit input.json (e.g. runs/s15_final/copper_float64.json). The trace stays in
``--out`` (default: a temp dir) for ``bench/profile_summary.py DIR --steps N``.
"""

from __future__ import annotations

import argparse
import glob
import gzip
import json
import tempfile
import time

import checkout  # noqa: F401  (this checkout's jaxmd_dp first on the path)

SKIP = ("PjitFunction", "$", "ThunkExecutor", "ExecuteHelper", "TfrtCpuExecutable", "PjRt", "Common",
        "SlinkyThreadPool", "AllocateOutputBuffers", "Threadpool", "end:")


def per_step(trace_file: str) -> list[dict]:
    """One dict per step of the trace: wall, ops, op_sum, union, overlap, idle (ms)."""
    events = [e for e in json.load(gzip.open(trace_file))["traceEvents"] if e.get("ph") == "X" and "dur" in e]
    ops = [e for e in events if not e["name"].startswith(SKIP)]
    waits = sorted((e for e in events if e["name"].startswith("ThunkExecutor::Execute (wait")), key=lambda e: e["ts"])
    calls = sorted((e for e in events if e["name"].startswith("PjitFunction")), key=lambda e: e["ts"])
    rows = []
    for w in waits:
        before = [c for c in calls if c["ts"] <= w["ts"]]
        if not before:
            continue
        t0, t1 = before[-1]["ts"], w["ts"] + w["dur"]
        spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in ops if t0 <= e["ts"] < t1)
        if not spans:
            continue
        union, (a0, b0) = 0.0, spans[0]
        for a, b in spans[1:]:
            if a > b0:
                union, a0, b0 = union + b0 - a0, a, b
            else:
                b0 = max(b0, b)
        union += b0 - a0
        total = sum(b - a for a, b in spans)
        rows.append({"wall": (t1 - t0) / 1e3, "ops": len(spans), "op_sum": total / 1e3, "union": union / 1e3,
                     "overlap": (total - union) / 1e3, "idle": (t1 - t0 - union) / 1e3})
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("config")
    p.add_argument("--precision", default="float64", choices=["float64", "float32"])
    p.add_argument("--table", type=int, default=0, help="training.embedding_table (0: exact nets)")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)

    import jax

    from jaxmd_dp.config import load_config
    from jaxmd_dp.train.loop import Trainer

    config = load_config(args.config, ["training.numb_steps=200", f"model.descriptor.precision={args.precision}",
                                       f"model.fitting_net.precision={args.precision}",
                                       f"training.embedding_table={args.table}"])
    trainer = Trainer(config, tempfile.mkdtemp(prefix="step_overlap_"), log=lambda *a, **k: None)
    calls = [trainer.prepare(trainer.batches.next()) for _ in range(4)]
    state = trainer.state
    for i in range(24):  # compile and warm up
        state, _ = trainer.train_step(state, trainer.stats, *calls[i % 4])
    jax.block_until_ready(state.step)
    t = time.perf_counter()
    for i in range(40):
        state, _ = trainer.train_step(state, trainer.stats, *calls[i % 4])
        jax.block_until_ready(state.step)
    print(f"step, waited for, without the profiler: {(time.perf_counter() - t) / 40 * 1e3:.2f} ms")
    out = args.out or tempfile.mkdtemp(prefix="step_overlap_trace_")
    jax.profiler.start_trace(out)
    for i in range(args.steps):
        state, _ = trainer.train_step(state, trainer.stats, *calls[i % 4])
        jax.block_until_ready(state.step)
    jax.profiler.stop_trace()
    trace = sorted(glob.glob(f"{out}/**/*.trace.json.gz", recursive=True))[-1]
    print(f"trace {trace}\n  wall ms   ops  op-sum ms  union ms  overlap ms  idle ms")
    for r in per_step(trace):
        print(f"  {r['wall']:7.2f} {r['ops']:5d} {r['op_sum']:10.2f} {r['union']:9.2f} {r['overlap']:11.2f} {r['idle']:8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
