"""Merged batches against one step per batch shape (``training.merge_batches`` true / false), in one
process: two trainers on CONFIG, the same sampled batches, steps alternating between them.

    .venv/bin/python bench/merge_ab.py CONFIG [--precision float64] [--batches 8] [--steps 48]
                                       [--numb-steps 10] [--table 64]

``--numb-steps`` sets ``training.numb_steps``, which the merged sizes depend on (``merge.bucket_sizes``:
a short run pads every batch to one size, a long one keeps sizes apart). Prints the batch shapes drawn,
the time of the first calls (the compiles), the median step time and the last rmse of each.
"""

from __future__ import annotations

import argparse
import tempfile
import time


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("config")
    p.add_argument("--precision", default="float64", choices=["float64", "float32"])
    p.add_argument("--batches", type=int, default=8)
    p.add_argument("--steps", type=int, default=48)
    p.add_argument("--numb-steps", type=int, default=10)
    p.add_argument("--table", type=int, default=64)
    args = p.parse_args(argv)

    import jax
    import numpy as np

    from jaxmd_dp.config import load_config
    from jaxmd_dp.train.loop import Trainer

    runs = []
    for merge in (True, False):
        config = load_config(args.config, [
            f"training.numb_steps={args.numb_steps}", f"model.descriptor.precision={args.precision}",
            f"model.fitting_net.precision={args.precision}", f"training.embedding_table={args.table}",
            f"training.merge_batches={str(merge).lower()}"])
        tr = Trainer(config, tempfile.mkdtemp(prefix="merge_ab_"), log=lambda *a, **k: None)
        runs.append({"merge": merge, "tr": tr, "state": jax.tree_util.tree_map(lambda x: x.copy(), tr.state),
                     "times": []})
    batches = [runs[0]["tr"].batches.next() for _ in range(args.batches)]
    print("batch shapes (frames, atoms):", sorted({(b["coord"].shape[0], b["natoms"]) for b in batches}))
    for r in runs:
        r["calls"] = [r["tr"].prepare(b) for b in batches]
        t = time.perf_counter()
        for arrays, layout in r["calls"]:  # the first call of each shape compiles
            r["state"], _ = r["tr"].train_step(r["state"], r["tr"].stats, arrays, layout)
        jax.block_until_ready(r["state"].step)
        r["compile_s"] = time.perf_counter() - t
    for i in range(args.steps):
        for r in runs:
            arrays, layout = r["calls"][i % len(batches)]
            t = time.perf_counter()
            r["state"], metrics = r["tr"].train_step(r["state"], r["tr"].stats, arrays, layout)
            jax.block_until_ready(r["state"].step)
            r["times"].append(time.perf_counter() - t)
            r["rmse"] = float(metrics["rmse"])
    for r in runs:
        sizes = [s.atoms for s, _ in r["tr"].merged.get("train", [])]
        print(f"merge_batches={str(r['merge']).lower()} (merged sizes {sizes or '-'}): first calls "
              f"{r['compile_s']:.1f} s, step median {np.median(r['times']) * 1e3:.2f} ms, last rmse {r['rmse']:.10e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
