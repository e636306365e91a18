"""Where a training run's start-up goes: timestamps of each console line while the trainer is built and
takes its first steps, plus the neighbour scan and the environment-matrix statistics timed on their own.

    .venv/bin/python bench/startup.py CONFIG [--steps 2] [--compile-cache DIR|off] [--out DIR]

CONFIG: our YAML or a DeePMD-kit input.json (e.g. one written by bench/train_speed.py). Run it twice with
the same --compile-cache DIR to see a cold and a warm start.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

import checkout  # noqa: F401  (this checkout's jaxmd_dp first on the path)

T0 = time.perf_counter()


def stamp(msg: str) -> None:
    first = msg.splitlines()[0] if msg else ""
    print(f"{time.perf_counter() - T0:7.2f} s  {first[:120]}", flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("config")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--compile-cache", default="off")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    import jax  # noqa: F401

    stamp("import jax")
    from jaxmd_dp.config import load_config
    from jaxmd_dp.geometry.neighbor_stat import neighbor_stat
    from jaxmd_dp.geometry.stats import env_mat_stats, sample_stat_frames
    from jaxmd_dp.runtime.compile_cache import compile_cache_dir, use_compile_cache
    from jaxmd_dp.train.loop import Trainer

    use_compile_cache(compile_cache_dir(args.compile_cache))
    stamp("import jaxmd_dp")
    config = load_config(args.config, [f"training.numb_steps={args.steps}", "training.disp_freq=1"])
    trainer = Trainer(config, args.out or tempfile.mkdtemp(prefix="startup_"), log=stamp)
    stamp("trainer built")
    trainer.fit()
    stamp(f"{args.steps} steps done")
    systems = trainer.train_systems + trainer.valid_systems
    t = time.perf_counter()
    neighbor_stat(systems, trainer.hyper.rcut, trainer.hyper.ntypes)
    print(
        f"neighbour scan again (same shapes, compiled): {time.perf_counter() - t:.1f} s for "
        f"{sum(s.nframes for s in systems)} frames"
    )
    frames = sample_stat_frames(trainer.train_data, config.model.data_stat_nbatch, 1)
    t = time.perf_counter()
    env_mat_stats(frames, trainer.hyper)
    print(
        f"env-matrix statistics on other sampled frames (may recompile: cell capacity follows the frames): "
        f"{time.perf_counter() - t:.1f} s for {sum(len(f['coord']) for f in frames)} frames"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
