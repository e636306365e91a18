"""Fine-tuning (``--finetune MODEL``) and the energy bias changed after training, as DeePMD-kit 3.x's PyTorch
trainer does them (``deepmd/pt/entrypoints/main.py`` ``train``, ``deepmd/utils/finetune.py``,
``deepmd/pt/train/training.py``).

A fine-tuning run starts from a trained model (one of ours, a checkpoint or training output, or DeePMD-kit's
``.dp``/``.yaml``):

1. the config's ``model.descriptor`` and ``model.fitting_net`` are replaced by the pretrained model's
   (DeePMD-kit's ``--use-pretrain-script``), their ``seed`` and the descriptor's ``set_davg_zero`` kept;
   ``model.type_map`` stays the config's (:func:`finetune_config`);
2. the pretrained model moves onto that type map (:mod:`jaxmd_dp.model.type_map`): kept types keep their
   weights and statistics, dropped ones go, new ones get fresh nets and the statistics of the training data;
   a new type's se_e2_a ``sel`` entry is the config's (``auto``: from the data) (:func:`finetune_hyper`);
3. the energy bias is changed on the statistics' frames of the training data (``data_stat_nbatch`` batches
   per system), DeePMD-kit's "change-by-statistic" (:mod:`jaxmd_dp.model.bias`) (:func:`finetune_weights`).

The run then starts at step 0 with the config's learning rate and a fresh optimizer state.

``training.change_bias_after_training``: once the last step is done, the bias is changed the same way on the
same frames and the last checkpoint saved again (:func:`bias_after_training`).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np

from jaxmd_dp.config import Config, config_from_dict
from jaxmd_dp.errors import InputError
from jaxmd_dp.geometry.stats import sample_stat_frames
from jaxmd_dp.model.bias import change_energy_bias
from jaxmd_dp.model.energy import ModelHyper, Stats
from jaxmd_dp.model.type_map import change_type_map, changed_hyper, type_index
from jaxmd_dp.train import setup
from jaxmd_dp.train.checkpoint import load_trained

__all__ = [
    "Pretrained",
    "bias_after_training",
    "finetune_config",
    "finetune_hyper",
    "finetune_weights",
    "load_pretrained",
]


class Pretrained(NamedTuple):
    """The model a fine-tuning starts from: hyper-parameters, weights, statistics; ``path`` for messages."""

    hyper: ModelHyper
    params: dict
    stats: Stats
    path: str


def load_pretrained(path: str | Path) -> Pretrained:
    """The model of ``--finetune``: a model file or directory, DeePMD-kit's ``.dp``/``.yaml``, or a checkpoint or
    training output directory (:func:`~jaxmd_dp.train.checkpoint.load_trained`)."""
    try:
        hyper, params, stats = load_trained(path)
    except InputError as e:
        raise InputError(f"--finetune: {e}") from None
    return Pretrained(hyper, params, Stats(*stats), str(path))


def descriptor_section(hyper: ModelHyper) -> dict:
    """The config's ``model.descriptor`` section that builds ``hyper``'s descriptor (DeePMD-kit's keys)."""
    d = hyper.descriptor.to_dict()
    section = {"type": d.pop("descriptor"), "activation_function": d.pop("activation"), **d}
    if section["type"] == "se_atten_v2":  # fixed by the type
        section.pop("tebd_input_mode", None)
        section.pop("smooth_type_embedding", None)
    return section


def fitting_section(hyper: ModelHyper) -> dict:
    """The config's ``model.fitting_net`` section of ``hyper``'s fitting net."""
    f = {k.removeprefix("fit_"): v for k, v in hyper.fitting.to_dict().items()}
    return {"type": "ener", "activation_function": f.pop("activation"), **f}


def _new_type_sel(config: Config, pretrained: ModelHyper) -> dict[str, int] | None:
    """se_e2_a: the config's ``sel`` entries of the types the pretrained model lacks; None when the config's
    sel is ``auto`` (resolved from the data by :func:`finetune_hyper`)."""
    sel = config.model.descriptor.sel
    new = [t for t in config.model.type_map if t not in pretrained.type_map]
    if isinstance(sel, str):
        return None if new else {}
    return {t: int(s) for t, s in zip(config.model.type_map, sel) if t in new}


def finetune_config(config: Config, pretrained: Pretrained, log=print) -> Config:
    """``config`` with its descriptor and fitting net replaced by the pretrained model's on the config's
    ``type_map`` (per-type entries moved: :func:`~jaxmd_dp.model.type_map.changed_hyper`); the descriptor's
    ``seed`` (and ``set_davg_zero`` when the descriptor type is the same) and the fitting net's ``seed`` kept.
    The differences from the config are logged; se_e2_a's sel stays "auto" when a new type's is to come from
    the data."""
    model = config.model
    pre = pretrained.hyper
    index = type_index(pre.type_map, model.type_map)
    kept = [t for t, o in zip(model.type_map, index) if o is not None]
    dropped = [t for t in pre.type_map if t not in model.type_map]
    new = [t for t, o in zip(model.type_map, index) if o is None]
    if not kept:
        raise InputError(
            f"--finetune {pretrained.path}: model.type_map {list(model.type_map)} shares no type with the "
            f"pretrained model's {list(pre.type_map)}"
        )
    new_sel = {} if pre.descriptor.mixed_types else _new_type_sel(config, pre)
    if new_sel is None:  # se_e2_a with sel "auto": the kept types' entries are known, the new ones not yet
        desc = descriptor_section(pre)
        desc["sel"] = model.descriptor.sel
    else:
        desc = descriptor_section(changed_hyper(pre, model.type_map, new_sel))
    old_desc = model.descriptor.to_dict()
    desc["seed"] = old_desc.get("seed")
    if old_desc["type"] == desc["type"]:
        desc["set_davg_zero"] = old_desc["set_davg_zero"]
    fit = {**fitting_section(pre), "seed": model.fitting_net.seed}
    d = config.to_dict()
    changed = _differences("model.descriptor", old_desc, desc) + _differences(
        "model.fitting_net", d["model"]["fitting_net"], fit
    )
    d["model"]["descriptor"], d["model"]["fitting_net"] = desc, fit
    try:
        out = config_from_dict(d)
    except InputError as e:
        raise InputError(f"--finetune {pretrained.path}: the pretrained model's {e}") from None
    log(
        f"fine-tuning {pretrained.path} ({pre.descriptor.type_name}, type_map {list(pre.type_map)}) on type_map "
        f"{list(model.type_map)}: kept {kept}, new {new}, dropped {dropped}"
    )
    if changed:
        log("the config's model is replaced by the pretrained model's: " + "; ".join(changed))
    return out


def _differences(path: str, ours: dict, theirs: dict) -> list[str]:
    """The keys whose values differ (precision "default" is float64); another descriptor type in one item."""
    if ours.get("type") != theirs.get("type"):
        return [f"{path}: {ours.get('type')} → {theirs.get('type')} (the pretrained model's)"]

    def value(d, k):
        return "float64" if k == "precision" and d.get(k) == "default" else d.get(k)

    skip = {"seed", "set_davg_zero", "sel"}
    keys = [k for k in {**ours, **theirs} if k not in skip and value(ours, k) != value(theirs, k)]
    return [f"{path}.{k}: {ours.get(k)!r} → {theirs.get(k)!r}" for k in keys]


def new_types(config: Config, pretrained: Pretrained) -> list[str]:
    """The config's types the pretrained model lacks."""
    return [t for t in config.model.type_map if t not in pretrained.hyper.type_map]


def finetune_hyper(config: Config, pretrained: Pretrained, scan, ntrain: int, log=print) -> ModelHyper:
    """The fine-tuned model's hyper-parameters: the pretrained model's on the config's type map (``config`` from
    :func:`finetune_config`). A new type's se_e2_a ``sel`` entry is the config's, or with ``sel: auto`` its
    largest neighbour count in the first ``ntrain`` systems of the neighbour ``scan`` × the factor, rounded up to
    a multiple of 4 (:func:`~jaxmd_dp.train.setup.resolve_sel`)."""
    pre = pretrained.hyper
    type_map = tuple(config.model.type_map)
    new_sel = {} if pre.descriptor.mixed_types else _new_type_sel(config, pre)
    if new_sel is None:
        max_nbor = scan.max_nbor_per_system[:ntrain].max(axis=0)
        index = type_index(pre.type_map, type_map)
        picked = [i for i, o in enumerate(index) if o is None]
        sel = setup.resolve_sel(config.model.descriptor.sel, max_nbor[picked], pre.rcut, log)
        new_sel = {type_map[i]: s for i, s in zip(picked, sel)}
    hyper = changed_hyper(pre, type_map, new_sel)
    ours = ModelHyper.from_config(config.model, sel=hyper.sel if isinstance(config.model.descriptor.sel, str) else None)
    if ours != hyper:  # finetune_config built the config from the same hyper-parameters
        raise AssertionError(f"fine-tuned model {hyper} differs from its config's {ours}")
    return hyper


def finetune_weights(
    config: Config,
    pretrained: Pretrained,
    hyper: ModelHyper,
    data,
    seed: int,
    scan=None,
    log=print,
) -> tuple[dict, Stats]:
    """The fine-tuning's first weights and statistics: the pretrained model's moved onto ``hyper``
    (:func:`~jaxmd_dp.model.type_map.change_type_map`; new types' nets drawn as a new run's, their statistics
    from ``data``, the training sampler), then the energy bias changed on the statistics' frames of ``data``
    ("change-by-statistic"). Host arrays."""
    fresh_params = fresh_stats = None
    if new_types(config, pretrained):
        fresh_stats = setup.compute_stats(
            data,
            hyper,
            config.model.data_stat_nbatch,
            config.model.data_stat_protect,
            seed,
            scan,
            config.model.descriptor.set_davg_zero,
        )
        fresh_params = setup.fresh_params(config, hyper, seed)
    p = pretrained
    params, stats, notes = change_type_map(
        p.hyper, p.params, p.stats, hyper, fresh_params, fresh_stats, setup.init_seed(config, seed)
    )
    for note in notes:
        log(f"warning: {note}")
    frames = sample_stat_frames(data, config.model.data_stat_nbatch, seed)
    return params, _changed(hyper, params, stats, frames, "change", log)


def _changed(hyper: ModelHyper, params, stats: Stats, frames, mode: str, log) -> Stats:
    try:
        change = change_energy_bias(hyper, params, stats, frames, mode)
    except ValueError as e:
        raise InputError(f"training.training_data: {e}") from None
    names = list(hyper.type_map)
    log(
        f"energy bias per type (eV) changed from {dict(zip(names, np.round(change.old, 4).tolist()))} to "
        f"{dict(zip(names, np.round(change.new, 4).tolist()))}; RMSE of the energy per atom after the "
        f"regression {change.rmse_per_atom:.4g} eV"
    )
    return Stats(stats.davg, stats.dstd, change.new)


def bias_after_training(config: Config, hyper: ModelHyper, params, stats: Stats, data, seed: int, log=print) -> Stats:
    """``training.change_bias_after_training``: the statistics with the energy bias changed
    ("change-by-statistic") on the statistics' frames of ``data`` (the training sampler), as a new run's
    statistics sample them with ``seed``."""
    frames = sample_stat_frames(data, config.model.data_stat_nbatch, seed)
    host = Stats(*(np.asarray(s) for s in stats))
    return _changed(hyper, params, host, frames, "change", log)


def check_options(finetune, restart, init_model) -> None:
    """``--finetune`` starts a new run: not with ``--restart`` or ``--init-model``."""
    if finetune is not None and (restart is not None or init_model is not None):
        raise InputError("--finetune: give only one of --finetune, --init-model, --init-frz-model, --restart")
