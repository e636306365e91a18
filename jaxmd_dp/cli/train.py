"""Train a model: ``python -m jaxmd_dp.train CONFIG [key.path=value ...] [-o DIR] [--restart DIR | --init-model
MODEL | --finetune MODEL]``.

CONFIG is our YAML or DeePMD-kit's ``input.json``; overrides change any key. Outputs (out.json,
lcurve.out, checkpoints) go to ``-o DIR`` (default: the current directory, as DeePMD-kit).
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from jaxmd_dp.config import Config, load_config
from jaxmd_dp.errors import InputError
from jaxmd_dp.runtime.compile_cache import COMPILE_CACHE_DEFAULT, compile_cache_dir, use_compile_cache


def ensure_example_data(config: Config) -> None:
    """Fetch DeePMD-kit's example water data when a config points at a missing ``.../data/water/data_k``."""
    from jaxmd_dp.data.fetch import ensure_water_data

    tc = config.training
    paths = (
        list(tc.training_data.systems) if not isinstance(tc.training_data.systems, str) else [tc.training_data.systems]
    )
    if tc.validation_data is not None:
        v = tc.validation_data.systems
        paths += [v] if isinstance(v, str) else list(v)
    for p in map(Path, paths):
        if not p.exists() and p.parent.name == "water" and p.parent.parent.name == "data":
            ensure_water_data(str(p.parent))


def check_output_dir(out: Path, config: Config, restart, force: bool) -> None:
    """Refuse to overwrite an earlier run silently."""
    if restart is not None:
        return
    tc = config.training
    from jaxmd_dp.train.ema import ema_checkpoint_dir

    names = (tc.disp_file, tc.save_ckpt, str(ema_checkpoint_dir(tc.save_ckpt)), "out.json")
    old = [n for n in names if (out / n).exists()]
    if old and not force:
        raise InputError(
            f"{out}: already holds a training run ({', '.join(old)}); continue it with "
            f"--restart {out}, or overwrite it with --force"
        )
    for n in old:
        p = out / n
        shutil.rmtree(p) if p.is_dir() else p.unlink()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m jaxmd_dp.train", description=__doc__.splitlines()[0])
    p.add_argument("config", help="our YAML config or DeePMD-kit input.json")
    p.add_argument("overrides", nargs="*", help="key.path=value overrides, e.g. training.numb_steps=2000")
    p.add_argument("-o", "--output", default=".", help="output directory (default: current directory)")
    p.add_argument("--restart", default=None, help="continue from this checkpoint or output directory")
    p.add_argument("--init-model", default=None, help="start from this model's weights and statistics")
    p.add_argument(
        "--init-frz-model",
        default=None,
        metavar="FILE",
        help="start from a frozen model file (python -m jaxmd_dp.freeze) as DeePMD-kit's option",
    )
    p.add_argument(
        "-t",
        "--finetune",
        default=None,
        metavar="MODEL",
        help="fine-tune a trained model (ours, a checkpoint or output directory, DeePMD-kit's .dp/.yaml) on the "
        "config's type_map and data: its descriptor and fitting net replace the config's, the energy bias is "
        "changed on the data, training starts at step 0",
    )
    p.add_argument(
        "--use-pretrain-script",
        action="store_true",
        help="with --finetune: the pretrained model's descriptor and fitting net replace the config's (always "
        "so here, as DeePMD-kit's TensorFlow backend)",
    )
    p.add_argument(
        "--profile",
        default=None,
        metavar="DIR",
        help="write a jax.profiler trace of a few steps after warm-up into DIR (TensorBoard/Perfetto)",
    )
    p.add_argument(
        "--compile-cache",
        default=None,
        metavar="DIR",
        help="persistent compilation cache: later runs of the same model and data shapes load the "
        "compiled steps instead of compiling them (default: $JAXMD_DP_COMPILE_CACHE, else "
        f"{COMPILE_CACHE_DEFAULT}; 'off' for none)",
    )
    p.add_argument("-l", "--log-path", default=None, metavar="FILE", help="also write the log to FILE")
    p.add_argument(
        "--log-level",
        default="INFO",
        help="console log level: DEBUG, INFO, WARNING, ERROR (or DeePMD-kit's 3, 2, 1, 0)",
    )
    p.add_argument("--force", action="store_true", help="overwrite an earlier run in the output directory")
    # [data parallel] the launcher is detected (mpirun/mpiexec environment, or a jax.distributed coordinator)
    p.add_argument(
        "--mpi-log",
        default="master",
        choices=("master", "collect", "workers"),
        help="logging with several processes: master (rank 0 only), collect (every rank, prefixed, "
        "to the console), workers (every rank also to <output>/train.rank<k>.log)",
    )
    p.add_argument(
        "--coordinator",
        default=None,
        metavar="HOST:PORT",
        help="jax.distributed coordinator address for multi-process training without MPI "
        "(default: $JAX_COORDINATOR_ADDRESS)",
    )
    p.add_argument(
        "--num-processes",
        type=int,
        default=None,
        help="jax.distributed: number of processes (default: $JAX_NUM_PROCESSES or auto-detected)",
    )
    p.add_argument(
        "--process-id",
        type=int,
        default=None,
        help="jax.distributed: this process's index (default: $JAX_PROCESS_ID or auto-detected)",
    )
    args = p.parse_intermixed_args(argv)
    for o in args.overrides:
        if "=" not in o:
            raise InputError(f"override {o!r}: expected key.path=value")
    from jaxmd_dp.train.log import Logger, parse_level

    parse_level(args.log_level)
    use_compile_cache(compile_cache_dir(args.compile_cache))
    init_model = args.init_model
    if args.init_frz_model is not None:
        if init_model is not None or args.restart is not None:
            raise InputError("--init-frz-model: give only one of --init-frz-model, --init-model, --restart")
        if not Path(args.init_frz_model).is_file():
            raise InputError(
                f"--init-frz-model {args.init_frz_model}: not a file (a frozen model from "
                "python -m jaxmd_dp.freeze; for a checkpoint directory use --init-model)"
            )
        init_model = args.init_frz_model
    if args.finetune is not None and (init_model is not None or args.restart is not None):
        raise InputError("--finetune: give only one of --finetune, --init-model, --init-frz-model, --restart")
    if args.use_pretrain_script and args.finetune is None:
        raise InputError("--use-pretrain-script: only with --finetune (--init-model needs the config's own model)")
    from jaxmd_dp.train.parallel import init_workers, rank_logger

    workers = init_workers(args.coordinator, args.num_processes, args.process_id, log_mode=args.mpi_log)
    config = load_config(args.config, args.overrides)
    out = Path(args.output)
    error = None
    if workers.is_writer:  # [data parallel] rank 0 prepares the output directory and data; all stop on its error
        try:
            try:
                out.mkdir(parents=True, exist_ok=True)
                probe = out / ".jaxmd_dp_write_test"
                probe.write_text("")
                probe.unlink()
            except OSError as e:
                raise InputError(f"{out}: output directory is not writable ({e.strerror})") from None
            check_output_dir(out, config, args.restart, args.force)
            ensure_example_data(config)
        except InputError as e:
            error = str(e)
    error = workers.broadcast(error)
    if error is not None:
        raise InputError(error)

    from jaxmd_dp.train.loop import Trainer

    console = Logger(args.log_level, args.log_path if workers.is_writer else None)
    trainer = Trainer(
        config,
        out,
        restart=args.restart,
        init_model=init_model,
        finetune=args.finetune,
        workers=workers,
        log=rank_logger(workers, out, console),
        profile=args.profile,
    )
    trainer.fit()
    return 0
