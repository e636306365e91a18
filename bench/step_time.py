"""Time the jitted training step alone: a trainer built from CONFIG, a few fixed batches cycled, no lcurve,
validation or checkpoints. For A/B comparisons of the step (run it alternately from two checkouts).

    .venv/bin/python bench/step_time.py CONFIG [--precision float64] [--steps 40] [--batches 4]

CONFIG: our YAML or a DeePMD-kit input.json (e.g. runs/speed*/water_float64.json from bench/train_speed.py).
Prints the compile time of the batches' shapes, then the median and minimum of ``--steps`` step times
(milliseconds), the median CPU time of the process per step (all threads; less sensitive than wall time to
other load on a shared machine), and the loss metrics of the last step (the same for two checkouts that
compute the same numbers, as batches and seed are fixed).
"""

from __future__ import annotations

import argparse
import tempfile
import time


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("config")
    p.add_argument("--precision", default="float64", choices=["float64", "float32"])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--batches", type=int, default=4)
    p.add_argument("--compile-cache", default="off")
    args = p.parse_args(argv)

    import jax
    import numpy as np

    from jaxmd_dp.cli_util import compile_cache_dir, use_compile_cache
    from jaxmd_dp.config import load_config
    from jaxmd_dp.train.loop import Trainer
    from jaxmd_dp.train.step import device_batch

    use_compile_cache(compile_cache_dir(args.compile_cache))
    config = load_config(args.config, ["training.numb_steps=10", f"model.descriptor.precision={args.precision}",
                                       f"model.fitting_net.precision={args.precision}"])
    trainer = Trainer(config, tempfile.mkdtemp(prefix="step_time_"), log=lambda *a, **k: None)
    batches = [trainer.batches.next() for _ in range(args.batches)]
    calls = [(device_batch(b), trainer.layout_for(b)) for b in batches]
    state, stats = trainer.state, trainer.stats
    t = time.perf_counter()
    for batch, layout in calls:  # one step per batch: compiles each batch shape
        state, metrics = trainer.train_step(state, stats, batch, layout)
    jax.block_until_ready(state.step)
    compile_s = time.perf_counter() - t
    times, cpu = [], []
    for i in range(args.steps):
        batch, layout = calls[i % len(calls)]
        t, c = time.perf_counter(), time.process_time()
        state, metrics = trainer.train_step(state, stats, batch, layout)
        jax.block_until_ready(state.step)
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    shapes = sorted({(int(b["coord"].shape[0]), int(b["natoms"])) for b in batches})
    last = {k: float(v) for k, v in metrics.items() if k.startswith("rmse")}
    print(f"{args.config} {args.precision}: batches (frames, atoms) {shapes}; first steps (compile) "
          f"{compile_s:.1f} s; step median {np.median(times) * 1e3:.1f} ms, min {np.min(times) * 1e3:.1f} ms "
          f"over {args.steps}; CPU time (all threads) median {np.median(cpu) * 1e3:.1f} ms; last step {last}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
