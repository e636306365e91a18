"""Setting up a training run, step by step (the :class:`~jaxmd_dp.train.loop.Trainer` calls them in this order):

1. :func:`load_data`: the training and validation data systems;
2. :func:`open_restart`, :func:`run_seed`: the checkpoint a ``--restart`` continues, and the run's seed
   (:func:`restart_hyper`: its model, which the config's must be);
3. :func:`scan_neighbors`, :func:`fresh_hyper` (``sel: auto`` resolved by :func:`resolve_sel`),
   :func:`check_min_distance`: one pass over every frame, a new run's model hyper-parameters, the data check;
4. :func:`make_samplers`: the batches each worker draws, and the validation sampler (:func:`restore_samplers`
   for a restart);
5. a new run's statistics and weights: :func:`logged_stats` (DeePMD-kit's, :func:`compute_stats`) and
   :func:`fresh_params` (:func:`init_seed`), or :func:`init_model_weights` (``--init-model``); a restart
   restores both from its checkpoint (:func:`~jaxmd_dp.train.checkpoint.restore_state`);
6. :func:`jaxmd_dp.train.layouts.plan_layouts`: the steps' layouts.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from jaxmd_dp.config import Config
from jaxmd_dp.data.load import load_systems, min_pair_distance
from jaxmd_dp.data.sampler import DataSampler, resolve_batch_sizes
from jaxmd_dp.data.system import System
from jaxmd_dp.errors import InputError
from jaxmd_dp.geometry.neighbor_stat import suggest_sel
from jaxmd_dp.geometry.stats import sample_stat_frames, sample_stat_indices
from jaxmd_dp.model.energy import ModelHyper, Stats, init_params, stats_from_data
from jaxmd_dp.model.hyper import descriptor_class
from jaxmd_dp.train.checkpoint import Checkpointer, find_checkpoint_dir, load_trained
from jaxmd_dp.train.parallel import WorkerBatches, Workers, worker_seed

if TYPE_CHECKING:
    from jaxmd_dp.geometry.neighbor_stat import NeighborStats


# ------------------------------------------------------------------------------------------------ 1. data
def load_data(config: Config) -> tuple[list[System], list[System]]:
    """(training systems, validation systems: [] without ``training.validation_data``), each found and read
    as its section says (systems, rglob_patterns, set_prefix; training frames closer than min_pair_dist
    left out: :mod:`jaxmd_dp.data.load`)."""
    tc = config.training
    type_map = list(config.model.type_map)
    td, vd = tc.training_data, tc.validation_data
    train = load_systems(
        td.systems,
        type_map,
        set_prefix=td.set_prefix,
        rglob_patterns=td.rglob_patterns,
        min_pair_dist=td.min_pair_dist,
        key="training.training_data",
    )
    if vd is None:
        return train, []
    return train, load_systems(
        vd.systems, type_map, set_prefix=vd.set_prefix, rglob_patterns=vd.rglob_patterns, key="training.validation_data"
    )


# ------------------------------------------------------------------------------------------------ 2. restart, seed
def open_restart(restart: str | Path | None) -> tuple[Checkpointer | None, dict | None]:
    """The checkpoint a ``--restart`` continues (a checkpoint or output directory) and its JSON meta;
    (None, None) for a new run."""
    if restart is None:
        return None, None
    ckpt = Checkpointer(find_checkpoint_dir(restart), None, read_only=True)
    return ckpt, ckpt.restore_meta()


def run_seed(seed: int | None, ckpt_meta: dict | None) -> int:
    """``training.seed``, else the restarted run's, else a fresh random one."""
    if seed is not None:
        return seed
    return ckpt_meta["seed"] if ckpt_meta else int(np.random.SeedSequence().entropy % 2**31)


def init_seed(config: Config, seed: int) -> int:
    """The seed of a fresh run's weights: ``model.descriptor.seed``, else the run's ``seed``."""
    d = config.model.descriptor.seed
    return int(d) if d is not None else seed


# ------------------------------------------------------------------------------------------------ 3. scan, sel, hyper
def stat_frames(config: Config, train_systems: list[System], seed: int) -> list:
    """The frames :func:`compute_stats` will sample (their env-matrix sums come from the neighbour scan)."""
    sizes = resolve_batch_sizes(config.training.training_data.batch_size, [s.natoms for s in train_systems])
    return sample_stat_indices([s.nframes for s in train_systems], sizes, config.model.data_stat_nbatch, seed)


def scan_neighbors(
    systems: list[System],
    rcut: float,
    ntypes: int,
    log=print,
    rcut_smth: float | None = None,
    sum_frames: list | None = None,
) -> NeighborStats:
    """One pass over every frame of ``systems`` (training and validation): neighbours within ``rcut``
    per system (for ``sel: auto``), closest pairs (data check), pairs per frame (pair packing) and, with
    ``rcut_smth`` and ``sum_frames`` (the statistics' frames of the first systems), their
    environment-matrix sums (:func:`compute_stats`)."""
    from jaxmd_dp.geometry.neighbor_stat import neighbor_stat

    t = time.perf_counter()
    scan = neighbor_stat(systems, rcut, ntypes, rcut_smth=rcut_smth, sum_frames=sum_frames)
    log(f"neighbour scan of {scan.nframes} frames in {time.perf_counter() - t:.1f} s")
    return scan


def resolve_sel(sel, max_nbor, hyper_rcut: float, log=print) -> tuple[int, ...]:
    """``sel`` as given (one number: one section), or for "auto"/"auto:f" the largest neighbour count per
    section in the data (``max_nbor``, (ntypes,) per type, or (1,) of any type, from the neighbour scan) × f
    (default 1.1), truncated and rounded up to a multiple of 4 — DeePMD-kit's rule
    (:func:`~jaxmd_dp.geometry.neighbor_stat.suggest_sel`)."""
    if not isinstance(sel, str):
        return tuple(int(s) for s in np.atleast_1d(sel))  # one number: a list of one section (mixed types)
    factor = float(sel.split(":")[1]) if ":" in sel else 1.1
    nmax = np.asarray(max_nbor)
    out = tuple(suggest_sel(nmax, factor))
    log(f"sel {sel!r}: max neighbours per type {nmax.tolist()} within rcut {hyper_rcut} Å → sel {list(out)}")
    return out


def restart_hyper(config: Config, ckpt_meta: dict, restart) -> ModelHyper:
    """The restarted checkpoint's model hyper-parameters; an :class:`InputError` when the config's differ
    (its ``sel: auto`` taken as the checkpoint's)."""
    hyper = ModelHyper.from_dict(ckpt_meta["hyper"])
    auto = isinstance(config.model.descriptor.sel, str)  # "auto": the checkpoint's resolved sel
    ours = ModelHyper.from_config(config.model, sel=hyper.sel if auto else None)
    if ours != hyper:
        diff = _differences(ours, hyper)
        raise InputError(
            f"--restart {restart}: the checkpoint's model differs from the config's ({diff}); "
            "use --init-model to start a new training from it"
        )
    return hyper


def fresh_hyper(config: Config, scan: NeighborStats, ntrain: int, log=print) -> ModelHyper:
    """A new run's model hyper-parameters: the config's, ``sel: auto`` resolved on the first ``ntrain``
    systems of the ``scan`` (the training systems): neighbours of each type, or of any type for a descriptor
    of mixed types."""
    mixed = descriptor_class(config.model.descriptor.type).mixed_types
    max_nbor = (scan.max_nbor_any_per_system if mixed else scan.max_nbor_per_system)[:ntrain].max(axis=0)
    sel = resolve_sel(config.model.descriptor.sel, max_nbor, config.model.descriptor.rcut, log)
    return ModelHyper.from_config(config.model, sel=tuple(sel))


def check_sel_entries(sel_cfg, hyper: ModelHyper) -> None:
    """A given list ``sel`` has one entry per section of the neighbour list (per type)."""
    if isinstance(sel_cfg, (list, tuple)) and len(sel_cfg) != len(hyper.sel):
        raise InputError(f"model.descriptor.sel has {len(sel_cfg)} entries for {hyper.ntypes} types")


def check_min_distance(systems: list[System], min_dist: np.ndarray, rmin: float = 0.1) -> None:
    """Stop with the system and frame when two atoms are closer than ``rmin`` Å (broken data);
    ``min_dist`` (nsystems,): each system's closest pair from the neighbour scan."""
    for s, d in zip(systems, min_dist):
        if d < rmin:
            frame = int(np.argmax(min_pair_distance(s.coord, s.box) < rmin))
            raise InputError(f"{s.path}: frame {frame} has two atoms closer than {rmin} Å")


def _differences(a: ModelHyper, b: ModelHyper) -> str:
    da, db = a.to_dict(), b.to_dict()
    return ", ".join(
        f"{k}: config {da.get(k)} vs checkpoint {db.get(k)}" for k in {**da, **db} if da.get(k) != db.get(k)
    )


# ------------------------------------------------------------------------------------------------ 4. samplers
def make_samplers(
    config: Config, train_systems: list[System], valid_systems: list[System], seed: int, workers: Workers
) -> tuple[WorkerBatches, DataSampler | None]:
    """[data parallel] The training batches, each worker drawing its own (seed offset by its worker index),
    and the validation sampler (None without validation data)."""
    tc = config.training
    td, vd = tc.training_data, tc.validation_data
    batches = workers.batches(
        lambda w: DataSampler(train_systems, td.batch_size, td.auto_prob, td.sys_probs, seed=worker_seed(seed, w)),
        group_seed=seed,
    )
    valid = None
    if vd is not None:
        valid = DataSampler(
            valid_systems, vd.batch_size, vd.auto_prob, vd.sys_probs, seed=worker_seed(seed, workers.worker_ids[0]) + 1
        )
    return batches, valid


def restore_samplers(
    meta: dict, batches: WorkerBatches, valid: DataSampler | None, workers: Workers, seed: int, log=print
) -> None:
    """A restart's samplers where the checkpoint's (``meta``) left off: [data parallel] each worker its own
    state when the worker count is the checkpoint's, else a new sequence of draws from ``seed``."""
    if meta.get("workers", 1) == workers.size:
        batches.load_state(meta, workers.worker_ids)
        if valid is not None and meta.get("valid_sampler"):
            valid.load_state_dict(meta["valid_sampler"])
    else:
        batches.reseed(seed, int(meta["step"]), workers.worker_ids)
        log(
            f"restart with {workers.size} workers (checkpoint had {meta.get('workers')}): "
            "data sampling starts a new sequence"
        )


# ----------------------------------------------------------------------------------------------- 5. statistics, weights
def compute_stats(
    data: DataSampler,
    hyper: ModelHyper,
    nbatch: int,
    protect: float,
    seed: int,
    scan: NeighborStats | None = None,
    set_davg_zero: bool = False,
) -> Stats:
    """DeePMD-kit's statistics on ``nbatch`` sampled batches per training system: env-matrix davg/dstd per
    type, and the per-type energy bias (least squares). With a ``scan`` that summed the sampled frames'
    environment matrices (its systems begin with ``data``'s; :func:`scan_neighbors`), their sums are added
    up from it instead of a second pass over them, unless some sampled system has more neighbours of a type
    than sel (then only the nearest sel count: the second pass does that). ``set_davg_zero``
    (``model.descriptor.set_davg_zero``): davg 0, dstd unchanged (:func:`~jaxmd_dp.geometry.stats.stats_from_sums`)."""
    frames = sample_stat_frames(data, nbatch, seed)
    try:
        return stats_from_data(hyper, frames, protect, scan, set_davg_zero)
    except ValueError as e:
        raise InputError(f"training.training_data: {e}") from None


def logged_stats(
    config: Config, data: DataSampler, hyper: ModelHyper, seed: int, scan: NeighborStats | None, log=print
) -> Stats:
    """:func:`compute_stats` with the config's ``data_stat_nbatch`` and ``data_stat_protect``, its time
    and the energy bias per type logged."""
    t = time.perf_counter()
    stats = compute_stats(
        data,
        hyper,
        config.model.data_stat_nbatch,
        config.model.data_stat_protect,
        seed,
        scan,
        config.model.descriptor.set_davg_zero,
    )
    log(
        f"data statistics in {time.perf_counter() - t:.1f} s; energy bias per type (eV): "
        f"{dict(zip(hyper.type_map, np.round(np.asarray(stats.energy_bias), 4).tolist()))}"
    )
    return stats


def init_model_weights(init_model: str | Path, hyper: ModelHyper, log=print) -> tuple[dict, Stats]:
    """(params, stats) of ``--init-model`` (a model, a checkpoint or an output directory): its model must
    be the config's."""
    hyper0, params, stats = load_trained(init_model)
    if hyper0 != hyper:
        raise InputError(
            f"{init_model}: its model hyper-parameters differ from the config's "
            f"(init-model needs the same descriptor and fitting net)"
        )
    log(f"initialised weights and statistics from {init_model}")
    return params, stats


def fresh_params(config: Config, hyper: ModelHyper, seed: int) -> dict:
    """A new model's weights, drawn from :func:`init_seed` (the fitting nets from ``model.fitting_net.seed``
    when it is set and differs)."""
    return init_params(hyper, init_seed(config, seed), config.model.fitting_net.seed)
