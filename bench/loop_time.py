"""Wall time per step of the whole training loop (sampling, neighbour lists, the step, lcurve), after
warm-up: a Trainer on CONFIG, ``fit`` for ``--warmup`` steps, then ``--steps`` more timed.

    .venv/bin/python bench/loop_time.py CONFIG [--warmup 40] [--steps 200] [overrides...]

Overrides are config keys, e.g. ``training.embedding_table=64``. Run it alternately from two checkouts
to compare loop changes (each imports its own ``jaxmd_dp``).
"""

from __future__ import annotations

import argparse
import tempfile
import time

import checkout  # noqa: F401  (this checkout's jaxmd_dp first on the path)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("config")
    p.add_argument("overrides", nargs="*")
    p.add_argument("--warmup", type=int, default=40)
    p.add_argument("--steps", type=int, default=200)
    args = p.parse_args(argv)

    from jaxmd_dp.config import load_config
    from jaxmd_dp.train.loop import Trainer

    config = load_config(args.config, [f"training.numb_steps={args.warmup + args.steps}",
                                       "training.save_freq=1000000", *args.overrides])
    trainer = Trainer(config, tempfile.mkdtemp(prefix="loop_time_"), log=lambda *a, **k: None)
    trainer.fit(args.warmup)
    t = time.perf_counter()
    trainer.fit()
    print(f"{args.config}: wall per step {(time.perf_counter() - t) / args.steps * 1e3:.2f} ms over {args.steps} steps")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
