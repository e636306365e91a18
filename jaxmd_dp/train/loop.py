"""The Trainer: one object used by the command line and by notebooks.

    trainer = Trainer(load_config("configs/water.yaml"), output_dir="runs/water")
    trainer.fit()                        # numb_steps from the config (or trainer.fit(200))
    trainer.evaluate("data/water/data_3")

It loads the data systems, resolves ``sel: auto``, computes DeePMD-kit's statistics (or restores them),
builds the jitted step, and writes ``out.json``, ``lcurve.out`` and orbax checkpoints into ``output_dir``.
"""

from __future__ import annotations

import concurrent.futures
import json
import math
import signal
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import jax
import numpy as np

from jaxmd_dp.version import __version__
from jaxmd_dp.config import Config
from jaxmd_dp.data.sampler import DataSampler, find_systems, resolve_batch_sizes
from jaxmd_dp.data.system import System, load_system
from jaxmd_dp.errors import InputError
from jaxmd_dp.geometry import neighbor
from jaxmd_dp.geometry.stats import (energy_bias, env_mat_stats, sample_stat_frames, sample_stat_indices, scanned_sums,
                                     stats_from_sums)
from jaxmd_dp.model.energy import ModelHyper, Stats, default_stats, init_params, param_shapes, type_capacity
from jaxmd_dp.model.pair_pack import keep_sizes, pack_sizes, uniform_empty
from jaxmd_dp.model.trained import Model
from jaxmd_dp.train import lcurve
from jaxmd_dp.train.checkpoint import Checkpointer, checkpoint_steps, find_checkpoint_dir, load_trained
from jaxmd_dp.train.loss import LossPrefs
from jaxmd_dp.train.merge import MergedShape, bucket_sizes, merged_capacity
from jaxmd_dp.train.neighbor_cache import NeighborCache
from jaxmd_dp.train.parallel import Workers, local_workers, worker_seed
from jaxmd_dp.train.prefetch import BatchesAhead
from jaxmd_dp.train.schedule import exp_decay, worker_scale
from jaxmd_dp.train.small_leaves import pack_state, unpack_state
from jaxmd_dp.train.step import (BatchLayout, TrainState, device_batch, host_state, init_state, make_eval_step,
                                 make_optimizer)
from jaxmd_dp.train.summary import format_cost, format_summary, param_counts, step_cost

if TYPE_CHECKING:
    from jaxmd_dp.geometry.neighbor_stat import NeighborStats


# rows of head-room in each shared block: a pair at rcut to the last bit may sit in one of its atoms' lists
# only (the two distances are rounded apart), and such a slot needs a row of its own
SHARE_SLACK = 8
# the partner search holds (atoms of a batch) × (slots of a section)² entries of ~16 bytes while it runs
# (geometry.pair_partner): above this, e.g. thousands of atoms per batch with hundreds of slots, no sharing
PARTNER_SEARCH_BYTES = 2**30


def system_paths(systems) -> list[str]:
    """A config's ``systems``: a list of system directories, or one directory searched for systems."""
    if isinstance(systems, str):
        return find_systems(systems)
    return [str(s) for s in systems]


def load_systems(systems, type_map: list[str]) -> list[System]:
    return [load_system(p, type_map) for p in system_paths(systems)]


def resolve_sel(sel, max_nbor, hyper_rcut: float, log=print) -> tuple[int, ...]:
    """``sel`` as given, or for "auto"/"auto:f" the largest neighbour count per type in the data
    (``max_nbor``, (ntypes,) from the neighbour scan) × f (default 1.1), rounded up to a multiple of 4 —
    DeePMD-kit's neighbour statistics."""
    if not isinstance(sel, str):
        return tuple(int(s) for s in sel)
    factor = float(sel.split(":")[1]) if ":" in sel else 1.1
    nmax = np.asarray(max_nbor)
    out = tuple(int(4 * math.ceil(math.ceil(n * factor) / 4)) if n else 4 for n in nmax)
    log(f"sel {sel!r}: max neighbours per type {nmax.tolist()} within rcut {hyper_rcut} Å → sel {list(out)}")
    return out


def scan_neighbors(systems: list[System], rcut: float, ntypes: int, log=print, rcut_smth: float | None = None,
                   sum_frames: list | None = None) -> NeighborStats:
    """One pass over every frame of ``systems`` (training and validation): neighbours within ``rcut``
    per system (for ``sel: auto``), closest pairs (data check), pairs per frame (pair packing) and, with
    ``rcut_smth`` and ``sum_frames`` (the statistics' frames of the first systems), their
    environment-matrix sums (:func:`compute_stats`)."""
    from jaxmd_dp.geometry.neighbor_stat import neighbor_stat

    t = time.perf_counter()
    scan = neighbor_stat(systems, rcut, ntypes, rcut_smth=rcut_smth, sum_frames=sum_frames)
    log(f"neighbour scan of {scan.nframes} frames in {time.perf_counter() - t:.1f} s")
    return scan


class TrainingDiverged(InputError):
    """A non-finite loss or gradient (bad data or a too-large learning rate)."""


class StopSignals:
    """While alive, SIGTERM/SIGINT/SIGHUP set ``received`` (the signal's name) instead of killing us."""

    NAMES = ("SIGTERM", "SIGINT", "SIGHUP")

    def __init__(self):
        self.received: str | None = None
        self._old = {}
        if threading.current_thread() is threading.main_thread():
            for name in self.NAMES:
                sig = getattr(signal, name, None)
                if sig is not None:
                    self._old[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum, frame):
        self.received = signal.Signals(signum).name

    def restore(self) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)

    def agreed(self, workers: Workers, step: int, every: int, last: bool) -> str | None:
        """The stop decision all processes take together: with several processes a signal may reach only
        some of them, so every ``every`` steps (and at the ``last``) they exchange what they received and
        all stop when any did; alone, the signal stops at once."""
        if workers.nprocs == 1:
            return self.received
        if step % every and not last:
            return None
        names = workers.gather(self.received)  # [data parallel] collective: rank 0 gets every rank's signal
        return workers.broadcast(next((n for n in names if n), None) if workers.is_writer else None)


def compute_stats(data: DataSampler, hyper: ModelHyper, nbatch: int, protect: float, seed: int,
                  scan: NeighborStats | None = None) -> Stats:
    """DeePMD-kit's statistics on ``nbatch`` sampled batches per training system: env-matrix davg/dstd per
    type, and the per-type energy bias (least squares). With a ``scan`` that summed the sampled frames'
    environment matrices (its systems begin with ``data``'s; :func:`scan_neighbors`), their sums are added
    up from it instead of a second pass over them, unless some sampled system has more neighbours of a type
    than sel (then only the nearest sel count: the second pass does that)."""
    frames = sample_stat_frames(data, nbatch, seed)
    sums = None
    if scan is not None and scan.env_sums_per_system is not None and all(
            np.all(scan.max_nbor_per_system[f["sys_index"]] <= np.asarray(hyper.sel)) for f in frames):
        sums = scanned_sums(frames, scan.env_sums_per_system, hyper.nnei)  # None if a frame was not summed
    if sums is not None:
        davg, dstd = stats_from_sums(sums, hyper.nnei, protect)
    else:
        davg, dstd = env_mat_stats(frames, hyper, protect)
    try:
        bias = energy_bias(frames, hyper.ntypes)
    except ValueError as e:
        raise InputError(f"training.training_data: {e}") from None
    return Stats(davg, dstd, bias)


class Trainer:
    """Trains an se_e2_a model as DeePMD-kit's ``dp train`` does.

    Args:
      config: a validated :class:`~jaxmd_dp.config.Config`.
      output_dir: where out.json, lcurve.out and checkpoints go (created).
      restart: a checkpoint (or output) directory to continue exactly from.
      init_model: a model/checkpoint whose weights and statistics start a new training.
      log: where console lines go (``print`` by default).
      workers: data-parallel context (default: this process alone, all its local devices).
      profile: write a ``jax.profiler`` trace of ``PROFILE_STEPS`` steps, after ``PROFILE_WARMUP`` steps, into
        this directory (open it in TensorBoard's profile tab or Perfetto).
    """

    PROFILE_WARMUP, PROFILE_STEPS = 3, 5
    SIGNAL_SYNC_STEPS = 10  # [data parallel] processes agree on a stop signal every this many steps

    def __init__(self, config: Config, output_dir: str | Path = ".", *, restart: str | Path | None = None,
                 init_model: str | Path | None = None, log: Callable[[str], None] = print,
                 workers: Workers | None = None, profile: str | Path | None = None):
        self.config = config
        self.profile_dir = profile
        self.out = Path(output_dir)
        self.workers = workers or local_workers()
        # [data parallel] rank 0 logs; other ranks too under --mpi-log collect|workers
        self.log = log if self.workers.is_writer or self.workers.log_mode != "master" else (lambda *a, **k: None)
        self.log(self.workers.summary())
        tc = config.training
        type_map = list(config.model.type_map)
        t0 = time.perf_counter()
        self.train_systems = load_systems(tc.training_data.systems, type_map)
        vd = tc.validation_data
        self.valid_systems = load_systems(vd.systems, type_map) if vd is not None else []

        ckpt_meta = None
        if restart is not None:
            restart_ckpt = Checkpointer(find_checkpoint_dir(restart), None, read_only=True)
            ckpt_meta = restart_ckpt.restore_meta()
        self.seed = tc.seed if tc.seed is not None else (
            ckpt_meta["seed"] if ckpt_meta else int(np.random.SeedSequence().entropy % 2**31))
        self.seed = self.workers.broadcast(self.seed)  # [data parallel] rank 0's random seed on every worker

        # model hyper-parameters (sel resolved) and the resolved config written to out.json
        model = config.model.to_dict()
        if ckpt_meta is not None:
            self.hyper = ModelHyper.from_dict(ckpt_meta["hyper"])
            if isinstance(model["descriptor"]["sel"], str):  # "auto": the checkpoint's resolved sel
                model["descriptor"]["sel"] = list(self.hyper.sel)
            if ModelHyper.from_deepmd(model) != self.hyper:
                diff = _differences(ModelHyper.from_deepmd(model), self.hyper)
                raise InputError(f"--restart {restart}: the checkpoint's model differs from the config's ({diff}); "
                                 "use --init-model to start a new training from it")
        # one scan of every frame: sel "auto", the closest-pair data check, pair-packing block sizes
        rcut = config.model.descriptor.rcut
        td = tc.training_data
        sum_frames = None  # the statistics' frames: their env-matrix sums come from the scan's pass
        if ckpt_meta is None and init_model is None and self.workers.is_writer:
            sizes = resolve_batch_sizes(td.batch_size, [s.natoms for s in self.train_systems])
            sum_frames = sample_stat_indices([s.nframes for s in self.train_systems], sizes,
                                             config.model.data_stat_nbatch, self.seed)
        self.scan = scan_neighbors(self.train_systems + self.valid_systems, rcut, len(type_map), self.log,
                                   config.model.descriptor.rcut_smth, sum_frames)
        if ckpt_meta is None:
            max_nbor = self.scan.max_nbor_per_system[: len(self.train_systems)].max(axis=0)
            model["descriptor"]["sel"] = list(resolve_sel(config.model.descriptor.sel, max_nbor, rcut, self.log))
            self.hyper = ModelHyper.from_deepmd(model)
        check_min_distance(self.train_systems + self.valid_systems, self.scan.min_dist_per_system)
        self._check_sel_fits(config.model.descriptor.sel)

        # [data parallel] data samplers: each worker draws its own batches (seed offset by its worker index)
        self.batches = self.workers.batches(
            lambda w: DataSampler(self.train_systems, td.batch_size, td.auto_prob, td.sys_probs,
                                  seed=worker_seed(self.seed, w)), group_seed=self.seed)
        self.train_data = self.batches.samplers[0]  # this process's first worker
        draws = tc.numb_steps * max(self.train_data.batch_sizes) * len(self.batches.samplers)  # list slots
        self.neighbor_cache = NeighborCache(self.train_systems, self.hyper.ntypes, tc.neighbor_cache_mb, draws)
        seed = worker_seed(self.seed, self.workers.worker_ids[0])
        self.valid_data = (DataSampler(self.valid_systems, vd.batch_size, vd.auto_prob, vd.sys_probs, seed=seed + 1)
                           if vd is not None else None)
        self.log(self.train_data.summary_table("training"))
        if self.valid_data is not None:
            self.log(self.valid_data.summary_table("validation"))
        self._fitting_boxes: set = set()  # (spec, box bytes) that neighbor.fits accepted (layout_for)

        # optimisation
        lr = config.learning_rate
        self.start_lr = lr.start_lr
        self.schedule = exp_decay(lr.start_lr, lr.stop_lr, lr.decay_steps, tc.numb_steps, lr.decay_rate,
                                  scale=worker_scale(lr.scale_by_worker, self.workers.size))
        opt = config.optimizer
        self.optimizer = make_optimizer(self.schedule, opt.adam_beta1, opt.adam_beta2, opt.weight_decay,
                                        opt.adam_form)
        ls = config.loss
        self.prefs = LossPrefs(ls.start_pref_e, ls.limit_pref_e, ls.start_pref_f, ls.limit_pref_f,
                               ls.start_pref_v, ls.limit_pref_v)
        self.train_step = self.workers.make_train_step(self.hyper, self.prefs, self.schedule, self.optimizer)
        self.eval_step = make_eval_step(self.hyper, self.prefs, self.schedule.start_lr, self.eval_batches())
        self._valid_ahead: concurrent.futures.Future | None = None  # the first validation batch, compiled ahead

        # parameters, statistics, optimizer state
        if ckpt_meta is not None:
            self._restore(restart_ckpt, ckpt_meta)
            self.log(f"restarted from {restart} at step {int(self.state.step)}")
        else:
            if init_model is not None:

                hyper0, params, stats = load_trained(init_model)
                if hyper0 != self.hyper:
                    raise InputError(f"{init_model}: its model hyper-parameters differ from the config's "
                                     f"(init-model needs the same descriptor and fitting net)")
                self.log(f"initialised weights and statistics from {init_model}")
            else:
                stats = self.workers.broadcast(self._compute_stats() if self.workers.is_writer else None)
                params = init_params(self.hyper, self._init_seed())
            params = jax.device_put(params)  # host weights: device_put compiles nothing (jnp.asarray would)
            self.stats = Stats(*(jax.device_put(s) for s in stats))  # device_put: no compile per shape
            self.state = init_state(params, self.optimizer)
        # the step layouts, once the statistics are known: whether they hold one empty row per neighbour type's
        # section (pair_pack.uniform_empty; DeePMD's per-type statistics do), so the steps compute the empty
        # slots' share from that row, and pair sharing, which needs that too (both slots of a pair then hold
        # the same s), every same-type pair in both lists (no atom over sel) and one net per neighbour type
        self._uniform = uniform_empty(np.asarray(self.stats.davg), np.asarray(self.stats.dstd), self.hyper.sel)
        self._share = bool(tc.pair_sharing and tc.pair_packing and not tc.embedding_table and self.hyper.type_one_side
                           and self._uniform
                           and np.all(self.scan.max_nbor_per_system.max(axis=0) <= np.asarray(self.hyper.sel))
                           and self._partner_search_fits())
        self.layouts = self._allocate_layouts()
        # validation frames are stored only for merged batches (which always carry their lists): else the
        # evaluation step builds its batch's lists itself, with no store program of its own to compile (a
        # cold water start ~0.7 s shorter) and no slower (numb_btch batches every disp_freq steps)
        self.valid_neighbor_cache = NeighborCache(self.valid_systems, self.hyper.ntypes,
                                                  tc.neighbor_cache_mb if "valid" in self.merged else 0)
        if self.workers.is_writer or self.workers.log_mode != "master":
            self.log(self.model_summary())
        self.startup_s = time.perf_counter() - t0
        self.checkpointer = None
        self.lcurve_path = self.out / tc.disp_file

    def model_summary(self) -> str:
        """Parameters per net (XLA's FLOPs estimate of a training step follows its first call)."""
        return format_summary(param_counts(self.state.params))

    def _log_step_cost(self, batch: dict, arrays: dict, layout: BatchLayout) -> None:
        """XLA's FLOPs estimate of the training step just run on ``batch`` (this process's batch; arrays
        and layout: what :meth:`prepare` made of it): jax has the step's lowering and executable cached
        by then, so this costs ~10 ms, no compilation."""
        try:
            cost = step_cost(self.train_step, self.state, self.stats, arrays, layout)
        except Exception as e:  # the summary must never stop a training  # noqa: BLE001
            self.log(f"(no FLOP estimate: {type(e).__name__}: {e})")
            cost = {}
        self.step_cost = cost
        if "flops" in cost:
            self.log(format_cost(cost, int(batch["natoms"]), int(np.shape(batch["coord"])[-3])))

    # ------------------------------------------------------------------ set-up helpers
    def _init_seed(self) -> int:
        d = self.config.model.descriptor.seed
        return int(d) if d is not None else self.seed

    def _check_sel_fits(self, sel_cfg) -> None:
        if not isinstance(sel_cfg, str) and len(sel_cfg) != self.hyper.ntypes:
            raise InputError(f"model.descriptor.sel has {len(sel_cfg)} entries for {self.hyper.ntypes} types")

    def _allocate_layouts(self) -> dict:
        """One :class:`BatchLayout` per (natoms, pbc): a neighbour-list spec searching enough images/cells
        for every frame, the most atoms of each type in those systems, and (``training.pair_packing``)
        the packed block sizes: the most neighbour pairs of each type in any of their frames; the
        neighbour list then holds only as many slots of each type as an atom of those frames fills
        (its spec's sel, :func:`keep_sizes`), the rest being empty everywhere.

        With merged batches (:meth:`_merge_plans`) the lists of every shape hold the same slots, and
        ``self.merged`` maps "train" / "valid" to the (merged shape, step layout) of each merged size."""
        systems_all = self.train_systems + self.valid_systems
        groups: dict = {}
        for k, s in enumerate(systems_all):
            groups.setdefault((s.natoms, s.pbc), []).append(k)
        pairs = None
        if self.config.training.pair_packing:  # block sizes: real pairs, or with sharing the pairs kept
            pairs = (self.scan.max_unique_pairs_per_system + SHARE_SLACK if self._share
                     else self.scan.max_pairs_per_system)
        table = self.config.training.embedding_table
        self.merged = self._merge_plans(groups, pairs)
        layouts = {}
        for key, members in groups.items():
            systems = [systems_all[k] for k in members]
            coord = np.concatenate([s.coord for s in systems])
            box = None if not key[1] else np.concatenate([s.box for s in systems])
            pack = None if pairs is None or table else pack_sizes(pairs[members].max(axis=0), key[0], self.hyper.sel)
            keep = None if pairs is None or (pack is None and not table) else keep_sizes(
                self.scan.max_nbor_per_system[members].max(axis=0), self.hyper.sel)
            if self.merged:  # every shape's lists as the merged steps'
                keep = next(iter(self.merged.values()))[0][1].spec.sel
            spec = neighbor.allocate(coord, box, self.hyper.rcut, keep or self.hyper.sel)
            layouts[key] = BatchLayout(spec, type_capacity([s.atype for s in systems], self.hyper.ntypes),
                                       self.config.training.kernels, pack, table, uniform_empty=self._uniform,
                                       share=self._share and pack is not None)
        packed = [f"{n} atoms: {list(lay.pack)} of {[n * s for s in self.hyper.sel]} pairs, slots {list(lay.spec.sel)}"
                  for (n, _), lay in layouts.items() if lay.pack and not self.merged]
        packed += [f"merged {which} batches of {shape.atoms} atoms: {list(lay.pack)} pairs, slots {list(lay.spec.sel)}"
                   for which, plan in self.merged.items() for shape, lay in plan if lay.pack]
        if packed:
            self.log("embedding nets on real neighbour pairs only (training.pair_packing"
                     + (", once per pair of same-type atoms: training.pair_sharing" if self._share else "")
                     + "), per frame " + "; ".join(packed[:4])
                     + (f"; ... ({len(packed)} shapes)" if len(packed) > 4 else ""))
        if table:
            self.log(f"embedding nets tabulated on {table} nodes per step (training.embedding_table; the trained "
                     "model is exact)")
        if self.merged:
            self.log("batches merged into one list of atoms per size, one compiled step each (training.merge_batches): "
                     + "; ".join(f"{which} " + ", ".join(f"{s.atoms} atoms (≤ {s.frames} frames)" for s, _ in plan)
                                 for which, plan in self.merged.items()))
        return layouts

    def _partner_search_fits(self) -> bool:
        """Whether the partner search of the largest batch stays within :data:`PARTNER_SEARCH_BYTES`."""
        keep = keep_sizes(self.scan.max_nbor_per_system.max(axis=0), self.hyper.sel)
        samplers = [self.train_data] + ([self.valid_data] if self.valid_data is not None else [])
        atoms = max(s.natoms * min(int(b), s.nframes) for d in samplers for s, b in zip(d.systems, d.batch_sizes))
        fits = atoms * max(keep) ** 2 * 16 <= PARTNER_SEARCH_BYTES
        if not fits:
            self.log(f"training.pair_sharing off: batches of {atoms} atoms with {max(keep)} slots per type are "
                     "too large for its partner search")
        return fits

    def _merge_plans(self, groups: dict, pairs) -> dict:
        """``training.merge_batches``: when the data has batches of several shapes, the merged shapes
        (:mod:`train.merge`) of the training and of the validation batches, each with its step layout:
        {"train": [(shape, layout), ...] by size, "valid": [...]}. {} when there is one shape, when
        periodic and non-periodic systems are mixed, or when the workers' batches of one process are
        stacked for one program (a device mesh: it draws one shape per step instead)."""
        if (not self.config.training.merge_batches or len(groups) < 2 or len({pbc for _, pbc in groups}) > 1
                or not self.batches.plain):
            return {}
        pbc, sel, table = next(iter(groups))[1], self.hyper.sel, self.config.training.embedding_table
        tc = self.config.training
        samplers = {"train": (self.train_data, 0, tc.numb_steps)}
        if self.valid_data is not None:
            samplers["valid"] = (self.valid_data, len(self.train_systems), self.eval_batches())
        plans = {}
        for which, (sampler, first, calls) in samplers.items():
            frames = np.asarray([min(int(b), s.nframes) for s, b in zip(sampler.systems, sampler.batch_sizes)])
            size = frames * np.asarray([s.natoms for s in sampler.systems])
            buckets = bucket_sizes(size, sampler.probs, calls)
            plans[which] = []
            for lo, hi in zip([0] + buckets[:-1], buckets):
                members = np.flatnonzero((size > lo) & (size <= hi))
                pack = None
                if pairs is not None and not table:
                    most = np.max([frames[i] * pairs[first + i] for i in members], axis=0)
                    pack = pack_sizes(most, hi, sel)
                capacity = merged_capacity([sampler.systems[i].atype for i in members], frames[members],
                                           self.hyper.ntypes)
                plans[which].append((MergedShape(hi, int(frames[members].max())), capacity, pack))
        packs = [p for plan in plans.values() for _, _, p in plan]
        if any(p is None for p in packs):  # the slots are cut only where every merged step packs
            plans = {w: [(shape, cap, None) for shape, cap, _ in plan] for w, plan in plans.items()}
        keep = sel
        if pairs is not None and (table or all(p is not None for p in packs)):
            keep = keep_sizes(self.scan.max_nbor_per_system.max(axis=0), sel)
        spec = neighbor.NeighborSpec(float(self.hyper.rcut), tuple(keep), bool(pbc), "merged", (0, 0, 0), (1, 1, 1), 0)
        kernels = self.config.training.kernels
        return {w: [(shape, BatchLayout(spec, cap, kernels, pack, table, merged=True, uniform_empty=self._uniform,
                                        share=self._share and pack is not None)) for shape, cap, pack in plan]
                for w, plan in plans.items()}

    def prepare(self, batch: dict, valid: bool = False) -> tuple[dict, BatchLayout]:
        """A sampler batch → (the arrays the train or eval step takes, its static layout): the batch with
        its neighbour lists (from the cache, or built), merged when the data's shapes are
        (``training.merge_batches``). ``valid``: a validation batch."""
        layout = self.layout_for(batch)
        cache = self.valid_neighbor_cache if valid else self.neighbor_cache
        plan = self.merged.get("valid" if valid else "train")
        if plan is None:
            return device_batch(cache.attach(batch, layout)), layout
        nb, natoms = np.shape(batch["coord"])[0], int(batch["natoms"])
        shape, merged = next((s, lay) for s, lay in plan if s.atoms >= nb * natoms and s.frames >= nb)
        return cache.attach(batch, layout, merge=shape), merged

    def _compute_stats(self) -> Stats:
        """DeePMD-kit's statistics (env-matrix davg/dstd per type, energy bias) on the training data."""
        t = time.perf_counter()
        stats = compute_stats(self.train_data, self.hyper, self.config.model.data_stat_nbatch,
                              self.config.model.data_stat_protect, self.seed, self.scan)
        self.log(f"data statistics in {time.perf_counter() - t:.1f} s; energy bias per type (eV): "
                 f"{dict(zip(self.hyper.type_map, np.round(np.asarray(stats.energy_bias), 4).tolist()))}")
        return stats

    def _state_tree(self) -> dict:
        """What a checkpoint holds: the state, the optimizer's small weights unpacked (the layout of every
        jaxmd_dp version's checkpoints), and the statistics."""
        opt_state = unpack_state(jax.tree_util.tree_map(np.asarray, self.state.opt_state), self.state.params)
        return {**self.state._replace(opt_state=opt_state)._asdict(), "stats": self.stats._asdict()}

    def _meta(self) -> dict:
        return {"step": int(self.state.step), "config": self.config.to_dict(), "hyper": self.hyper.to_dict(),
                "seed": self.seed,
                "train_sampler": self.train_data.state_dict(),
                # [data parallel] every worker's sampler state (gathered by fit when several processes)
                **((self.batches.gather_state(self.workers) if self.workers.nprocs == 1
                    else getattr(self, "_sampler_states", None)) or {}),
                "valid_sampler": self.valid_data.state_dict() if self.valid_data else None,
                "workers": self.workers.size, "jaxmd_dp": __version__, "jax": jax.__version__}

    def _restore(self, ckpt: Checkpointer, meta: dict) -> None:
        # the restore target: host zeros of the state's shapes (nothing drawn, nothing compiled)
        shapes = param_shapes(self.hyper)
        start = host_state(shapes, self.optimizer)
        target = {**start._replace(opt_state=unpack_state(start.opt_state, shapes))._asdict(),
                  "stats": default_stats(self.hyper)._asdict()}
        tree, _ = ckpt.restore(meta["step"], target=target)
        tree["opt_state"] = pack_state(tree["opt_state"], start.opt_state)
        tree = jax.device_put(tree)  # jnp.asarray compiled one small program per array shape
        self.stats = Stats(**tree.pop("stats"))
        self.state = TrainState(**tree)
        if meta.get("workers", 1) == self.workers.size:
            self.batches.load_state(meta, self.workers.worker_ids)  # [data parallel] each worker its own
            if self.valid_data is not None and meta.get("valid_sampler"):
                self.valid_data.load_state_dict(meta["valid_sampler"])
        else:
            self.batches.reseed(self.seed, int(meta["step"]), self.workers.worker_ids)  # [data parallel]
            self.log(f"restart with {self.workers.size} workers (checkpoint had {meta.get('workers')}): "
                     "data sampling starts a new sequence")

    def layout_for(self, batch: dict) -> BatchLayout:
        key = (int(batch["natoms"]), bool(batch["pbc"]))
        layout = self.layouts[key]
        if batch["pbc"] and not self._box_fits(layout.spec, batch["box"]):  # a box the spec did not see
            spec = neighbor.allocate(batch["coord"], batch["box"], self.hyper.rcut, layout.spec.sel)
            layout = self.layouts[key] = layout._replace(spec=spec)
        return layout

    def _box_fits(self, spec: neighbor.NeighborSpec, box: np.ndarray) -> bool:
        """:func:`neighbor.fits`, remembered for boxes that fit (most data sets have few distinct boxes:
        a per-batch check was ~0.4 ms of host time per step)."""
        key = (spec, np.asarray(box).tobytes())
        if key in self._fitting_boxes:
            return True
        ok = neighbor.fits(spec, box)
        if ok and len(self._fitting_boxes) < 1_000_000:
            self._fitting_boxes.add(key)
        return ok

    # ------------------------------------------------------------------ training
    def write_out_json(self) -> None:
        d = self.config.to_dict()
        d["model"]["descriptor"]["sel"] = list(self.hyper.sel)
        d["training"]["seed"] = self.seed
        (self.out / "out.json").write_text(json.dumps(d, indent=2))
        (self.out / "run_info.json").write_text(json.dumps(run_info(self.seed, self.workers.size), indent=2))

    def eval_batches(self) -> int:
        """How many validation batches the run evaluates: ``numb_btch`` at step 1, every ``disp_freq`` steps
        and the last (0 without validation data)."""
        tc = self.config.training
        if self.valid_data is None:
            return 0
        return (tc.numb_steps // tc.disp_freq + 2) * tc.validation_data.numb_btch

    def validate(self, params=None, lr=None) -> dict | None:
        """Validation metrics over ``numb_btch`` batches, weighted by atoms per frame (DeePMD-kit)."""
        if self.valid_data is None:
            return None
        params = self.state.params if params is None else params
        lr = self.schedule(int(self.state.step)) if lr is None else lr
        sums, n = {}, 0
        ahead, self._valid_ahead = self._valid_ahead, None
        for i in range(self.config.training.validation_data.numb_btch):
            if i == 0 and ahead is not None:  # drawn and compiled beside the first training step
                batch, arrays, layout = ahead.result()
            else:
                batch = self.valid_data.next_batch()
                arrays, layout = self.prepare(batch, valid=True)
            m = self.eval_step(params, self.stats, arrays, layout, lr)
            na = int(batch["natoms"])
            for k, v in m.items():
                if k != "nneigh_max":
                    sums[k] = sums.get(k, 0.0) + float(v) * na
            n += na
        return {k: v / n for k, v in sums.items()}

    def _prepare_validation_ahead(self) -> concurrent.futures.Future:
        """On a thread: draw and prepare the first validation batch and compile the evaluation step for it,
        while this thread compiles the first training step (a cold water start 0.3–0.6 s shorter on a
        2-core CPU than one compile after the other, for ~0.2 GB more peak memory). Called once the
        training step is traced and lowered: tracing is Python, which holds the interpreter lock, so two
        traces side by side only take turns and delay the step's compile (started before the step's
        trace, the cold water float32 start took ~1 s longer: median of 17 paired rounds, session 36). The future
        gives (batch, arrays, layout) for :meth:`validate`, whose call then finds the compiled step in jax's
        caches. Only where the first validation follows the first step (step 0 → 1): the sampler's state
        saved in a checkpoint then never runs ahead; and on one device (the weights uncommitted, as the
        shapes here: on a mesh the call's shardings differ)."""
        shapes = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), self.state.params)

        def prepare_and_compile(batch):
            arrays, layout = self.prepare(batch, valid=True)
            self.eval_step.lower(shapes, self.stats, arrays, layout, 0.0).compile()  # lr: a Python float, as fit's
            return arrays, layout

        ahead = BatchesAhead(prepare_and_compile, "validation-ahead")
        try:
            return ahead.submit(self.valid_data.next_batch())
        finally:
            ahead.close(wait=False)

    def _check_fresh_output(self) -> None:
        """An :class:`InputError` (on every process) before a run from step 0 writes into an output directory
        that holds another run's checkpoints: its lcurve would be overwritten and its first save would
        collide with them, steps later. The CLI refuses such a directory unless ``--force``."""
        error = None
        if self.workers.is_writer:
            ckpt = self.out / self.config.training.save_ckpt
            steps = checkpoint_steps(ckpt)
            if steps:
                error = (f"{self.out}: already holds a training run (checkpoints of steps {steps} in {ckpt.name}); "
                         f"continue it with restart={str(self.out)!r} (CLI: --restart), or train into another "
                         "directory")
        error = self.workers.broadcast(error)  # [data parallel] every process stops, none waits for the others
        if error is not None:
            raise InputError(error)

    def fit(self, numb_steps: int | None = None) -> dict:
        """Train until step ``numb_steps`` (default: the config's). Returns a timing summary dict.

        SIGTERM, SIGINT and SIGHUP save a checkpoint at the current step and return early
        (``summary["stopped_by"]``). A non-finite loss or gradient stops training with
        :class:`TrainingDiverged`, without saving; the last checkpoint is the last good state.
        """
        tc = self.config.training
        total = tc.numb_steps if numb_steps is None else numb_steps
        writer = self.workers.is_writer
        start = int(self.state.step)
        if start == 0:
            self._check_fresh_output()
        if writer:
            self.out.mkdir(parents=True, exist_ok=True)
            self.write_out_json()
            self.checkpointer = self.checkpointer or Checkpointer(self.out / tc.save_ckpt, tc.max_ckpt_keep)
            if start > 0 and self.lcurve_path.exists():
                lcurve.truncate_after(self.lcurve_path, start)
            fout = open(self.lcurve_path, "a" if start > 0 and self.lcurve_path.exists() else "w")
        header_done = start > 0
        nmax = np.zeros(self.hyper.ntypes, np.int32)
        counts = []  # each step's nneigh_max (device arrays), folded into nmax when displayed
        sel = np.asarray(self.hyper.sel)
        t_window = time.perf_counter()
        windows: list[tuple[int, float]] = []
        last_disp = start
        step = start
        recent: dict[int, int] = {}  # step index → system index, since the last NaN-guard check
        tb, bar, restore_log = self._open_reporters(start, total)
        t_tb, last_tb = time.perf_counter(), start
        stop = StopSignals()
        stopping = None  # the signal all processes agreed to stop on
        ahead = BatchesAhead(self.prepare)
        pending = None  # the next step's batch, drawn and being prepared on the thread
        try:
            while step < total and not stopping:
                self._profile(step - start)
                if pending is None:  # [data parallel] this process's workers' batches
                    pending = ahead.submit(self.batches.next())
                batch, arrays, layout = pending.result()  # lists built once per frame, not in every step
                pending = None
                recent[step] = int(batch["sys_index"])
                if step == 0 and writer and self.valid_data is not None and self.workers.mesh is None:
                    # the step traced and lowered first: its call below finds both in jax's caches and
                    # compiles, while the thread started here traces and compiles the evaluation step
                    self.train_step.trace(self.state, self.stats, arrays, layout).lower()
                    self._valid_ahead = self._prepare_validation_ahead()
                self.state, metrics = self.train_step(self.state, self.stats, arrays, layout)
                counts.append(metrics["nneigh_max"])
                if len(counts) >= 100:  # a long display interval: fold the oldest (done by now) into nmax
                    nmax = np.max([nmax, *map(np.asarray, counts[:50])], axis=0)
                    del counts[:50]
                step += 1
                display = step % tc.disp_freq == 0 or step == 1 or step == total
                save = step % tc.save_freq == 0 or step == total
                stopping = stop.agreed(self.workers, step, self.SIGNAL_SYNC_STEPS, display or save)
                if step < total and not (save or stopping):  # else drawn after the checkpoint's sampler state
                    pending = ahead.submit(self.batches.next())  # prepared while this step runs
                if step == start + 1:  # the first call compiles the step
                    jax.block_until_ready(self.state.step)
                    self.first_step_s = time.perf_counter() - t_window
                    self.log(f"first training step (including compilation): {self.first_step_s:.1f} s")
                    if writer or self.workers.log_mode != "master":
                        self._log_step_cost(batch, arrays, layout)
                if bar is not None:
                    bar.update(step)  # a python int: no device sync
                if display or save or stopping:
                    self._check_finite(recent)
                    recent.clear()
                if display:
                    train = {k: float(v) for k, v in metrics.items() if k not in ("nneigh_max", "lr")}
                    lr = float(metrics["lr"])
                    nmax = np.max([nmax, *map(np.asarray, counts)], axis=0)
                    counts.clear()
                    self._check_overflow(nmax, sel, step)
                    valid = self.validate(self.state.params, lr) if writer else None  # [data parallel]
                    now = time.perf_counter()
                    windows.append((step - last_disp, now - t_window))
                    if writer:
                        if not header_done:
                            fout.write(lcurve.header(list(train), valid is not None))
                            header_done = True
                        fout.write(lcurve.line(step, train, valid, lr))
                        fout.flush()
                    self._log_window(step, total, train, valid, lr, now - t_window, windows)
                    t_window, last_disp = time.perf_counter(), step
                if tb is not None and (step % tc.tensorboard_freq == 0 or display):
                    now_tb = time.perf_counter()
                    tb.metrics(step, {k: float(v) for k, v in metrics.items() if k not in ("nneigh_max", "lr")},
                               valid if display else None, lr=float(metrics["lr"]),
                               step_time=(now_tb - t_tb) / max(1, step - last_tb))
                    t_tb, last_tb = now_tb, step
                if save or stopping:
                    self._sampler_states = self.batches.gather_state(self.workers)  # [data parallel] collective
                    if writer:
                        self.save_checkpoint()
        finally:
            ahead.close()
            self._profile(None)
            stop.restore()
            for r in (tb, bar):
                if r is not None:
                    r.close()
            restore_log()
            if writer:
                fout.close()
        summary = self._summary(windows)
        if stopping:
            self.log(f"received {stopping}: saved step {step} and stopped; continue with --restart {self.out}")
            summary["stopped_by"] = stopping
        return summary

    def _profile(self, done: int | None) -> None:
        """Start the profiler trace after PROFILE_WARMUP steps of this fit, stop it PROFILE_STEPS later
        (``done``: steps done in this fit; None: end of fit, stop if running)."""
        if self.profile_dir is None or not self.workers.is_writer:
            return
        if done == self.PROFILE_WARMUP and not getattr(self, "_tracing", False):
            jax.block_until_ready(self.state.params)
            jax.profiler.start_trace(str(self.profile_dir))
            self._tracing = True
            self.log(f"profiling steps {int(self.state.step) + 1}-{int(self.state.step) + self.PROFILE_STEPS} "
                     f"into {self.profile_dir}")
        elif getattr(self, "_tracing", False) and (done is None or done == self.PROFILE_WARMUP + self.PROFILE_STEPS):
            jax.block_until_ready(self.state.params)
            jax.profiler.stop_trace()
            self._tracing = False
            self.log(f"profile written to {self.profile_dir} (tensorboard --logdir {self.profile_dir}, "
                     "or the .trace.json.gz in https://ui.perfetto.dev)")

    def _open_reporters(self, start: int, total: int):
        """TensorBoard writer (``training.tensorboard``) and, on a terminal or in a notebook, a progress
        bar through which console lines are then printed. Returns (tb, bar, a function undoing the
        rerouting of the log)."""
        tc, log = self.config.training, self.log
        restore = lambda: setattr(self, "log", log)  # noqa: E731
        if not self.workers.is_writer:
            return None, None, restore
        tb = None
        if tc.tensorboard:
            from jaxmd_dp.train.tensorboard import TBWriter

            tb = TBWriter(self.out / tc.tensorboard_log_dir, purge_step=start + 1 if start > 0 else None)
        bar = None
        console = getattr(log, "console", log)  # a jaxmd_dp.train.log.Logger prints through .console
        if console is print:
            from jaxmd_dp.train.progress import Progress

            bar = Progress(total, start)
            if not bar.active:
                bar = None
            elif log is print:
                self.log = bar.write
            else:
                log.console = bar.write
                restore = lambda: setattr(log, "console", console)  # noqa: E731
        return tb, bar, restore

    def save_checkpoint(self) -> None:
        step = int(self.state.step)
        try:
            self.checkpointer.save(step, self._state_tree(), self._meta())
        except OSError as e:
            last = self.checkpointer.latest_step()
            raise InputError(f"{self.checkpointer.directory}: cannot save checkpoint {step} ({e.strerror or e}); "
                             f"the last complete checkpoint is {last}") from None
        self.log(f"saved checkpoint {self.checkpointer.directory}/{step}")

    def _check_finite(self, recent: dict[int, int]) -> None:
        """The NaN guard: the step recorded a non-finite loss/gradient → stop, naming step and system."""
        bad = int(self.state.first_bad)
        if bad < 0:
            return
        system = self.train_systems[recent[bad]].path if bad in recent else "unknown"
        last = self.checkpointer.latest_step() if self.checkpointer else None
        raise TrainingDiverged(f"step {bad + 1}: loss or gradient is not finite (batch from {system}); "
                               f"training stopped without saving; the last checkpoint ({last}) is intact")

    def _check_overflow(self, nmax: np.ndarray, sel: np.ndarray, step: int) -> None:
        over = nmax > sel
        if over.any():
            msg = (f"step {step}: neighbours per type reached {nmax.tolist()} > sel {sel.tolist()} "
                   f"(types {[t for t, o in zip(self.hyper.type_map, over) if o]}); the farthest are dropped "
                   f"as in DeePMD-kit — raise sel to at least {np.maximum(nmax, sel).tolist()}")
            if self.config.training.strict_sel:
                raise InputError(msg + " (training.strict_sel is set)")
            if not getattr(self, "_warned_sel", False):
                self.log("warning: " + msg)
                self._warned_sel = True

    def _log_window(self, step, total, train, valid, lr, wall, windows) -> None:
        parts = [f"{k} = {v:.2e}" for k, v in sorted(train.items())]
        self.log(f"batch {step:7d}: trn: " + ", ".join(parts))
        if valid is not None:
            self.log(f"batch {step:7d}: val: " + ", ".join(f"{k} = {v:.2e}" for k, v in sorted(valid.items())))
        per = _steady_rate(windows)
        eta = (total - step) * per if per else 0.0
        self.log(f"batch {step:7d}: total wall time = {wall:.3f} s, lr = {lr:.2e}, eta = {_hms(eta)}")

    def _summary(self, windows) -> dict:
        per = _steady_rate(windows)
        steps = sum(n for n, _ in windows)
        if per:
            self.log(f"average training time: {per:.4f} s/batch (excluding the first window)")
        return {"steps": steps, "s_per_step": per, "first_window_s": windows[0][1] if windows else None,
                "startup_s": self.startup_s, "first_step_s": getattr(self, "first_step_s", None)}

    # ------------------------------------------------------------------ evaluation
    @property
    def model(self):
        """The current model as a :class:`jaxmd_dp.model.trained.Model` (``.energy_and_forces(coord, box, atype)``)."""
        return Model(self.hyper, self.state.params, self.stats)

    def evaluate(self, system: str | System, nframes: int = 0) -> dict:
        """dp-test errors of the current model on a system (path or :class:`System`): rmse/mae of energy
        (total and per atom), force and virial where labelled, as {name: value}."""
        from jaxmd_dp.model.evaluate import Evaluator
        from jaxmd_dp.model.evaluate import errors, predict_system

        if not isinstance(system, System):
            system = load_system(system, list(self.hyper.type_map))
        ev = Evaluator(self.hyper, self.state.params, self.stats)
        return {k: v for k, (v, _) in errors(system, predict_system(ev, system, nframes)).items()}


def run_info(seed: int, nworkers: int) -> dict:
    """What a run's numbers depend on besides the config: seed, versions, platform."""
    import importlib.metadata as md
    import platform

    versions = {}
    for pkg in ("jaxmd_dp", "jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "numpy", "mpi4jax"):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    return {"seed": seed, "workers": nworkers, "versions": versions, "python": platform.python_version(),
            "platform": platform.platform(), "devices": [str(d) for d in jax.devices()],
            "command": " ".join(sys.argv), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def _differences(a: ModelHyper, b: ModelHyper) -> str:
    da, db = a.to_dict(), b.to_dict()
    return ", ".join(f"{k}: config {da[k]} vs checkpoint {db[k]}" for k in da if da[k] != db[k])


def check_min_distance(systems: list[System], min_dist: np.ndarray, rmin: float = 0.1) -> None:
    """Stop with the system and frame when two atoms are closer than ``rmin`` Å (broken data);
    ``min_dist`` (nsystems,): each system's closest pair from the neighbour scan."""
    for s, d in zip(systems, min_dist):
        if d < rmin:
            frame = int(np.argmax(neighbor.closest_pair_distance(s.coord, s.box) < rmin))
            raise InputError(f"{s.path}: frame {frame} has two atoms closer than {rmin} Å")


def _steady_rate(windows) -> float | None:
    """Seconds per step, excluding the first window (compilation)."""
    rest = windows[1:]
    n = sum(k for k, _ in rest)
    return sum(t for _, t in rest) / n if n else None


def _hms(s: float) -> str:
    s = int(s)
    return f"{s // 3600:d}:{s % 3600 // 60:02d}:{s % 60:02d}"


def train_and_evaluate(config: Config, workdir: str | Path, **kwargs) -> Trainer:
    """Train per ``config`` into ``workdir`` and return the trainer (flax-examples style entry point)."""
    trainer = Trainer(config, workdir, **kwargs)
    trainer.fit()
    return trainer
