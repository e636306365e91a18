"""Two checkouts' training steps timed in one process, in alternating blocks (A/B without the host's drift).

    # in checkout A (e.g. a git worktree of the old commit; copy this script there if it predates it):
    .venv/bin/python /tmp/old/bench/step_ab.py save CONFIG /tmp/old_step.pkl
    # in checkout B: compile this step, load A's, time blocks of 10 steps of each in turn
    GLIBC_TUNABLES=glibc.malloc.hugetlb=1 .venv/bin/python bench/step_ab.py compare CONFIG /tmp/old_step.pkl \
        [--blocks 40]

CONFIG: our YAML or a DeePMD-kit input.json (e.g. runs/*/water_float32.json from bench/train_speed.py); both
checkouts build the same first batch from it. The executable travels with ``jax.experimental.
serialize_executable`` (same jax, same machine), so each program runs on its own copy of the same state.
Prints both medians of the blocks' s/step and the median of the paired differences (this checkout −
the saved one) with how many blocks this checkout was faster. Separate processes, one after the other,
drift with the host by more than the differences worth finding (session 46: water float32 medians of
30.5–36.0 ms for one program); here four runs of two identical programs gave −1.16 to +0.26 ms.
"""

from __future__ import annotations

import argparse
import pickle
import tempfile
import time

import checkout  # noqa: F401  (this checkout's jaxmd_dp first on the path)


def compiled_step(config: str):
    """(this checkout's compiled training step, its trainer, the first batch's arrays) for ``config``."""
    from jaxmd_dp.cli_util import use_compile_cache
    from jaxmd_dp.config import load_config
    from jaxmd_dp.train.loop import Trainer

    use_compile_cache(None)
    tr = Trainer(load_config(config, ["training.numb_steps=200"]), tempfile.mkdtemp(), log=lambda *a, **k: None)
    arrays, layout = tr.prepare(tr.batches.next())
    return tr.train_step.trace(tr.state, tr.stats, arrays, layout).lower().compile(), tr, arrays


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=["save", "compare"])
    p.add_argument("config")
    p.add_argument("pickle", help="the saved executable: written by save, read by compare")
    p.add_argument("--blocks", type=int, default=40, help="blocks of 10 steps of each program (compare)")
    args = p.parse_args(argv)

    import jax
    import numpy as np
    from jax.experimental.serialize_executable import deserialize_and_load, serialize

    mine, tr, arrays = compiled_step(args.config)
    if args.mode == "save":
        with open(args.pickle, "wb") as f:
            pickle.dump(serialize(mine), f)
        return 0
    with open(args.pickle, "rb") as f:
        other = deserialize_and_load(*pickle.load(f))
    fns = {"this": mine, "saved": other}
    states = {"this": tr.state, "saved": jax.tree_util.tree_map(lambda x: x.copy(), tr.state)}
    for k, fn in fns.items():  # warm-up
        for _ in range(5):
            states[k], m = fn(states[k], tr.stats, arrays)
        jax.block_until_ready(m)
    times: dict[str, list[float]] = {"this": [], "saved": []}
    for block in range(args.blocks):
        for k in ("this", "saved") if block % 2 else ("saved", "this"):
            t0 = time.perf_counter()
            for _ in range(10):
                states[k], m = fns[k](states[k], tr.stats, arrays)
            jax.block_until_ready(m)
            times[k].append((time.perf_counter() - t0) / 10)
    d = np.array(times["this"]) - np.array(times["saved"])
    print(f"this checkout {np.median(times['this']) * 1e3:.2f} ms/step, saved {np.median(times['saved']) * 1e3:.2f} "
          f"ms/step (medians of {args.blocks} blocks); paired difference median {np.median(d) * 1e3:+.2f} ms, "
          f"this faster in {int((d < 0).sum())} of {len(d)} blocks")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
