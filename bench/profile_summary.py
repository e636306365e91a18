"""Where a training step's time goes, from a ``train --profile DIR`` trace (XLA CPU op events).

    .venv/bin/python -m jaxmd_dp.train CONFIG --profile runs/prof -o runs/prof_run training.numb_steps=30
    .venv/bin/python bench/profile_summary.py runs/prof [--steps 10] [--top 20]

Prints the share of op time per kind (matmuls: YNNPACK/oneDNN/Eigen dot fusions; layout copies and
transposes; gathers/scatters; reductions; other element-wise fusions), how long 0, 1, 2, ... threads ran an
op at once (how well the step's ops fill the cores), and the most expensive ops, for each process of the
trace (the host; on a GPU also the device, its streams as threads).
Times are summed over the profiled steps' op events, divided by ``--steps``: the steps the training log's
"profiled steps A-B" line names (whole dispatches: 10 with the default of up to 10 steps per dispatch, 5 with
``training.steps_per_dispatch=1``).
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import re
import sys

SKIP = (
    "PjitFunction",
    "$",
    "ThunkExecutor",
    "ExecuteHelper",
    "TfrtCpuExecutable",
    "PjRt",
    "Common",
    "SlinkyThreadPool",
    "AllocateOutputBuffers",
    "ThreadpoolListener",
    "end: ",
    "Wait for donation holds",
)
KINDS = [
    ("matmul", r"ynn|dot|gemm|onednn|convolution|custom-call"),
    ("copy/transpose", r"^copy|transpose|bitcast_copy|copy_fusion"),
    ("gather/scatter", r"gather|scatter|dynamic-slice|dynamic_slice|dynamic-update|dynamic_update"),
    ("reduce", r"reduce"),
    ("sort", r"sort|top_k|topk"),
    ("element-wise fusion", r"fusion|tanh|exp|add|multiply|select|subtract|divide|maximum|minimum|compare"),
]


def kind(name: str) -> str:
    for k, pat in KINDS:
        if re.search(pat, name):
            return k
    return "other"


def threads_busy(events: list[dict]) -> list[tuple[int, float]]:
    """(n, ms) for n = 0, 1, 2, ...: how long exactly n threads ran an op at once, from the first op event's
    start to the last one's end (nested events of one thread count once)."""
    edges = sorted(
        [(e["ts"], 1, (e["pid"], e["tid"])) for e in events]
        + [(e["ts"] + e["dur"], -1, (e["pid"], e["tid"])) for e in events],
        key=lambda x: (x[0], x[1]),
    )
    depth: collections.Counter = collections.Counter()  # open events per thread
    time_at: collections.Counter = collections.Counter()
    busy, last = 0, edges[0][0] if edges else 0.0  # threads with an open event
    for t, d, thread in edges:
        time_at[busy] += t - last
        depth[thread] += d
        busy += (d > 0 and depth[thread] == 1) - (d < 0 and depth[thread] == 0)
        last = t
    return [(n, time_at[n] / 1e3) for n in sorted(time_at)]


def summarize(process: str, events: list[dict], steps: int, top: int) -> None:
    """Print one process's op time per kind, its threads' overlap and its costliest ops, per step."""
    ops: collections.Counter = collections.Counter()
    for e in events:
        ops[e["name"]] += e["dur"] / 1e3 / steps  # ms per step
    total = sum(ops.values())
    by_kind: collections.Counter = collections.Counter()
    for name, ms in ops.items():
        by_kind[kind(name)] += ms
    print(f"{process}: op time {total:.1f} ms per step (summed over threads)")
    for k, ms in by_kind.most_common():
        print(f"  {k:<20} {ms:8.1f} ms  {100 * ms / total:5.1f} %")
    busy = threads_busy(events)
    print("threads running an op at once, ms per step: " + ", ".join(f"{n}: {ms / steps:.1f}" for n, ms in busy))
    print(f"top ops ({len(events) / steps:.0f} op events per step):")
    for name, ms in ops.most_common(top):
        print(f"  {ms:8.2f} ms  {100 * ms / total:5.1f} %  {name[:90]}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trace_dir")
    p.add_argument("--steps", type=int, default=10, help="profiled steps (the log's 'profiled steps A-B')")
    p.add_argument("--top", type=int, default=15)
    args = p.parse_args(argv)
    files = sorted(glob.glob(f"{args.trace_dir}/**/*.trace.json.gz", recursive=True))
    if not files:
        print(f"error: no *.trace.json.gz under {args.trace_dir}", file=sys.stderr)
        return 1
    trace = json.load(gzip.open(files[-1]))["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in trace if e.get("ph") == "M" and e.get("name") == "process_name"}
    by_process: dict = collections.defaultdict(list)  # the host's threads; on a GPU also the device's streams
    for e in trace:
        if e.get("ph") == "X" and "dur" in e and not e["name"].startswith(SKIP):
            by_process[names.get(e["pid"], str(e["pid"]))].append(e)
    print(files[-1])
    for process, events in sorted(by_process.items(), key=lambda kv: -sum(e["dur"] for e in kv[1])):
        summarize(process, events, args.steps, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
