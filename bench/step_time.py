"""Time the jitted training step alone: a trainer built from CONFIG, a few fixed batches cycled, no lcurve,
validation or checkpoints. For A/B comparisons of the step (run it alternately from two checkouts).

    .venv/bin/python bench/step_time.py CONFIG [--precision float64] [--steps 40] [--batches 4] [--table 0 64]
                                         [--merge true false] [--numb-steps 10]

CONFIG: our YAML or a DeePMD-kit input.json (e.g. runs/speed*/water_float64.json from bench/train_speed.py).
Prints the compile time of the batches' shapes, then the median and minimum of ``--steps`` step times
(milliseconds), the median CPU time of the process per step (all threads; less sensitive than wall time to
other load on a shared machine), and the loss metrics of the last step (the same for two checkouts that
compute the same numbers, as batches and seed are fixed). ``--table 0 64`` times the step with the exact
embedding nets and with ``training.embedding_table=64`` in one process, alternating step by step.
``--merge true false`` does the same for merged batches against one step per batch shape
(``training.merge_batches``; one trainer each, the same batches); the merged sizes depend on
``training.numb_steps`` (``--numb-steps``: a short run pads every batch to one size, a long one does not).
"""

from __future__ import annotations

import argparse
import tempfile
import time

import checkout  # noqa: F401  (this checkout's jaxmd_dp first on the path)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("config")
    p.add_argument("--precision", default="float64", choices=["float64", "float32"])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--batches", type=int, default=4)
    p.add_argument("--compile-cache", default="off")
    p.add_argument("--table", type=int, nargs="+", default=[0],
                   help="training.embedding_table settings to time alternately in this process (0: exact nets)")
    p.add_argument("--merge", choices=["true", "false"], nargs="+", default=[None],
                   help="training.merge_batches settings to time alternately (default: the config's)")
    p.add_argument("--numb-steps", type=int, default=10, help="training.numb_steps (sets the merged sizes)")
    args = p.parse_args(argv)

    import jax
    import numpy as np

    from jaxmd_dp.runtime.compile_cache import compile_cache_dir, use_compile_cache
    from jaxmd_dp.config import load_config
    from jaxmd_dp.runtime.hugepages import buffers_status, keep_freed_blocks, status
    from jaxmd_dp.train.loop import Trainer

    use_compile_cache(compile_cache_dir(args.compile_cache))
    keep_freed_blocks(only_tools=False)  # as the CLI does (JAXMD_DP_KEEP_BUFFERS=0: not)
    print(f"huge pages: {status()}; CPU buffers: {buffers_status()}")  # set GLIBC_TUNABLES to match the CLI
    trainers = {}
    for merge in args.merge:
        config = load_config(args.config, [f"training.numb_steps={args.numb_steps}",
                                           f"model.descriptor.precision={args.precision}",
                                           f"model.fitting_net.precision={args.precision}"]
                             + ([] if merge is None else [f"training.merge_batches={merge}"]))
        trainers[merge] = Trainer(config, tempfile.mkdtemp(prefix="step_time_"), log=lambda *a, **k: None)
    first = next(iter(trainers.values()))
    batches = [first.batches.next() for _ in range(args.batches)]
    shapes = sorted({(int(b["coord"].shape[0]), int(b["natoms"])) for b in batches})
    runs = []
    for merge, trainer in trainers.items():
        prepared = [trainer.prepare(b) for b in batches]  # merged when the data's batch shapes are
        sizes = [shape.atoms for shape, _ in trainer.merged.get("train", [])]
        for table in args.table:  # one jitted step per setting (the layout is a static argument)
            calls = [(arrays, lay._replace(table=table)) for arrays, lay in prepared]
            state = jax.tree_util.tree_map(lambda x: x.copy(), trainer.state)  # the step donates its state
            t = time.perf_counter()
            for batch, layout in calls:  # one step per batch: compiles each batch shape
                state, metrics = trainer.train_step(state, trainer.stats, batch, layout)
            jax.block_until_ready(state.step)
            label = f"embedding_table={table}" + ("" if merge is None else f" merge_batches={merge} (sizes {sizes})")
            runs.append({"label": label, "trainer": trainer, "calls": calls, "state": state,
                         "compile_s": time.perf_counter() - t, "times": [], "cpu": []})
    for i in range(args.steps):  # settings alternate step by step, so load on the machine hits all alike
        batch_i = i % len(batches)
        for r in runs:
            batch, layout = r["calls"][batch_i]
            t, c = time.perf_counter(), time.process_time()
            tr = r["trainer"]
            r["state"], metrics = tr.train_step(r["state"], tr.stats, batch, layout)
            jax.block_until_ready(r["state"].step)
            r["times"].append(time.perf_counter() - t)
            r["cpu"].append(time.process_time() - c)
            r["last"] = {k: float(v) for k, v in metrics.items() if k.startswith("rmse")}
    for r in runs:
        times, cpu = r["times"], r["cpu"]
        print(f"{args.config} {args.precision} {r['label']}: batches (frames, atoms) {shapes}; "
              f"first steps (compile) {r['compile_s']:.1f} s; step median {np.median(times) * 1e3:.2f} ms, "
              f"min {np.min(times) * 1e3:.1f} ms over {args.steps}; CPU time (all threads) median "
              f"{np.median(cpu) * 1e3:.1f} ms; last step {r['last']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
