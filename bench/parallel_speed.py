"""Data-parallel training speed: samples per second with 1 and 2 processes (MPI), one CPU thread each.

    python bench/parallel_speed.py [--config configs/water.yaml] [--data DIR] [--steps 40] [--warmup 5]

For each process count N it starts N training processes (N = 1: plain python; N > 1: ``mpiexec -n N``),
each limited to one thread (XLA_FLAGS=--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1,
OMP_NUM_THREADS=1) and pinned to its own core when there are enough (sched_setaffinity, as taskset).
Each builds the Trainer (data, statistics: not timed), runs ``--warmup`` steps (compilation), then times
``--steps`` training steps between two barriers. Samples per second = workers × frames per worker batch ×
steps / time. Prints one JSON line per N (with each process's CPU seconds per step: on a busy machine the
wall time shows the other load, the CPU time the work), then the ratio; ``--json FILE`` also writes them.
Needs the ``mpi`` extra (mpi4py, mpi4jax) and mpiexec for N > 1.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
THREAD_ENV = {
    "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}


def _rank() -> int:
    for k in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK"):
        if os.environ.get(k, "").isdigit():
            return int(os.environ[k])
    return 0


def child(args) -> None:
    """One training process: pin, build the trainer, time the steps; rank 0 prints the result."""
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    rank = _rank()
    pinned = None
    if cores and args.nprocs <= len(cores):
        pinned = cores[rank % len(cores)]
        os.sched_setaffinity(0, {pinned})

    import jax

    from jaxmd_dp.config import config_from_dict, load_config
    from jaxmd_dp.train.loop import Trainer
    from jaxmd_dp.train.parallel import init_workers
    from jaxmd_dp.train.step import device_batch

    workers = init_workers()
    d = load_config(args.config).to_dict()
    d["training"]["training_data"]["systems"] = [str(Path(args.data) / f"data_{k}") for k in range(3)]
    d["training"].pop("validation_data", None)
    d["training"]["numb_steps"] = args.warmup + args.steps
    with tempfile.TemporaryDirectory() as tmp:
        tr = Trainer(config_from_dict(d), tmp, workers=workers, log=lambda *a, **k: None)
        state = tr.state

        def run(n):
            nonlocal state
            frames = 0
            for _ in range(n):
                batch = tr.batches.next()
                state, metrics = tr.train_step(state, tr.stats, device_batch(batch), tr.layout_for(batch))
                frames += int(batch["coord"].shape[-3])
            jax.block_until_ready(state)
            return frames

        run(args.warmup)
        workers.barrier()
        t0, c0 = time.perf_counter(), time.process_time()
        frames = run(args.steps)
        cpu = time.process_time() - c0
        workers.barrier()
        wall = time.perf_counter() - t0
    pins = workers.gather(pinned)
    cpus = workers.gather(cpu)
    if workers.is_writer:
        res = {
            "processes": workers.nprocs,
            "workers": workers.size,
            "steps": args.steps,
            "frames_per_worker_step": frames / args.steps,
            "wall_s": round(wall, 3),
            "samples_per_s": round(workers.size * frames / wall, 3),
            "s_per_step": round(wall / args.steps, 4),
            "cpu_s_per_step": [round(c / args.steps, 4) for c in cpus],  # each process's own CPU time
            "cores": pins,
            "launcher": workers.launcher,
        }
        print("RESULT " + json.dumps(res), flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=str(REPO / "configs" / "water.yaml"))
    p.add_argument(
        "--data",
        default=str(REPO.parent / "shared" / "data" / "water"),
        help="directory with data_0..data_2 (DeePMD-kit's water example)",
    )
    p.add_argument("--steps", type=int, default=40, help="timed steps")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first (compilation)")
    p.add_argument("--procs", type=int, nargs="+", default=[1, 2], help="process counts to measure")
    p.add_argument("--mpiexec", default=None, help="mpiexec to use (default: next to python, else on PATH)")
    p.add_argument("--json", default=None, help="also write the results to this file")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--nprocs", type=int, default=1, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(args)
        return 0

    env = {**os.environ, **THREAD_ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    mpiexec = args.mpiexec or (
        str(Path(sys.executable).parent / "mpiexec")
        if (Path(sys.executable).parent / "mpiexec").exists()
        else shutil.which("mpiexec")
    )
    print(f"load average before: {os.getloadavg()}; cores usable: {len(os.sched_getaffinity(0))}", flush=True)
    results = []
    for n in args.procs:
        cmd = [
            sys.executable,
            __file__,
            "--child",
            "--nprocs",
            str(n),
            "--config",
            args.config,
            "--data",
            args.data,
            "--steps",
            str(args.steps),
            "--warmup",
            str(args.warmup),
        ]
        if n > 1:
            if mpiexec is None:
                print(f"skipping {n} processes: no mpiexec", flush=True)
                continue
            cmd = [mpiexec, "-n", str(n), *cmd]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True)
        lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
        if out.returncode != 0 or not lines:
            print(out.stdout[-2000:], out.stderr[-4000:], file=sys.stderr)
            return 1
        res = json.loads(lines[-1][len("RESULT ") :])
        res["load_after"] = [round(x, 2) for x in os.getloadavg()]
        results.append(res)
        print(json.dumps(res), flush=True)
    by_n = {r["processes"]: r for r in results}
    if 1 in by_n and len(by_n) > 1:
        for n, r in sorted(by_n.items()):
            if n > 1:
                print(
                    f"speed-up {n} processes / 1: {r['samples_per_s'] / by_n[1]['samples_per_s']:.2f}x (ideal {n}x)",
                    flush=True,
                )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
