"""The ``training`` section and its ``training_data`` / ``validation_data``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jaxmd_dp.config.checks import (
    KERNELS,
    auto_prob_style,
    batch_size_rule,
    boolean,
    choice,
    instance_of,
    integer,
    interval,
    list_of,
    nonneg_float,
    nonneg_int,
    number,
    optional,
    pos_float,
    pos_int,
    steps_rule,
    system_paths,
    table_nodes,
    text,
)
from jaxmd_dp.config.fixed import not_ours, only, unsupported
from jaxmd_dp.config.section import Section, entry, key_error
from jaxmd_dp.errors import InputError


def _check_per_system(path: str, systems: tuple[str, ...] | str, key: str, value: Any) -> None:
    if isinstance(systems, tuple) and isinstance(value, tuple) and len(value) != len(systems):
        raise key_error(f"{path}.{key}", f"has {len(value)} entries but {path}.systems lists {len(systems)} systems")


class _DataSection(Section):
    _aliases = {"auto_prob_style": "auto_prob", "sys_weights": "sys_probs"}

    def _check(self) -> None:
        _check_per_system(self._path, self.systems, "batch_size", self.batch_size)  # type: ignore[attr-defined]
        _check_per_system(self._path, self.systems, "sys_probs", self.sys_probs)  # type: ignore[attr-defined]


@dataclass(frozen=True, kw_only=True)
class TrainingDataConfig(_DataSection):
    """``training.training_data``.

    systems: one directory (str) or a list of them (tuple of str), each a DeePMD-kit npy system or a directory
        searched for systems (DeePMD-kit's ``process_systems``); relative paths are resolved against the config
        file's directory.
    batch_size: int, tuple of ints (one per system), "auto" / "auto:N" (smallest bs with bs * natoms >= N,
        N = 32) or "max:N".
    auto_prob: how systems are drawn: "prob_sys_size", "prob_uniform" or "prob_sys_size;stt:end:weight;...".
    sys_probs: explicit per-system weights (win over auto_prob) or None.
    set_prefix: prefix of the frame-set directories, "set" -> set.000, set.001, ... (DeePMD-kit 2.x's
        meaning; DeePMD-kit 3.x drops the key and always reads set.*).
    rglob_patterns: ``Path.rglob`` patterns that find the systems under each ``systems`` directory
        (DeePMD-kit's ``rglob_sys_str``), or None (every directory holding type.raw).
    min_pair_dist: frames with two atoms closer than this (Å) are left out of the training data, counted
        per system in the DataSystem summary; 0 = off (:mod:`jaxmd_dp.data.load`).
    """

    _path = "training.training_data"

    systems: tuple[str, ...] | str = entry(system_paths)
    batch_size: int | tuple[int, ...] | str = entry(batch_size_rule, "auto")
    auto_prob: str = entry(auto_prob_style, "prob_sys_size")
    sys_probs: tuple[float, ...] | None = entry(optional(list_of(number, "numbers")), None)
    set_prefix: str = entry(text, "set")
    rglob_patterns: tuple[str, ...] | None = entry(optional(list_of(text, "glob patterns")), None)
    min_pair_dist: float = entry(nonneg_float, 0.0)


@dataclass(frozen=True, kw_only=True)
class ValidationDataConfig(_DataSection):
    """``training.validation_data``: like :class:`TrainingDataConfig` (no min_pair_dist: DeePMD-kit filters
    training frames only); numb_btch batches are drawn per display."""

    _path = "training.validation_data"
    _aliases = {**_DataSection._aliases, "numb_batch": "numb_btch"}

    systems: tuple[str, ...] | str = entry(system_paths)
    batch_size: int | tuple[int, ...] | str = entry(batch_size_rule, "auto")
    numb_btch: int = entry(pos_int, 1)
    auto_prob: str = entry(auto_prob_style, "prob_sys_size")
    sys_probs: tuple[float, ...] | None = entry(optional(list_of(number, "numbers")), None)
    set_prefix: str = entry(text, "set")
    rglob_patterns: tuple[str, ...] | None = entry(optional(list_of(text, "glob patterns")), None)


@dataclass(frozen=True, kw_only=True)
class TrainingConfig(Section):
    """``training``: data, length, seeds and outputs.

    numb_steps: optimiser steps (>= 0); or numb_epoch (> 0, not both): numb_steps = ⌈numb_epoch ·
    max_i(nbatch_i / p_i)⌉ over the training systems (batches per epoch, drawing probability), as DeePMD-kit.
    seed: data-sampling seed or None.
    disp_file / disp_freq: learning-curve file and period (steps).  save_ckpt / save_freq / max_ckpt_keep:
    checkpoint prefix, period and how many to keep.  tensorboard*: TensorBoard output.
    disp_training: false shows no training progress (no loss lines, no validation, no lcurve lines), as
    DeePMD-kit.  time_training: false prints no wall-time lines and no average time per step.
    enable_profiler: a ``jax.profiler`` trace of a few steps into tensorboard_log_dir (as ``--profile``).
    change_bias_after_training: after the last step, the energy bias is changed on the statistics' frames of
    the training data (DeePMD-kit's "change-by-statistic") and the last checkpoint saved again with it.
    strict_sel (jaxmd_dp): error, instead of a warning, when an atom has more neighbours than sel.
    kernels (jaxmd_dp): "auto" (Pallas on GPU, jnp elsewhere), "pallas" or "jnp".
    pair_packing (jaxmd_dp): run the embedding nets on real neighbour pairs only when the data leaves
    enough sel slots empty, and hold only the neighbour slots the data fills (same results;
    :mod:`jaxmd_dp.model.fast.pair_pack`); for se_atten (v2) also run a frame's atoms in tiers of fewer slots
    by their neighbour count (:func:`jaxmd_dp.model.plan.tier_sizes`); false: on every slot.
    pair_sharing (jaxmd_dp): with pair_packing, run the embedding nets once per pair of same-type atoms,
    whose two slots hold the same s (:mod:`jaxmd_dp.geometry.pair_partner`; same results to rounding);
    applies with type_one_side, DeePMD's per-type statistics, no atom over sel and batches small enough for
    its partner search (else it is off, logged).
    gradient_max_norm: the gradients scaled down to this global (L2) norm when it is above it, before the
    optimizer (DeePMD-kit's PyTorch ``clip_grad_norm_``); None or 0: no clipping.
    enable_ema / ema_decay / ema_ckpt_keep: an exponential moving average of the weights, ema ← ema +
    (1 − ema_decay)(w − ema) after every step (DeePMD-kit's), kept in the checkpoints (restarts exactly)
    and saved as weights alone in ``<save_ckpt stem>_ema<suffix>`` (``model_ema.ckpt``; ema_ckpt_keep of
    them, None: max_ckpt_keep), the directory test and freeze read for the averaged model.
    keep_best (jaxmd_dp): keep the checkpoint of the lowest validation loss in ``<save_ckpt>/best``.
    early_stop (jaxmd_dp): stop when that many learning-curve lines in a row bring no lower validation
    loss (0: off). Both judge the validation loss computed with the prefactors of the run's last step.
    embedding_table (jaxmd_dp): 0 (default) runs the embedding nets on every pair; N from 16 to 1024 trains
    with them tabulated on N nodes per step (DeePMD-kit's model compression, used while training; quintic
    interpolation; the trained model is exact; :mod:`jaxmd_dp.model.fast.embed_table`). 64 is a good value:
    the step's cost grows with N, the interpolation error falls as N⁻⁶.
    neighbor_cache_mb (jaxmd_dp): device memory (MiB) for the training frames and their neighbour lists,
    the frames copied to the device once, each list built the first time its frame is drawn and kept
    across epochs, for at most numb_steps × batch size frames (:mod:`jaxmd_dp.train.neighbor_cache`; same
    results), and as much again for the validation frames of merged batches (other validation batches have
    their lists built in the evaluation step); 0: batches copied from the host and their lists built in
    every step.
    steps_per_dispatch (jaxmd_dp): K > 1 runs up to K training steps per call of the compiled step (a loop
    on the device), where the batches are alike and kept on the device; a chunk ends at each learning-curve
    line and checkpoint (:mod:`jaxmd_dp.train.multi_step`; the same results). One worker per process (alone
    or MPI ranks; not a device mesh). "auto": 10 with one worker per process, else 1.
    merge_batches (jaxmd_dp): when the systems give batches of several shapes (atom counts × batch sizes),
    lay each batch's frames end to end in one padded list of atoms, so the training and evaluation steps
    compile once instead of once per shape (:mod:`jaxmd_dp.train.merge`; same results); false: one
    compile per shape, no padding.
    """

    _path = "training"
    _aliases = {"stop_batch": "numb_steps", "num_step": "numb_steps", "num_steps": "numb_steps",
                "numb_step": "numb_steps", "num_epochs": "numb_epoch", "num_epoch": "numb_epoch",
                "numb_epochs": "numb_epoch"}  # fmt: skip
    _fixed = {
        "acc_freq": only(1),
        "mixed_precision": unsupported("mixed_precision (use model precision keys)"),
        "profiling": not_ours(False, "profiling (a PyTorch Chrome trace; training.enable_profiler writes a jax one)"),
        "profiling_file": not_ours("timeline.json", "profiling_file (the PyTorch Chrome trace of profiling)"),
        "stat_file": not_ours(None, "stat_file (statistics saved to and read from a file)"),
        "stat_file_mode": not_ours("update", "stat_file_mode (statistics saved to and read from a file)"),
        "save_dir": not_ours(None, "save_dir (checkpoints go into the output directory)"),
        "ckpt_keep_ratio": not_ours(None, "ckpt_keep_ratio (use training.max_ckpt_keep)"),
        "disp_avg": not_ours(False, "disp_avg (the training loss averaged over disp_freq steps)"),
        "zero_stage": not_ours(0, "zero_stage (ZeRO/FSDP sharding)"),
        "neighbor_graph_method": not_ours("auto", "neighbor_graph_method (DeePMD-kit's neighbour graphs)"),
        "enable_compile": not_ours(False, "enable_compile (torch.compile; jaxmd_dp always compiles with XLA)"),
        "enable_tf32": not_ours(False, "enable_tf32 (TF32 matmuls)"),
        "numb_test": not_ours(1, "numb_test (DeePMD-kit 1.x; use training.validation_data.numb_btch)"),
    }
    _forbidden = {
        "systems": "DeePMD-kit v1 layout; put it in training.training_data.systems",
        "batch_size": "DeePMD-kit v1 layout; put it in training.training_data.batch_size",
    }

    training_data: TrainingDataConfig = entry(instance_of(TrainingDataConfig), section=TrainingDataConfig)
    validation_data: ValidationDataConfig | None = entry(
        optional(instance_of(ValidationDataConfig)), None, section=ValidationDataConfig, nullable=True
    )
    numb_steps: int | None = entry(optional(nonneg_int), None)
    numb_epoch: float | None = entry(optional(pos_float), None)
    seed: int | None = entry(optional(integer), None)
    disp_file: str = entry(text, "lcurve.out")
    disp_freq: int = entry(pos_int, 1000)
    save_freq: int = entry(pos_int, 1000)
    save_ckpt: str = entry(text, "model.ckpt")
    max_ckpt_keep: int = entry(pos_int, 5)
    disp_training: bool = entry(boolean, True)
    time_training: bool = entry(boolean, True)
    enable_profiler: bool = entry(boolean, False)
    change_bias_after_training: bool = entry(boolean, False)
    tensorboard: bool = entry(boolean, False)
    tensorboard_log_dir: str = entry(text, "log")
    tensorboard_freq: int = entry(pos_int, 1)
    strict_sel: bool = entry(boolean, False)
    kernels: str = entry(choice(KERNELS), "auto")
    pair_packing: bool = entry(boolean, True)
    pair_sharing: bool = entry(boolean, True)
    embedding_table: int = entry(table_nodes, 0)
    neighbor_cache_mb: int = entry(nonneg_int, 2048)
    merge_batches: bool = entry(boolean, True)
    gradient_max_norm: float | None = entry(optional(nonneg_float), None)
    enable_ema: bool = entry(boolean, False)
    ema_decay: float = entry(interval(0.0, 1.0), 0.999)
    ema_ckpt_keep: int | None = entry(optional(pos_int), None)
    keep_best: bool = entry(boolean, False)
    early_stop: int = entry(nonneg_int, 0)
    steps_per_dispatch: int | str = entry(steps_rule, "auto")

    def _check(self) -> None:
        if self.numb_steps is not None and self.numb_epoch is not None:
            raise key_error("training.numb_epoch", "give numb_steps or numb_epoch, not both")
        if self.numb_steps is None and self.numb_epoch is None:
            raise InputError("config key 'training.numb_steps' is required but missing (or give training.numb_epoch)")
        for key in ("keep_best", "early_stop"):
            if getattr(self, key) and (self.validation_data is None or not self.disp_training):
                raise key_error(f"training.{key}", "needs validation (training.validation_data and disp_training)")
