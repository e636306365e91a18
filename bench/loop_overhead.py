"""Where the training loop's time goes around the step: five ways of running the same trainer, in paired
rounds in one process (so that a slow spell of the machine hits all alike), ms per step.

    .venv/bin/python bench/loop_overhead.py CONFIG [--steps 150] [--rounds 6] [overrides...]

- ``bare``: the jitted step alone, on ``--replay`` prepared batches cycled, dispatched back to back
  (what the step costs with nothing around it);
- ``fit-prepared``: ``Trainer.fit`` with those prepared batches handed out instead of drawn and prepared
  (the loop's own work: lcurve bookkeeping, the batch thread's hand-over, the step's dispatch);
- ``fit-cached``: ``fit`` drawing from the same raw batches, each prepared as usual but with its frames'
  neighbour lists already cached (adds the preparation: box check, lists from the cache, merge);
- ``fit-new``: ``fit`` as in training, with a fresh neighbour cache each round, so every frame drawn has
  its lists built (a short run's case on data of many frames; the device store is sized for the round's
  draws, as in a run of that length);
- ``fit-null``: ``fit`` with the step replaced by a jitted function that reads the same arrays and does
  nothing else, lists cached as in ``fit-cached``: the loop's floor, the most steps per second it allows
  on this host whatever the step.

Each round's ``fit`` ends on a display step (lcurve line, a wait for the step); the checkpoint and
the validation of that step are left out (a run has one per ``save_freq`` / ``disp_freq`` steps), and so is
the FLOP estimate logged after a fit's first step (once per run).

Each is printed per round (wall / process CPU ms per step) and as medians, with the paired difference to
``bare``. Overrides are config keys, e.g. ``training.embedding_table=64``.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
import time

import checkout  # noqa: F401  (this checkout's jaxmd_dp first on the path)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("config")
    p.add_argument("overrides", nargs="*")
    p.add_argument("--steps", type=int, default=150, help="steps per round of each way")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--replay", type=int, default=200, help="raw batches drawn once and cycled")
    args = p.parse_args(argv)

    import jax
    import jax.numpy as jnp

    from jaxmd_dp.config import load_config
    from jaxmd_dp.runtime.hugepages import buffers_status, keep_freed_blocks, status
    from jaxmd_dp.train.loop import Trainer
    from jaxmd_dp.train.neighbor_cache import NeighborCache
    from jaxmd_dp.train.step import TrainState

    keep_freed_blocks(only_tools=False)  # as the CLI does (JAXMD_DP_KEEP_BUFFERS=0: not)
    print(f"huge pages: {status()}; CPU buffers: {buffers_status()}")  # set GLIBC_TUNABLES to match the CLI

    config = load_config(
        args.config,
        [
            "training.numb_steps=100000000",
            "training.save_freq=100000000",
            "training.disp_freq=100000000",
            *args.overrides,
        ],
    )
    tr = Trainer(config, tempfile.mkdtemp(prefix="loop_overhead_"), log=lambda *a, **k: None)
    real_step, real_next, real_prepare = tr.train_step, tr.batches.next, tr.prepare
    tr.fit(2)  # compiles the step for the first batch
    # each round's fit ends on a display and a save: leave out the checkpoint and the validation, which
    # a training run does once per save_freq / disp_freq steps, not once per round
    tr.save_checkpoint = lambda: None
    tr.batches.gather_state = lambda workers: None
    tr.validate = lambda *a, **k: None
    tr._log_step_cost = lambda *a, **k: None  # the FLOP estimate each fit logs after its first step
    raw = [real_next() for _ in range(args.replay)]
    prepared = [real_prepare(b) for b in raw]  # compiles the other shapes, fills the cache for these frames
    jax.block_until_ready([a for a, _ in prepared])
    _, metrics = jax.eval_shape(real_step, tr.state, tr.stats, *prepared[0])
    keys = [k for k in metrics if k != "nneigh_max"]

    def null_step(state, stats, batch, layout):  # reads every batch array, updates nothing
        s = sum(jnp.sum(v).astype(jnp.float32) for v in batch.values() if hasattr(v, "shape"))
        m = {k: s for k in keys}
        m["nneigh_max"] = jnp.zeros(metrics["nneigh_max"].shape, metrics["nneigh_max"].dtype)
        return TrainState(state.step + 1, state.params, state.opt_state, state.first_bad), m

    null = jax.jit(null_step, static_argnums=3, donate_argnums=0)

    def cycler(items):  # a stand-in for batches.next / prepare: the items in turn, from the first
        it = itertools.cycle(items)
        return lambda *a, **k: next(it)

    def fit_with(step=real_step, next_=real_next, prepare=real_prepare):
        tr.train_step, tr.batches.next, tr.prepare = step, next_, prepare
        try:
            tr.fit(int(tr.state.step) + args.steps)
        finally:
            tr.train_step, tr.batches.next, tr.prepare = real_step, real_next, real_prepare

    def bare():
        state = tr.state
        for i in range(args.steps):
            state, _ = real_step(state, tr.stats, *prepared[i % len(prepared)])
        tr.state = state
        jax.block_until_ready(state.step)

    def fit_new():  # a fresh cache for this round only: every frame drawn has its list built (the other ways
        filled = tr.neighbor_cache  # keep the cache filled above)
        mb = config.training.neighbor_cache_mb
        # the device store: list slots for this round's draws, as in a run this long
        tr.neighbor_cache = NeighborCache(
            tr.train_systems, tr.hyper.ntypes, mb, args.steps * max(tr.train_data.batch_sizes)
        )
        try:
            fit_with()
        finally:
            tr.neighbor_cache = filled

    ways = {
        "bare": bare,
        "fit-prepared": lambda: fit_with(next_=cycler(raw), prepare=cycler(prepared)),
        "fit-cached": lambda: fit_with(next_=cycler(raw)),
        "fit-new": fit_new,
        "fit-null": lambda: fit_with(step=null, next_=cycler(raw)),
    }
    for f in ways.values():  # warm-up: every way once (the null step's compile)
        f()
    res: dict[str, list[tuple[float, float]]] = {k: [] for k in ways}
    for _ in range(args.rounds):
        for name, f in ways.items():
            t, c = time.perf_counter(), time.process_time()
            f()
            res[name].append(
                ((time.perf_counter() - t) / args.steps * 1e3, (time.process_time() - c) / args.steps * 1e3)
            )
        print("  ".join(f"{k} {v[-1][0]:.2f}/{v[-1][1]:.2f}" for k, v in res.items()), flush=True)
    bare_w = [w for w, _ in res["bare"]]
    print(
        f"{args.config} {' '.join(args.overrides)}: {jax.devices()[0].platform}, {args.rounds} rounds of "
        f"{args.steps} steps, ms per step (wall / process CPU; medians)"
    )
    for k, v in res.items():
        w, c = [x[0] for x in v], [x[1] for x in v]
        diff = statistics.median(a - b for a, b in zip(w, bare_w))
        print(
            f"  {k:13s} wall {statistics.median(w):7.3f}  CPU {statistics.median(c):7.3f}  wall − bare "
            f"(paired) {diff:+.3f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
