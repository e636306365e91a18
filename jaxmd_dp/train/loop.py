"""The Trainer: one object used by the command line and by notebooks.

    trainer = Trainer(load_config("configs/water.yaml"), output_dir="runs/water")
    trainer.fit()                        # numb_steps from the config (or trainer.fit(200))
    trainer.evaluate("data/water/data_3")

Its construction runs the set-up steps (:mod:`jaxmd_dp.train.setup`: data systems, neighbour scan and
``sel: auto``, samplers, DeePMD-kit's statistics or a checkpoint's state; :mod:`jaxmd_dp.train.layouts`:
the steps' layouts) and builds the jitted steps. :meth:`Trainer.fit` runs the steps and calls the
callbacks (:mod:`jaxmd_dp.train.callbacks`: lcurve.out, checkpoints, log lines, TensorBoard, profiler,
progress bar, the sel check, and the user's); outputs go into ``output_dir``: ``out.json``, ``lcurve.out``
and orbax checkpoints.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import jax
import numpy as np

from jaxmd_dp.config import Config
from jaxmd_dp.data.system import System, load_system
from jaxmd_dp.errors import InputError
from jaxmd_dp.geometry import neighbor
from jaxmd_dp.model.energy import Stats
from jaxmd_dp.model.trained import Model
from jaxmd_dp.train import finetune as finetuning
from jaxmd_dp.train import setup
from jaxmd_dp.train.callbacks import Callback, Window, default_callbacks, is_window, train_metrics
from jaxmd_dp.train.checkpoint import Checkpointer, checkpoint_steps, restore_state, state_tree, weights_tree
from jaxmd_dp.train.ema import ema_checkpoint_dir
from jaxmd_dp.train.guards import NanGuard, StopSignals, TrainingDiverged
from jaxmd_dp.train.layouts import box_fits, plan_layouts
from jaxmd_dp.train.loss import LossPrefs
from jaxmd_dp.train.multi_step import StepMetrics, chunk_inputs, chunk_length, steps_per_dispatch
from jaxmd_dp.train.neighbor_cache import NeighborCache
from jaxmd_dp.train.parallel import Workers, local_workers
from jaxmd_dp.train.prefetch import BatchesAhead
from jaxmd_dp.train.schedule import epoch_steps, make_schedule, worker_scale
from jaxmd_dp.train.setup import resolve_sel
from jaxmd_dp.train.step import BatchLayout, device_batch, init_state, make_eval_step, make_optimizer, weights
from jaxmd_dp.train.summary import format_cost, format_outcome, format_summary, param_counts, step_cost
from jaxmd_dp.version import __version__

__all__ = ["Trainer", "TrainingDiverged", "resolve_sel", "run_info", "train_and_evaluate"]

BEST = "best"  # the best checkpoint's directory inside the checkpoint directory (training.keep_best)


class Trainer:
    """Trains an energy model (se_e2_a, se_atten, se_atten_v2) as DeePMD-kit's ``dp train`` does.

    Args:
      config: a validated :class:`~jaxmd_dp.config.Config`.
      output_dir: where out.json, lcurve.out and checkpoints go (created).
      restart: a checkpoint (or output) directory to continue exactly from.
      init_model: a model/checkpoint whose weights and statistics start a new training.
      finetune: a trained model (ours, a checkpoint, DeePMD-kit's ``.dp``) that a new training fine-tunes on
        the config's type map and data (:mod:`jaxmd_dp.train.finetune`): its descriptor and fitting net
        replace the config's.
      log: where console lines go (``print`` by default). A :class:`~jaxmd_dp.train.callbacks.Callback`
        given as the log (e.g. :class:`jaxmd_dp.api.LivePlot`) is also one of the callbacks.
      workers: data-parallel context (default: this process alone, all its local devices).
      profile: write a ``jax.profiler`` trace of a few steps after warm-up into this directory (open it in
        TensorBoard's profile tab or Perfetto; :class:`~jaxmd_dp.train.callbacks.Profiler`).
      callbacks: the user's :class:`~jaxmd_dp.train.callbacks.Callback` objects, called after the trainer's own.
    """

    SIGNAL_SYNC_STEPS = 10  # [data parallel] processes agree on a stop signal every this many steps

    def __init__(
        self,
        config: Config,
        output_dir: str | Path = ".",
        *,
        restart: str | Path | None = None,
        init_model: str | Path | None = None,
        finetune: str | Path | None = None,
        log: Callable[[str], None] = print,
        workers: Workers | None = None,
        profile: str | Path | None = None,
        callbacks: Sequence[Callback] = (),
    ):
        self.out = Path(output_dir)
        self.workers = workers or local_workers()
        writer = self.workers.is_writer
        # [data parallel] rank 0 logs; other ranks too under --mpi-log collect|workers
        self.log = log if writer or self.workers.log_mode != "master" else (lambda *a, **k: None)
        user = list(callbacks)
        if isinstance(log, Callback) and log not in user:
            user.insert(0, log)
        self.callbacks: list[Callback] = default_callbacks(config, self.out, writer, profile) + user
        self.log(self.workers.summary())
        finetuning.check_options(finetune, restart, init_model)
        pretrained = None if finetune is None else finetuning.load_pretrained(finetune)
        if pretrained is not None:  # its descriptor and fitting net replace the config's
            config = finetuning.finetune_config(config, pretrained, self.log)
        self.config = config
        tc = config.training
        t0 = time.perf_counter()

        # 1. the data systems; 2. the checkpoint a restart continues, the run's seed
        self.train_systems, self.valid_systems = setup.load_data(config)
        restart_ckpt, ckpt_meta = setup.open_restart(restart)
        self.seed = self.workers.broadcast(setup.run_seed(tc.seed, ckpt_meta))  # [data parallel] rank 0's
        if ckpt_meta is not None:
            self.hyper = setup.restart_hyper(config, ckpt_meta, restart)

        # 3. one scan of every frame: sel "auto", the closest-pair data check, pair-packing block sizes, and a
        # fresh run's statistics' env-matrix sums
        fresh = ckpt_meta is None and init_model is None and writer
        fresh = fresh and (pretrained is None or bool(finetuning.new_types(config, pretrained)))
        self.scan = setup.scan_neighbors(
            self.train_systems + self.valid_systems,
            config.model.descriptor.rcut,
            len(config.model.type_map),
            self.log,
            config.model.descriptor.rcut_smth,
            setup.stat_frames(config, self.train_systems, self.seed) if fresh else None,
        )
        if pretrained is not None:
            self.hyper = finetuning.finetune_hyper(config, pretrained, self.scan, len(self.train_systems), self.log)
        elif ckpt_meta is None:
            self.hyper = setup.fresh_hyper(config, self.scan, len(self.train_systems), self.log)
        setup.check_min_distance(self.train_systems + self.valid_systems, self.scan.min_dist_per_system)
        setup.check_sel_entries(config.model.descriptor.sel, self.hyper)

        # 4. [data parallel] the samplers (each worker draws its own batches) and the neighbour-list cache
        self.batches, self.valid_data = setup.make_samplers(
            config, self.train_systems, self.valid_systems, self.seed, self.workers
        )
        self.train_data = self.batches.samplers[0]  # this process's first worker
        if tc.numb_steps is None:  # numb_epoch: DeePMD-kit's steps of that many epochs of the training data
            steps = epoch_steps(tc.numb_epoch, self.train_data.nbatches, self.train_data.probs)
            self.log(f"numb_steps = {steps} from numb_epoch = {tc.numb_epoch:g}")
            tc = dataclasses.replace(tc, numb_steps=steps, numb_epoch=None)
            self.config = config = dataclasses.replace(config, training=tc)
        draws = tc.numb_steps * max(self.train_data.batch_sizes) * len(self.batches.samplers)  # list slots
        self.neighbor_cache = NeighborCache(self.train_systems, self.hyper.ntypes, tc.neighbor_cache_mb, draws)
        self.log(self.train_data.summary_table("training"))
        if self.valid_data is not None:
            self.log(self.valid_data.summary_table("validation"))

        # the optimisation: schedule, optimizer, loss, the jitted steps
        lr = config.learning_rate
        self.start_lr = lr.start_lr
        self.schedule = make_schedule(lr, tc.numb_steps, worker_scale(lr.scale_by_worker, self.workers.size))
        opt = config.optimizer
        self.optimizer = make_optimizer(
            self.schedule,
            opt.adam_beta1,
            opt.adam_beta2,
            opt.weight_decay,
            opt.adam_form,
            opt.type,
            tc.gradient_max_norm or None,
        )
        ls = config.loss
        self.prefs = LossPrefs(
            ls.start_pref_e, ls.limit_pref_e, ls.start_pref_f, ls.limit_pref_f, ls.start_pref_v, ls.limit_pref_v
        )
        ema_decay = tc.ema_decay if tc.enable_ema else None
        self.train_step = self.workers.make_train_step(
            self.hyper, self.prefs, self.schedule, self.optimizer, ema_decay=ema_decay
        )
        # training.steps_per_dispatch: K > 1 steps per dispatch where the batches allow (train.multi_step)
        loops = self.workers.loops and self.batches.plain
        period = math.gcd(tc.disp_freq, tc.save_freq)  # chunks end at lines and checkpoints
        self.steps_per_dispatch = steps_per_dispatch(tc.steps_per_dispatch, loops, period)
        if self.steps_per_dispatch > 1 and not loops:
            raise InputError(
                f"config key 'training.steps_per_dispatch': {tc.steps_per_dispatch} steps per dispatch need one "
                f"worker per process (this process drives {self.workers.local_size}); set it to 1 or auto"
            )
        self.train_steps = None
        if self.steps_per_dispatch > 1:
            self.train_steps = self.workers.make_train_steps(
                self.hyper, self.prefs, self.schedule, self.optimizer, ema_decay
            )
        self.chunked_steps = 0  # steps that fit ran several per dispatch
        self.dispatched = 0  # steps the device has run: the last dispatch's last (callbacks' on_step follow it)
        # keep_best and early_stop judge the validation loss with the prefactors of the run's last step
        self.end_lr = float(self.schedule(max(tc.numb_steps - 1, 0))) if tc.keep_best or tc.early_stop else None
        self.eval_step = make_eval_step(
            self.hyper, self.prefs, self.schedule.start_lr, self.eval_batches(), self.end_lr
        )
        self._valid_ahead: concurrent.futures.Future | None = None  # the first validation batch, compiled ahead

        # 5. parameters, statistics, optimizer state
        self._restored_callbacks = (ckpt_meta or {}).get("callbacks", {})  # their states, loaded by fit
        if ckpt_meta is not None:
            self.state, self.stats = restore_state(restart_ckpt, ckpt_meta, self.hyper, self.optimizer, tc.enable_ema)
            setup.restore_samplers(ckpt_meta, self.batches, self.valid_data, self.workers, self.seed, self.log)
            self.log(f"restarted from {restart} at step {int(self.state.step)}")
        else:
            if init_model is not None:
                params, stats = setup.init_model_weights(init_model, self.hyper, self.log)
            elif pretrained is not None:
                params, stats = self.workers.broadcast(
                    finetuning.finetune_weights(
                        config, pretrained, self.hyper, self.train_data, self.seed, self.scan, self.log
                    )
                    if writer
                    else None
                )
            else:
                stats = self.workers.broadcast(
                    setup.logged_stats(config, self.train_data, self.hyper, self.seed, self.scan, self.log)
                    if writer
                    else None
                )
                params = setup.fresh_params(config, self.hyper, self.seed)
            params = jax.device_put(params)  # host weights: device_put compiles nothing (jnp.asarray would)
            self.stats = Stats(*(jax.device_put(s) for s in stats))  # device_put: no compile per shape
            self.state = init_state(params, self.optimizer, tc.enable_ema)

        # 6. the steps' layouts, once the statistics are known, and the validation frames' cache
        self.layouts, self.merged, self._uniform, self._share = plan_layouts(
            config,
            self.hyper,
            self.stats,
            self.scan,
            self.train_systems,
            self.valid_systems,
            self.train_data,
            self.valid_data,
            self.batches.plain,
            self.eval_batches(),
            self.log,
        )
        self._fitting_boxes: set = set()  # (spec, box bytes) that neighbor.fits accepted (layout_for)
        # validation frames are stored only for merged batches (which always carry their lists): else the
        # evaluation step builds its batch's lists itself, with no store program of its own to compile (a
        # shorter cold start) and no slower (numb_btch batches every disp_freq steps)
        self.valid_neighbor_cache = NeighborCache(
            self.valid_systems, self.hyper.ntypes, tc.neighbor_cache_mb if "valid" in self.merged else 0
        )
        if writer or self.workers.log_mode != "master":
            self.log(self.model_summary())
        self.startup_s = time.perf_counter() - t0
        self.checkpointer = self.ema_checkpointer = self.best_checkpointer = None
        self.lcurve_path = self.out / tc.disp_file
        self.stop_reason: str | None = None  # set by request_stop: the run ends after this step

    # ------------------------------------------------------------------ training
    def fit(self, numb_steps: int | None = None) -> dict:
        """Train until step ``numb_steps`` (default: the config's). Returns a timing summary dict.

        SIGTERM, SIGINT and SIGHUP save a checkpoint at the current step and return early
        (``summary["stopped_by"]``); so does a callback's :meth:`request_stop` (``training.early_stop``;
        ``summary["stopped_early"]``). A non-finite loss or gradient stops training with
        :class:`TrainingDiverged`, without saving; the last checkpoint is the last good state.
        """
        tc = self.config.training
        total = tc.numb_steps if numb_steps is None else numb_steps
        start = step = int(self.state.step)
        self._open_outputs(start)
        self._load_callback_states()
        self.stop_reason = None
        self.chunked_steps = 0
        self.dispatched = start
        # with a callback that may save (keep_best) or stop (early_stop) at a learning-curve line, the next
        # batch is drawn after it, so that the sampler states saved then are those of the step
        exact_windows = tc.keep_best or tc.early_stop > 0
        guard, signals = NanGuard(), StopSignals()
        stopping = None  # the signal all processes agreed to stop on
        ahead = BatchesAhead(self.prepare)
        pending: list = []  # the next dispatch's batches, drawn and being prepared on the thread
        windows: list[tuple[int, float]] = []  # (steps, seconds) of each learning-curve window
        t_window, last_window = time.perf_counter(), start
        begun: list[Callback] = []
        try:
            for cb in self.callbacks:
                cb.on_train_begin(self, start, total)
                begun.append(cb)
            while step < total and not stopping and self.stop_reason is None:
                if not pending:  # [data parallel] this process's workers' batches
                    pending = [ahead.submit(self.batches.next()) for _ in range(self._dispatch_length(step, total))]
                items = [p.result() for p in pending]  # lists built once per frame, not in every step
                pending = []
                chunk = chunk_inputs(items, self.steps_per_dispatch) if self.train_steps is not None else None
                if step == 0 and self.workers.is_writer and self.valid_data is not None and self.workers.mesh is None:
                    # the step traced and lowered first: its call below finds both in jax's caches and
                    # compiles, while the thread started here traces and compiles the evaluation step
                    self._trace_step(items, chunk)
                    self._valid_ahead = self._prepare_validation_ahead()
                steps = self._run(items, chunk)
                for i, (batch, _, _) in enumerate(items):
                    guard.record(step + i, batch)
                step += len(items)
                self.dispatched = step
                window = is_window(step, total, tc.disp_freq)
                save = step % tc.save_freq == 0 or step == total
                stopping = signals.agreed(self.workers, step, self.SIGNAL_SYNC_STEPS, window or save, len(items))
                if step < total and not (save or stopping or (window and exact_windows)):
                    # prepared while these steps run; else drawn after the checkpoint's sampler state
                    pending = [ahead.submit(self.batches.next()) for _ in range(self._dispatch_length(step, total))]
                if step == start + len(items):  # the first call compiles the step
                    self._report_first_step(t_window, items, chunk)
                for i, ((batch, _, _), metrics) in enumerate(zip(items, steps)):
                    for cb in self.callbacks:
                        cb.on_step(self, step - len(items) + 1 + i, batch, metrics)
                metrics = steps[-1]
                if window or save or stopping:
                    guard.check(self.state, self.train_systems, self.checkpointer)
                if window:
                    w = self._window(step, total, metrics, windows, step - last_window, t_window)
                    for cb in self.callbacks:
                        cb.on_window(self, w)
                    t_window, last_window = time.perf_counter(), step
                if save or stopping or self.stop_reason is not None:
                    for cb in self.callbacks:
                        cb.on_checkpoint(self, step)
        finally:
            ahead.close()
            signals.restore()
            _end(begun, self)
        if tc.change_bias_after_training and step == total and step > start and not stopping:
            self.change_bias_after_training()
        summary = self._summary(windows)
        if stopping:
            self.log(f"received {stopping}: saved step {step} and stopped; continue with --restart {self.out}")
            summary["stopped_by"] = stopping
        for cb in self.callbacks:
            summary.update(cb.summary())
        for line in format_outcome(summary):
            self.log(line)
        return summary

    def _dispatch_length(self, step: int, total: int) -> int:
        """How many steps the next dispatch runs (:func:`jaxmd_dp.train.multi_step.chunk_length`)."""
        tc = self.config.training
        if self.train_steps is None:
            return 1
        return chunk_length(step, total, self.steps_per_dispatch, tc.disp_freq, tc.save_freq)

    def _run(self, items: list, chunk: tuple | None) -> list:
        """Run the steps of the prepared batches ``items`` ((batch, arrays, layout) each): as one chunk where
        they can be (``chunk``: :func:`jaxmd_dp.train.multi_step.chunk_inputs` of them), else one call each.
        Returns each step's metrics."""
        if chunk is not None:
            self.state, stacked = self.train_steps(self.state, self.stats, *chunk)
            self.chunked_steps += len(items) if len(items) > 1 else 0
            return [StepMetrics(stacked, i) for i in range(len(items))]
        steps = []
        for _, arrays, layout in items:
            self.state, metrics = self.train_step(self.state, self.stats, arrays, layout)
            steps.append(metrics)
        return steps

    def _trace_step(self, items: list, chunk: tuple | None) -> None:
        """Trace and lower the program that will run ``items`` (the step, or the chunk's loop)."""
        if chunk is not None:
            self.train_steps.trace(self.state, self.stats, *chunk).lower()
        else:
            _, arrays, layout = items[0]
            self.train_step.trace(self.state, self.stats, arrays, layout).lower()

    def request_stop(self, reason: str) -> None:
        """End the run after the current step, with a checkpoint of it (a callback's call, e.g.
        :class:`~jaxmd_dp.train.callbacks.EarlyStop`). [data parallel] Every process must ask alike."""
        self.stop_reason = reason

    def _load_callback_states(self) -> None:
        """A restarted run's callbacks continue from their states in its checkpoint (once)."""
        states, self._restored_callbacks = self._restored_callbacks, {}
        for cb in self.callbacks:
            if type(cb).__name__ in states:
                cb.load_state_dict(states[type(cb).__name__])

    def _open_outputs(self, start: int) -> None:
        """Before a fit: a run from step 0 refuses another run's directory; rank 0 writes out.json and
        run_info.json and opens the checkpoint directories (with ``enable_ema`` the EMA weights', with
        ``keep_best`` the best one's)."""
        if start == 0:
            self._check_fresh_output()
        if self.workers.is_writer:
            tc = self.config.training
            self.out.mkdir(parents=True, exist_ok=True)
            self.write_out_json()
            self.checkpointer = self.checkpointer or Checkpointer(self.out / tc.save_ckpt, tc.max_ckpt_keep)
            if tc.enable_ema and self.ema_checkpointer is None:
                keep = tc.ema_ckpt_keep or tc.max_ckpt_keep
                self.ema_checkpointer = Checkpointer(self.out / ema_checkpoint_dir(tc.save_ckpt), keep)
            if tc.keep_best and self.best_checkpointer is None:
                self.best_checkpointer = Checkpointer(self.out / tc.save_ckpt / BEST, 1)

    def _window(self, step: int, total: int, metrics: dict, windows: list, steps: int, t_window: float) -> Window:
        """The learning-curve numbers of ``step``: the step's training metrics, [data parallel] rank 0's
        validation (none without ``training.disp_training``), the window's time (appended to ``windows``)."""
        train = train_metrics(metrics)
        lr = float(metrics["lr"])
        shown = self.workers.is_writer and self.config.training.disp_training
        valid = self.validate(self.state.params, lr) if shown else None
        valid_loss = valid.pop("loss_end", None) if valid else None
        now = time.perf_counter()
        windows.append((steps, now - t_window))
        per = _steady_rate(windows)
        return Window(step, train, valid, lr, now - t_window, (total - step) * per if per else 0.0, valid_loss)

    def _report_first_step(self, t0: float, items: list, chunk: tuple | None) -> None:
        """The first dispatch's time (with its compilation; ``t0``: when it started; ``items``: its prepared
        batches, run as ``chunk`` or one by one) and XLA's FLOPs estimate of one step."""
        jax.block_until_ready(self.state.step)
        self.first_step_s = time.perf_counter() - t0
        what = "first training step" if len(items) == 1 else f"first {len(items)} training steps"
        self.log(f"{what} (including compilation): {self.first_step_s:.1f} s")
        if self.workers.is_writer or self.workers.log_mode != "master":
            self._log_step_cost(*items[0], chunk)

    def _log_step_cost(self, batch: dict, arrays: dict, layout: BatchLayout, chunk: tuple | None = None) -> None:
        """XLA's FLOPs estimate of the training step just run on ``batch`` (this process's batch; arrays
        and layout: what :meth:`prepare` made of it): jax has the step's lowering and executable cached
        by then, so this compiles nothing."""
        try:
            if chunk is None:
                cost = step_cost(self.train_step, self.state, self.stats, arrays, layout)
            else:  # the loop's program: XLA counts its body (one step) once
                cost = step_cost(self.train_steps, self.state, self.stats, *chunk)
        except Exception as e:  # the summary must never stop a training  # noqa: BLE001
            self.log(f"(no FLOP estimate: {type(e).__name__}: {e})")
            cost = {}
        self.step_cost = cost
        if "flops" in cost:
            self.log(format_cost(cost, int(batch["natoms"]), int(np.shape(batch["coord"])[-3])))

    def _summary(self, windows) -> dict:
        per = _steady_rate(windows)
        steps = sum(n for n, _ in windows)
        if per and self.config.training.time_training and self.config.training.disp_training:
            self.log(f"average training time: {per:.4f} s/batch (excluding the first window)")
        if self.steps_per_dispatch > 1:
            k = self.steps_per_dispatch
            self.log(f"steps per dispatch: up to {k} ({self.chunked_steps} of {steps} steps ran several per dispatch)")
        return {
            "steps_per_dispatch": self.steps_per_dispatch,
            "chunked_steps": self.chunked_steps,
            "steps": steps,
            "s_per_step": per,
            "first_window_s": windows[0][1] if windows else None,
            "startup_s": self.startup_s,
            "first_step_s": getattr(self, "first_step_s", None),
        }

    def model_summary(self) -> str:
        """Parameters per net (XLA's FLOPs estimate of a training step follows its first call)."""
        return format_summary(param_counts(weights(self.state.params)))

    # ------------------------------------------------------------------ batches
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

    def layout_for(self, batch: dict) -> BatchLayout:
        """The step layout of ``batch``'s shape; a box its neighbour-list spec did not see gets a new spec."""
        key = (int(batch["natoms"]), bool(batch["pbc"]))
        layout = self.layouts[key]
        if batch["pbc"] and not box_fits(layout.spec, batch["box"], self._fitting_boxes):
            spec = neighbor.allocate(batch["coord"], batch["box"], self.hyper.rcut, layout.spec.sel)
            layout = self.layouts[key] = layout._replace(spec=spec)
        return layout

    # ------------------------------------------------------------------ checkpoints and outputs
    def checkpoint(self, best: bool = False, replace: bool = False) -> None:
        """Save the state at its step (``best``: as the best one, ``<save_ckpt>/best``; ``replace``: over a
        checkpoint of that step). [data parallel] Collective: every process's sampler states are gathered,
        rank 0 writes."""
        self._sampler_states = self.batches.gather_state(self.workers)
        if self.workers.is_writer:
            self.save_checkpoint(best, replace)

    def change_bias_after_training(self) -> None:
        """``training.change_bias_after_training``: the energy bias changed on the statistics' frames of the
        training data (DeePMD-kit's "change-by-statistic", :func:`jaxmd_dp.train.finetune.bias_after_training`)
        and the last checkpoint saved again with it. [data parallel] Collective: rank 0 computes."""
        stats = self.workers.broadcast(
            finetuning.bias_after_training(
                self.config,
                self.hyper,
                weights(jax.device_get(self.state.params)),
                self.stats,
                self.train_data,
                self.seed,
                self.log,
            )
            if self.workers.is_writer
            else None
        )
        self.stats = Stats(*(jax.device_put(s) for s in stats))
        self.checkpoint(replace=True)

    def save_checkpoint(self, best: bool = False, replace: bool = False) -> None:
        """Rank 0: the state in the checkpoint directory and, with ``enable_ema``, the moving average in the
        EMA one; ``best``: the state alone, in the best checkpoint's directory; ``replace``: over checkpoints
        of that step."""
        step = int(self.state.step)
        meta = self._meta()
        saves = [(self.best_checkpointer if best else self.checkpointer, state_tree(self.state, self.stats), meta)]
        if not best and self.state.ema is not None:
            ema = weights(jax.tree_util.tree_map(np.asarray, self.state.ema))
            saves.append((self.ema_checkpointer, weights_tree(step, ema, self.stats), {**meta, "weights_only": True}))
        for ckpt, tree, m in saves:
            try:
                ckpt.save(step, tree, m, replace=replace)
            except OSError as e:
                last = ckpt.latest_step()
                raise InputError(
                    f"{ckpt.directory}: cannot save checkpoint {step} ({e.strerror or e}); "
                    f"the last complete checkpoint is {last}"
                ) from None
            self.log(f"saved checkpoint {ckpt.directory}/{step}")

    def _meta(self) -> dict:
        return {
            "step": int(self.state.step),
            "config": self.config.to_dict(),
            "hyper": self.hyper.to_dict(),
            "seed": self.seed,
            "train_sampler": self.train_data.state_dict(),
            # [data parallel] every worker's sampler state (gathered by checkpoint() when several processes)
            **(
                (
                    self.batches.gather_state(self.workers)
                    if self.workers.nprocs == 1
                    else getattr(self, "_sampler_states", None)
                )
                or {}
            ),
            "valid_sampler": self.valid_data.state_dict() if self.valid_data else None,
            "workers": self.workers.size,
            "ema": self.state.ema is not None,
            "callbacks": {type(cb).__name__: st for cb in self.callbacks if (st := cb.state_dict()) is not None},
            "jaxmd_dp": __version__,
            "jax": jax.__version__,
        }

    def write_out_json(self) -> None:
        d = self.config.to_dict()
        d["model"]["descriptor"]["sel"] = list(self.hyper.sel)
        d["training"]["seed"] = self.seed
        (self.out / "out.json").write_text(json.dumps(d, indent=2))
        (self.out / "run_info.json").write_text(json.dumps(run_info(self.seed, self.workers.size), indent=2))

    def _check_fresh_output(self) -> None:
        """An :class:`InputError` (on every process) before a run from step 0 writes into an output directory
        that holds another run's checkpoints: its lcurve would be overwritten and its first save would
        collide with them, steps later. The CLI refuses such a directory unless ``--force``."""
        error = None
        if self.workers.is_writer:
            ckpt = self.out / self.config.training.save_ckpt
            steps = checkpoint_steps(ckpt)
            if steps:
                error = (
                    f"{self.out}: already holds a training run (checkpoints of steps {steps} in {ckpt.name}); "
                    f"continue it with restart={str(self.out)!r} (CLI: --restart), or train into another "
                    "directory"
                )
        error = self.workers.broadcast(error)  # [data parallel] every process stops, none waits for the others
        if error is not None:
            raise InputError(error)

    # ------------------------------------------------------------------ validation and evaluation
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
        while this thread compiles the first training step (a shorter cold start than one compile after
        the other, for a higher peak memory). Called once the training step is traced and lowered: tracing
        is Python, which holds the interpreter lock, so two traces side by side only take turns and delay
        the step's compile (started before the step's trace, the cold start was longer). The future
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

    @property
    def model(self):
        """The current model as a :class:`jaxmd_dp.model.trained.Model` (``.energy_and_forces(coord, box, atype)``)."""
        return Model(self.hyper, self.state.params, self.stats)  # split per net by Model

    def evaluate(self, system: str | System, nframes: int = 0) -> dict:
        """dp-test errors of the current model on a system (path or :class:`System`): rmse/mae of energy
        (total and per atom), force and virial where labelled, as {name: value}."""
        from jaxmd_dp.model.evaluate import errors, predict_system

        if not isinstance(system, System):
            system = load_system(system, list(self.hyper.type_map))
        return {k: v for k, (v, _) in errors(system, predict_system(self.model.evaluator, system, nframes)).items()}


def _end(callbacks: list[Callback], trainer: Trainer) -> None:
    """Every callback's ``on_train_end``, in order, even when one raises (the first error is raised after)."""
    error = None
    for cb in callbacks:
        try:
            cb.on_train_end(trainer)
        except Exception as e:  # noqa: BLE001
            error = error or e
    if error is not None:
        raise error


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
    return {
        "seed": seed,
        "workers": nworkers,
        "versions": versions,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "devices": [str(d) for d in jax.devices()],
        "command": " ".join(sys.argv),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def _steady_rate(windows) -> float | None:
    """Seconds per step, excluding the first window (compilation)."""
    rest = windows[1:]
    n = sum(k for k, _ in rest)
    return sum(t for _, t in rest) / n if n else None


def train_and_evaluate(config: Config, workdir: str | Path, **kwargs) -> Trainer:
    """Train per ``config`` into ``workdir`` and return the trainer (flax-examples style entry point)."""
    trainer = Trainer(config, workdir, **kwargs)
    trainer.fit()
    return trainer
