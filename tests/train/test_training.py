"""Short training runs on real water data with a small model: loss decreases, restart is exact,
checkpoints are usable by `test`, outputs are DeePMD-kit's."""

import json
import threading

import jax
import numpy as np
import pytest
from shared_paths import require  # noqa: E402
from tiny import small_water_model

from jaxmd_dp.api import LivePlot
from jaxmd_dp.config import config_from_dict
from jaxmd_dp.train import Trainer, step
from jaxmd_dp.train.callbacks import Callback
from jaxmd_dp.train.lcurve import line as lcurve_line


def small_config(numb_steps=100, **training):
    water = require("water")
    d = {
        "model": small_water_model(),
        "learning_rate": {"type": "exp", "start_lr": 1e-3, "stop_lr": 1e-5, "decay_steps": 20},
        "loss": {"start_pref_e": 0.02, "limit_pref_e": 1, "start_pref_f": 1000, "limit_pref_f": 1},
        "training": {
            "training_data": {"systems": [str(water / f"data_{k}") for k in range(3)], "batch_size": 1},
            "validation_data": {"systems": [str(water / "data_3")], "batch_size": 1, "numb_btch": 1},
            "numb_steps": numb_steps,
            "seed": 7,
            "disp_freq": 10,
            "save_freq": 50,
            "max_ckpt_keep": 3,
            "tensorboard": True,
            "tensorboard_freq": 5,
            **training,
        },
    }
    return config_from_dict(d)


def lcurve_rows(path):
    return [ln for ln in path.read_text().splitlines() if not ln.startswith("#")]


@pytest.fixture(scope="module")
def compile_stages():
    """(stage, function name, thread name) of each trace, lowering and XLA compile during ``full_run``'s
    training, in the order they ended."""
    return []


TRAIN_PROGRAMS = ("jit(train_step)", "jit(train_steps)")  # one step per dispatch, several (train.multi_step)

STAGES = {
    "/jax/core/compile/jaxpr_trace_duration": "trace",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
    "/jax/core/compile/backend_compile_duration": "compile",
}


class Recorder(Callback):
    """Records every hook call (a user's callback)."""

    def __init__(self):
        self.calls = []

    def on_train_begin(self, trainer, start, total):
        self.calls.append(("begin", start, total))

    def on_step(self, trainer, step, batch, metrics):
        self.calls.append(("step", step, int(batch["sys_index"]), sorted(metrics)))

    def on_window(self, trainer, window):
        self.calls.append(("window", window))

    def on_checkpoint(self, trainer, step):
        saved = trainer.checkpointer.latest_step()  # the trainer's checkpoint callback ran first
        self.calls.append(("checkpoint", step, saved))

    def on_train_end(self, trainer):
        self.calls.append(("end",))


@pytest.fixture(scope="module")
def full_run(tmp_path_factory, compile_stages):
    """The 100-step run the tests compare with; a user callback (``trainer.recorder``) and, as the log, a
    live plot that echoes nothing (``trainer.plot``) watch it."""
    out = tmp_path_factory.mktemp("full")
    recorder, plot = Recorder(), LivePlot(echo=False)
    trainer = Trainer(small_config(), out, log=plot, callbacks=[recorder])
    trainer.recorder, trainer.plot = recorder, plot

    def listen(event, secs, fun_name=None, **kwargs):
        if event in STAGES:
            compile_stages.append((STAGES[event], fun_name, threading.current_thread().name))

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        summary = trainer.fit()
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    return trainer, out, summary


@pytest.fixture(scope="module")
def compiles(full_run, compile_stages):
    """(function name, thread name) of each XLA compile during ``full_run``'s training."""
    return [(name, thread) for stage, name, thread in compile_stages if stage == "compile"]


def test_loss_decreases_and_outputs(full_run):
    trainer, out, summary = full_run
    rows = lcurve_rows(out / "lcurve.out")
    steps = [int(r.split()[0]) for r in rows]
    assert steps == [1] + list(range(10, 101, 10))
    header = (out / "lcurve.out").read_text().splitlines()[0].split()
    assert header == ["#", "step", "rmse_val", "rmse_trn", "rmse_e_val", "rmse_e_trn", "rmse_f_val", "rmse_f_trn", "lr"]
    first, last = (np.array(rows[i].split()[1:], float) for i in (0, -1))
    assert last[1] < 0.5 * first[1], (first, last)  # rmse_trn
    assert last[-1] == pytest.approx(1e-3 * 0.01 ** (4 / 5), rel=0.05)  # lr of step index 99: 4 decays of 5
    out_json = json.loads((out / "out.json").read_text())
    assert out_json["model"]["descriptor"]["sel"] == [46, 92] and out_json["training"]["seed"] == 7
    assert sorted(p.name for p in (out / "model.ckpt").iterdir() if p.name.isdigit()) == ["100", "50"]
    assert summary["steps"] == 100


def test_user_callback_sees_each_lcurve_line(full_run):
    """A callback given to the Trainer is called at every step, at every lcurve line with that line's numbers
    (they format to the very line in lcurve.out), at every checkpoint (after the save) and at the end."""
    trainer, out, _ = full_run
    calls = trainer.recorder.calls
    assert calls[0] == ("begin", 0, 100) and calls[-1] == ("end",)
    steps = [c for c in calls if c[0] == "step"]
    assert [c[1] for c in steps] == list(range(1, 101))
    assert all(c[3] == ["lr", "nneigh_max", "rmse", "rmse_e", "rmse_f"] for c in steps)
    assert {c[2] for c in steps} <= {0, 1, 2}  # the batch: a training system's index
    windows = [c[1] for c in calls if c[0] == "window"]
    assert [w.step for w in windows] == [1] + list(range(10, 101, 10))
    rows = lcurve_rows(out / "lcurve.out")
    assert [lcurve_line(w.step, w.train, w.valid, w.lr).rstrip("\n") for w in windows] == rows
    assert all(w.wall_s > 0 and w.eta_s >= 0 for w in windows)
    assert [c[1:] for c in calls if c[0] == "checkpoint"] == [(50, 50), (100, 100)]

    def at(kind, step):
        return next(i for i, c in enumerate(calls) if c[0] == kind and getattr(c[1], "step", c[1]) == step)

    for k in (50, 100):  # a step's hooks in order: on_step, on_window, on_checkpoint, then the next step
        assert at("step", k) < at("window", k) < at("checkpoint", k) < (at("step", k + 1) if k < 100 else len(calls))


def test_live_plot_is_fed_the_lcurve_numbers(full_run):
    """The live plot, given as the trainer's log, is a callback too: it holds each lcurve line's numbers,
    as given, not parsed from text."""
    trainer, out, _ = full_run
    plot = trainer.plot
    rows = [np.array(r.split(), float) for r in lcurve_rows(out / "lcurve.out")]
    assert plot.steps == [int(r[0]) for r in rows]
    windows = [c[1] for c in trainer.recorder.calls if c[0] == "window"]
    for key in ("rmse", "rmse_e", "rmse_f"):
        assert plot.train[key] == [w.train[key] for w in windows]
        assert plot.valid[key] == [w.valid[key] for w in windows]
    assert plot.lr == [w.lr for w in windows]
    np.testing.assert_allclose(plot.train["rmse_f"], [r[6] for r in rows], rtol=5e-3)  # lcurve prints 3 digits


def test_restart_is_exact(full_run, tmp_path):
    _, full_out, _ = full_run
    out = tmp_path / "part"
    Trainer(small_config(numb_steps=100), out, log=lambda *a: None).fit(50)  # as if killed after step 50
    cfg = small_config(numb_steps=100)
    trainer = Trainer(cfg, out, restart=out, log=lambda *a: None)
    assert int(trainer.state.step) == 50
    trainer.fit()
    assert lcurve_rows(out / "lcurve.out") == lcurve_rows(full_out / "lcurve.out")


def test_checkpoint_keeps_the_per_weight_optimizer_state(full_run):
    """The optimizer packs the small weights (train.small_leaves), the checkpoint does not: its Adam moments
    are shaped as the weights, as in every earlier checkpoint, and equal the trainer's unpacked."""
    from jaxmd_dp.train.checkpoint import Checkpointer
    from jaxmd_dp.train.small_leaves import unpack_state

    trainer, out, _ = full_run
    saved, meta = Checkpointer(out / "model.ckpt", read_only=True).restore()
    assert meta["step"] == 100
    adam = saved["opt_state"][0]
    params = jax.tree_util.tree_structure(trainer.state.params)
    assert jax.tree_util.tree_structure(adam["mu"]) == params == jax.tree_util.tree_structure(adam["nu"])
    mine = unpack_state(jax.tree_util.tree_map(np.asarray, trainer.state.opt_state), trainer.state.params)[0]
    for name in ("mu", "nu"):
        for a, b in zip(jax.tree_util.tree_leaves(adam[name]), jax.tree_util.tree_leaves(getattr(mine, name))):
            assert np.array_equal(a, b)
    assert int(adam["count"]) == 100


def test_first_validation_compiled_beside_the_first_step(full_run, compiles, tmp_path, monkeypatch):
    """The first validation batch is drawn, and the evaluation step compiled for it, on a thread while the
    first training step compiles: the evaluation step compiles once, on that thread, and the learning
    curve is the one of validating after the step."""
    _, full_out, _ = full_run
    evals = [thread for name, thread in compiles if name == "jit(eval_step)"]
    assert len(evals) == 1 and evals[0].startswith("validation-ahead"), compiles
    assert any(name in TRAIN_PROGRAMS for name, _ in compiles)
    out = tmp_path / "after"
    monkeypatch.setattr(Trainer, "_prepare_validation_ahead", lambda self: None)
    after = Trainer(small_config(numb_steps=100), out, log=lambda *a: None)
    after.fit(10)
    assert lcurve_rows(out / "lcurve.out") == lcurve_rows(full_out / "lcurve.out")[:2]


def test_training_step_traced_before_the_evaluation_step(full_run, compile_stages):
    """The first training step is traced and lowered before the thread that compiles the evaluation step
    starts (tracing is Python: two traces side by side only take turns); the step's call then reuses that
    trace and lowering, so each happens once."""
    stages = [
        (stage, "train" if "train_step" in (name or "") else "eval" if "eval_step" in (name or "") else None)
        for stage, name, _ in compile_stages
    ]
    for stage in ("trace", "lower", "compile"):
        assert stages.count((stage, "train")) == 1, compile_stages
    assert stages.index(("lower", "train")) < stages.index(("trace", "eval")), compile_stages


def test_evaluation_step_follows_the_run_length(full_run, tmp_path):
    """A short run's evaluation step is compiled for a short compile, a run of many validation batches
    for a fast step (:func:`jaxmd_dp.train.step.make_eval_step`)."""
    trainer, _, _ = full_run
    assert trainer.eval_batches() == (100 // 10 + 2) * 1 < step.MANY_EVALS
    assert trainer.eval_step is step._eval_step(trainer.hyper, trainer.prefs, trainer.schedule.start_lr, True)
    long = Trainer(small_config(numb_steps=10_000), tmp_path / "long", log=lambda *a: None)
    assert long.eval_batches() == 10_000 // 10 + 2 >= step.MANY_EVALS
    assert long.eval_step is step._eval_step(long.hyper, long.prefs, long.schedule.start_lr, False)
    assert long.eval_step is not trainer.eval_step


def test_fresh_run_refuses_an_earlier_runs_directory(full_run):
    """A new Trainer from step 0 into a directory holding another run's checkpoints (a notebook cell run
    twice) stops before training with a one-line InputError naming the directory and the way to continue,
    and leaves the earlier run's outputs as they were (before, orbax failed at the first save, steps later,
    after the lcurve had been overwritten)."""
    from jaxmd_dp.errors import InputError

    _, full_out, _ = full_run
    before = (full_out / "lcurve.out").read_text()
    with pytest.raises(InputError, match=r"already holds a training run .*restart=") as e:
        Trainer(small_config(), full_out, log=lambda *a: None).fit()
    assert "\n" not in str(e.value) and str(full_out) in str(e.value)
    assert (full_out / "lcurve.out").read_text() == before


def test_training_step_compiles_once(full_run, compiles):
    """The training step compiles once in the whole run, on the main thread (the FLOP estimate after the
    first step and later steps find it in jax's caches): the loop of several steps per dispatch, which
    takes single steps too (the frames are kept on the device); and the list builder never on the main
    thread."""
    steps = [(name, thread) for name, thread in compiles if name in TRAIN_PROGRAMS]
    assert steps == [("jit(train_steps)", "MainThread")], compiles
    assert not [t for name, t in compiles if name == "jit(build)" and t == "MainThread"], compiles


def test_next_batch_prepared_on_a_thread(full_run, compiles, tmp_path, monkeypatch):
    """Each step's batch is prepared (the lists of new frames built and stored) on the batch-ahead thread
    while the step before it runs: the programs that build them compile there, never on the main thread,
    and the learning curve is the one of preparing every batch on the main thread just before its step."""
    import concurrent.futures

    from jaxmd_dp.train import loop

    _, full_out, _ = full_run
    builds = [thread for name, thread in compiles if name in ("jit(store)", "jit(gather)")]
    assert builds and all(t.startswith("batch-ahead") or t.startswith("validation-ahead") for t in builds), compiles
    assert any(t.startswith("batch-ahead") for t in builds), compiles

    class Inline:  # BatchesAhead without the thread
        def __init__(self, prepare, name="batch-ahead"):
            self.prepare = prepare

        def submit(self, batch):
            done = concurrent.futures.Future()
            done.set_result((batch, *self.prepare(batch)))
            return done

        def close(self, wait=True):
            pass

    monkeypatch.setattr(loop, "BatchesAhead", Inline)
    out = tmp_path / "inline"
    Trainer(small_config(numb_steps=100), out, log=lambda *a: None).fit(60)  # past the checkpoint at 50
    assert lcurve_rows(out / "lcurve.out") == lcurve_rows(full_out / "lcurve.out")[:7]


def test_pair_packing_changes_no_number(full_run, tmp_path):
    """Embedding nets on real pairs only (the default), with the neighbour list cut to the slots the data
    fills, train exactly as on every sel slot."""
    trainer, full_out, _ = full_run
    assert all(lay.pack is not None for lay in trainer.layouts.values())  # water leaves ~1/3 of sel empty
    assert all(sum(lay.spec.sel) < sum(trainer.hyper.sel) for lay in trainer.layouts.values())  # the cut list
    assert all(lay.uniform_empty for lay in trainer.layouts.values())  # one empty row per section (per-type stats)
    assert all(lay.share for lay in trainer.layouts.values())  # once per pair of same-type atoms (pair_sharing)
    out = tmp_path / "dense"
    dense = Trainer(small_config(numb_steps=100, pair_packing=False), out, log=lambda *a: None)
    assert all(lay.pack is None for lay in dense.layouts.values())
    dense.fit(20)
    assert lcurve_rows(out / "lcurve.out") == lcurve_rows(full_out / "lcurve.out")[:3]


def test_pair_sharing_changes_no_number(full_run, tmp_path):
    """The nets once per pair of same-type atoms (the default, training.pair_sharing) or once per real
    pair: the same learning curve, with smaller blocks."""
    trainer, full_out, _ = full_run
    out = tmp_path / "unshared"
    plain = Trainer(small_config(numb_steps=100, pair_sharing=False), out, log=lambda *a: None)
    assert not any(lay.share for lay in plain.layouts.values())
    for key, lay in plain.layouts.items():
        assert all(s < p for s, p in zip(trainer.layouts[key].pack, lay.pack))
    plain.fit(20)
    assert lcurve_rows(out / "lcurve.out") == lcurve_rows(full_out / "lcurve.out")[:3]


def test_pair_sharing_off_without_per_type_statistics(monkeypatch, tmp_path):
    """Statistics whose slots of one section differ (not DeePMD's per-type ones, e.g. an --init-model of
    another code's) may give a pair's two slots different s: the trainer then runs one row per slot,
    with the blocks of pair_sharing false. So it does, saying why, where the partner search would not fit
    in memory."""
    from jaxmd_dp.train import layouts

    monkeypatch.setattr(layouts, "uniform_empty", lambda *a: False)
    mixed = Trainer(small_config(numb_steps=4), tmp_path / "mixed", log=lambda *a: None)
    plain = Trainer(small_config(numb_steps=4, pair_sharing=False), tmp_path / "plain", log=lambda *a: None)
    assert not any(lay.share for lay in mixed.layouts.values())
    assert {k: lay.pack for k, lay in mixed.layouts.items()} == {k: lay.pack for k, lay in plain.layouts.items()}
    monkeypatch.undo()
    monkeypatch.setattr(layouts, "PARTNER_SEARCH_BYTES", 1000)  # batches too large for the partner search
    lines = []
    big = Trainer(small_config(numb_steps=4), tmp_path / "big", log=lines.append)
    assert not any(lay.share for lay in big.layouts.values())
    assert any("pair_sharing off" in ln for ln in lines)


def test_neighbor_lists_built_in_the_step_change_no_number(full_run, tmp_path):
    """The default run passes each training frame's neighbour list to the step (training.neighbor_cache_mb)
    and builds the validation batches' lists in the evaluation step (not merged: nothing stored for them);
    with the cache off the training step builds them itself too, and the learning curve is the same."""
    trainer, full_out, _ = full_run
    assert trainer.neighbor_cache.used > 0 and not trainer.valid_neighbor_cache.enabled
    assert "valid" not in trainer.merged
    out = tmp_path / "in_step"
    plain = Trainer(small_config(numb_steps=100, neighbor_cache_mb=0), out, log=lambda *a: None)
    assert not plain.neighbor_cache.enabled and not plain.valid_neighbor_cache.enabled
    plain.fit(20)
    assert lcurve_rows(out / "lcurve.out") == lcurve_rows(full_out / "lcurve.out")[:3]


def test_embedding_table_trains_like_exact_nets(full_run, tmp_path):
    """training.embedding_table tabulates the embedding nets on 64 nodes: the learning curve is the exact
    one to the digits lcurve prints. The table needs no packed blocks, but the list still holds only the
    slots the data fills."""
    trainer, full_out, _ = full_run
    out = tmp_path / "table"
    tab = Trainer(small_config(numb_steps=100, embedding_table=64), out, log=lambda *a: None)
    assert all(lay.table == 64 and lay.pack is None for lay in tab.layouts.values())
    assert [lay.spec.sel for lay in tab.layouts.values()] == [lay.spec.sel for lay in trainer.layouts.values()]
    tab.fit(20)
    got = np.array([r.split()[1:] for r in lcurve_rows(out / "lcurve.out")], float)
    want = np.array([r.split()[1:] for r in lcurve_rows(full_out / "lcurve.out")[:3]], float)
    np.testing.assert_allclose(got, want, rtol=2e-3)  # lcurve prints 3–4 digits


def test_checkpoint_usable_by_test(full_run, capsys):
    from jaxmd_dp.cli import test as dptest
    from jaxmd_dp.cli.util import run_cli

    trainer, out, _ = full_run
    rc = run_cli(dptest.main, ["-m", str(out), "-s", str(require("water/data_3")), "-n", "4"])
    text = capsys.readouterr().out
    assert rc == 0 and "Force  RMSE" in text
    rmse_f = float(text.split("Force  RMSE        :")[1].split()[0])
    assert rmse_f == pytest.approx(
        trainer.evaluate(require("water/data_3"), 4)["rmse_f"], rel=1e-6
    )  # printed with 7 digits


def test_tensorboard_events_from_training(full_run):
    """training.tensorboard writes the lcurve quantities, lr and step time, readable by TensorBoard."""
    from tensorboard.backend.event_processing import event_accumulator

    _, out, _ = full_run
    acc = event_accumulator.EventAccumulator(str(out / "log"), size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"rmse/trn", "rmse_f/trn", "rmse_e/val", "lr", "step_time"} <= tags, tags
    steps = [e.step for e in acc.Scalars("rmse_f/trn")]
    assert steps[0] == 1 and steps[-1] == 100 and 5 in steps
    lc = {int(r.split()[0]): float(r.split()[6]) for r in lcurve_rows(out / "lcurve.out")}
    tb = {e.step: e.value for e in acc.Scalars("rmse_f/trn")}
    assert all(abs(tb[k] - v) <= 0.006 * v for k, v in lc.items())  # lcurve prints 3 digits
