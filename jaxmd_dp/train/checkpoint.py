"""Training checkpoints with orbax: everything needed to continue exactly.

A checkpoint directory (``<output>/<save_ckpt>``, e.g. ``model.ckpt/``) holds one sub-directory per saved
step, written atomically by orbax (temporary directory, then rename), keeping ``max_ckpt_keep``. Each has
``state`` (step, params, optimizer state, statistics) and ``meta`` (JSON: resolved config, model
hyper-parameters, data-sampler states, versions).
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import jax
import numpy as np
import orbax.checkpoint as ocp

from jaxmd_dp.errors import InputError
from jaxmd_dp.model.energy import ModelHyper, Stats, default_stats, param_shapes
from jaxmd_dp.model.fast.stacked_weights import map_weight_trees, to_stacked
from jaxmd_dp.model.io import is_model_dir, load_model

if TYPE_CHECKING:
    from jaxmd_dp.train.step import TrainState

ITEMS = ("state", "meta")


class Checkpointer:
    """Save/restore training state under ``directory`` (synchronous; orbax's atomic commit).

    Only the calling process takes part: with several JAX processes (jax.distributed) orbax would
    otherwise wait in barriers for processes that never create a checkpointer (only rank 0 writes).
    """

    def __init__(self, directory: str | Path, max_to_keep: int | None = 5, read_only: bool = False):
        self.directory = Path(directory).absolute()
        me = jax.process_index()
        if not read_only:
            self.directory.mkdir(parents=True, exist_ok=True)  # orbax cannot create it for a subset of processes
        with _quiet_absl() if read_only else contextlib.nullcontext():
            opts = ocp.CheckpointManagerOptions(
                max_to_keep=max_to_keep,
                create=False,
                enable_async_checkpointing=False,
                read_only=read_only,
                multiprocessing_options=ocp.options.MultiprocessingOptions(primary_host=me, active_processes={me}),
            )
            self.manager = ocp.CheckpointManager(self.directory, options=opts, item_names=ITEMS)

    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def save(self, step: int, state: dict, meta: dict, replace: bool = False) -> None:
        """state: pytree of arrays; meta: JSON-serialisable dict. ``replace``: a checkpoint of ``step`` already
        saved is deleted first (the earlier steps' stay while the new one is written)."""
        state = jax.tree_util.tree_map(np.asarray, state)
        if replace and step in self.manager.all_steps():
            self.manager.delete(step)
        self.manager.save(
            step, args=ocp.args.Composite(state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)), force=True
        )
        self.manager.wait_until_finished()

    def restore_meta(self, step: int | None = None) -> dict:
        """The JSON ``meta`` of ``step`` (default: the latest complete checkpoint)."""
        step = self.latest_step() if step is None else step
        if step is None:
            raise InputError(f"{self.directory}: no complete checkpoint found")
        try:
            return self.manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore())).meta
        except (FileNotFoundError, ValueError, KeyError, TypeError) as e:
            raise InputError(f"{self.directory}/{step}: cannot read checkpoint metadata ({type(e).__name__})") from None

    def restore(self, step: int | None = None, target: dict | None = None) -> tuple[dict, dict]:
        """(state, meta) of ``step`` (default: the latest). ``target`` gives the tree structure/dtypes."""
        step = self.latest_step() if step is None else step
        if step is None:
            raise InputError(f"{self.directory}: no complete checkpoint found")
        try:
            r = self.manager.restore(
                step, args=ocp.args.Composite(state=ocp.args.StandardRestore(target), meta=ocp.args.JsonRestore())
            )
        except (FileNotFoundError, ValueError, KeyError, TypeError) as e:
            raise InputError(
                f"{self.directory}/{step}: cannot restore checkpoint ({type(e).__name__}: "
                f"{str(e).splitlines()[0] if str(e) else ''})"
            ) from None
        return r.state, r.meta


def state_tree(state: TrainState, stats: Stats) -> dict:
    """What a checkpoint holds, on the host: the training state with its weights, the optimizer's moments
    and the weights' moving average (when there is one) per net, the optimizer's small weights unpacked
    (the layout of every jaxmd_dp version's checkpoints), and the statistics."""
    from jaxmd_dp.train.small_leaves import unpack_state  # the training step's modules: only when training
    from jaxmd_dp.train.step import weights

    host = jax.tree_util.tree_map(np.asarray, state)
    opt_state = map_weight_trees(weights, unpack_state(host.opt_state, host.params), host.params)
    per_net = host._replace(params=weights(host.params), opt_state=opt_state, ema=weights(host.ema))
    tree = {**per_net._asdict(), "stats": stats._asdict()}
    if tree["ema"] is None:
        del tree["ema"]
    return tree


def weights_tree(step: int, params, stats: Stats) -> dict:
    """A checkpoint of weights alone (the EMA checkpoints): what ``test`` and ``freeze`` read."""
    return {"step": np.asarray(step), "params": params, "stats": stats._asdict()}


def restore_state(
    ckpt: Checkpointer, meta: dict, hyper: ModelHyper, optimizer, ema: bool = False
) -> tuple[TrainState, Stats]:
    """The training state and statistics of the checkpoint whose ``meta`` is given, on the device, for
    ``optimizer``; ``ema``: with the weights' moving average, the checkpoint's (a copy of its weights if it
    has none)."""
    from jaxmd_dp.train.small_leaves import pack_state, unpack_state
    from jaxmd_dp.train.step import TrainState, host_state, weights

    if meta.get("weights_only"):
        raise InputError(
            f"{ckpt.directory}: holds the weights' moving average alone, no training state to continue from "
            "(start a new training from it with --init-model)"
        )
    saved_ema = bool(meta.get("ema"))
    # the restore target: host zeros of the state's shapes (nothing drawn, nothing compiled)
    start = host_state(param_shapes(hyper), optimizer, saved_ema)  # the weights held as in training
    held = start.params
    inner = unpack_state(start.opt_state, held)
    target = {
        **start._replace(
            params=weights(held), opt_state=map_weight_trees(weights, inner, held), ema=weights(start.ema)
        )._asdict(),
        "stats": default_stats(hyper)._asdict(),
    }
    if not saved_ema:
        del target["ema"]
    tree, _ = ckpt.restore(int(meta["step"]), target=target)
    tree["opt_state"] = pack_state(map_weight_trees(to_stacked, tree["opt_state"], target["params"]), start.opt_state)
    tree["params"] = to_stacked(tree["params"])
    if not ema:
        tree.pop("ema", None)
    elif "ema" not in tree:
        tree["ema"] = jax.tree_util.tree_map(np.array, tree["params"])
    else:
        tree["ema"] = to_stacked(tree["ema"])
    tree = jax.device_put(tree)  # jnp.asarray compiled one small program per array shape
    stats = Stats(**tree.pop("stats"))
    return TrainState(**tree), stats


@contextlib.contextmanager
def _quiet_absl():
    """Silence orbax's absl warnings about read-only managers (noise in ``test``/``freeze`` output)."""
    logger = logging.getLogger("absl")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def checkpoint_steps(directory: str | Path) -> list[int]:
    """The steps of the complete checkpoints in ``directory``, ascending (orbax names each by its step;
    an incomplete one carries a suffix); [] when there are none or no such directory."""
    directory = Path(directory)
    return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit()) if directory.is_dir() else []


def find_checkpoint_dir(path: str | Path) -> Path:
    """A checkpoint directory from what a user may pass: the run's output directory (reads its
    ``out.json`` for ``save_ckpt``, default ``model.ckpt``) or the checkpoint directory itself."""
    path = Path(path)
    if not path.is_dir():
        raise InputError(f"{path}: no such checkpoint directory")
    if checkpoint_steps(path):
        return path
    out = path / "out.json"
    name = "model.ckpt"
    if out.exists():
        import json

        try:
            name = json.loads(out.read_text())["training"]["save_ckpt"]
        except (ValueError, KeyError):
            pass
    if (path / name).is_dir():
        return path / name
    raise InputError(f"{path}: neither a checkpoint directory nor a training output directory with {name}/")


def load_model_from_checkpoint(path: str | Path):
    """(hyper, params, stats) of the latest checkpoint under ``path`` (see :func:`find_checkpoint_dir`)."""
    ckpt = Checkpointer(find_checkpoint_dir(path), max_to_keep=None, read_only=True)
    state, meta = ckpt.restore()
    try:
        hyper = ModelHyper.from_dict(meta["hyper"])
        params = jax.tree_util.tree_map(np.asarray, state["params"])
        stats = Stats(*(np.asarray(state["stats"][k]) for k in Stats._fields))
    except (KeyError, TypeError) as e:
        raise InputError(f"{path}: checkpoint lacks {e} (not a jaxmd_dp training checkpoint?)") from None
    return hyper, params, stats


def load_trained(path: str | Path):
    """(hyper, params, stats) of any trained model: a frozen model file or model directory
    (:func:`jaxmd_dp.model.io.load_model`), else the latest checkpoint of a training output or
    checkpoint directory."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"{p}: no such model, checkpoint or training output directory")
    if p.is_file() or is_model_dir(p):
        return load_model(p)
    return load_model_from_checkpoint(p)
