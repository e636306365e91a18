"""Several training steps per dispatch (``training.steps_per_dispatch``, ``train.multi_step``): the same
learning curve and checkpoints as one step per dispatch (water and Cu, float64, to 1e-12), exact restarts
from a checkpoint mid-run, the NaN guard's step, and the key's checks."""

import copy

import jax
import numpy as np
import pytest
from shared_paths import require
from train.tiny import small_water_model, tiny_cu_dict

from jaxmd_dp.config import config_from_dict
from jaxmd_dp.errors import InputError
from jaxmd_dp.train import Trainer, multi_step
from jaxmd_dp.train.checkpoint import checkpoint_steps, load_model_from_checkpoint
from jaxmd_dp.train.guards import StopSignals
from jaxmd_dp.train.loop import TrainingDiverged
from jaxmd_dp.train.multi_step import AUTO_K, chunk_length, steps_per_dispatch
from jaxmd_dp.train.parallel import Workers

STEPS = 60
K = 5


def water_dict(**training):
    water = require("water")
    d = tiny_cu_dict(STEPS, **training)
    d["model"] = small_water_model()
    d["loss"] = {**d["loss"], "start_pref_v": 0, "limit_pref_v": 0}
    d["training"]["training_data"]["systems"] = [str(water / f"data_{i}") for i in range(3)]
    d["training"]["validation_data"]["systems"] = [str(water / "data_3")]
    return d


INPUTS = {"water": water_dict, "cu": lambda **t: tiny_cu_dict(STEPS, **t)}


def _quiet(*a, **k):
    pass


def rows(path):
    return [ln.split() for ln in path.read_text().splitlines() if not ln.startswith("#")]


def params(out):
    return jax.tree_util.tree_leaves(load_model_from_checkpoint(out)[1])


@pytest.fixture(scope="module", params=sorted(INPUTS))
def runs(request, tmp_path_factory):
    """(name, {1: (out, trainer), K: (out, trainer)}): the input trained 60 steps one step and up to K steps
    per dispatch."""
    out = {}
    for k in (1, K):
        d = tmp_path_factory.mktemp(f"{request.param}_k{k}")
        trainer = Trainer(config_from_dict(INPUTS[request.param](steps_per_dispatch=k)), d, log=_quiet)
        trainer.fit()
        out[k] = (d, trainer)
    return request.param, out


def test_chunk_length_stops_at_lines_checkpoints_and_the_end():
    # disp_freq 10, save_freq 20, K 5: chunks of up to 5 that end on a line, a checkpoint or the run's end
    assert [chunk_length(s, 40, 5, 10, 20) for s in (0, 1, 5, 6, 8, 10, 35, 36, 39)] == [1, 5, 5, 4, 2, 5, 5, 4, 1]
    assert chunk_length(1, 1000, 10, 1000, 1000) == 10
    assert chunk_length(10, 40, 5, 10, 12) == 2  # a checkpoint at 12
    assert chunk_length(10, 40, 1, 10, 20) == 1


def test_auto_is_several_steps_for_one_worker_per_process():
    assert steps_per_dispatch("auto", True) == AUTO_K > 1
    assert steps_per_dispatch("auto", False) == 1  # a device mesh
    assert Workers(size=2, nprocs=2).loops and not Workers(size=2, worker_ids=(0, 1), mesh=object()).loops
    assert steps_per_dispatch(5, True) == 5


def test_k_divides_the_line_period_where_all_k_steps_run(monkeypatch):
    # on a GPU every chunk runs K steps: K shrinks to divide the steps between lines and checkpoints
    monkeypatch.setattr(multi_step, "fixed_trips", lambda: False)
    assert steps_per_dispatch(10, True, 7) == 10  # n steps a chunk: nothing runs in vain
    monkeypatch.setattr(multi_step, "fixed_trips", lambda: True)
    assert [steps_per_dispatch(10, True, p) for p in (50, 7, 25, 1, 13)] == [10, 7, 5, 1, 1]
    assert steps_per_dispatch("auto", True, 100) == AUTO_K and steps_per_dispatch(50, True, 100) == 50


def test_processes_agree_on_signals_when_a_chunk_passes_the_sync_step():
    # [data parallel] chunks of K steps end at lines and checkpoints, not at multiples of the sync interval:
    # the processes exchange their signals whenever the steps just taken passed one
    calls = []
    workers = Workers(
        rank=0,
        size=2,
        nprocs=2,
        gather=lambda x: calls.append(x) or [x, "SIGTERM"],
        broadcast=lambda x: x,
    )
    signals = StopSignals()
    try:
        assert signals.agreed(workers, 8, 10, False, 5) is None and not calls  # 3 → 8
        assert signals.agreed(workers, 13, 10, False, 5) == "SIGTERM"  # 8 → 13 passed 10
        assert signals.agreed(workers, 17, 10, True, 4) == "SIGTERM" and len(calls) == 2  # a line or checkpoint
        assert signals.agreed(workers, 20, 10, False, 3) == "SIGTERM" and len(calls) == 3  # 17 → 20
    finally:
        signals.restore()


def test_chunks_give_the_learning_curve_of_single_steps(runs):
    name, out = runs
    one, many = rows(out[1][0] / "lcurve.out"), rows(out[K][0] / "lcurve.out")
    assert [r[0] for r in one] == [r[0] for r in many] and len(one) == STEPS // 5 + 1
    a, b = np.array(one, float), np.array(many, float)
    np.testing.assert_allclose(b, a, rtol=1e-12, atol=0, err_msg=name)
    for x, y in zip(params(out[1][0]), params(out[K][0])):
        np.testing.assert_allclose(y, x, rtol=1e-12, atol=1e-15)
    # the chunk's program ran (it was compiled), and checkpoints are at the same steps
    assert out[K][1].train_steps._cache_size() == 1 and out[1][1].train_steps is None
    assert out[K][1].chunked_steps == STEPS - 1  # all but step 1 (a learning-curve line)
    assert checkpoint_steps(out[1][0] / "model.ckpt") == checkpoint_steps(out[K][0] / "model.ckpt")
    # the logged FLOPs of a step: XLA counts the loop's body, one step, once
    one, loop = out[1][1].step_cost["flops"], out[K][1].step_cost["flops"]
    assert abs(loop - one) <= 0.01 * one, (one, loop)


def test_all_k_steps_kept_n_gives_the_same_run(runs, tmp_path, monkeypatch):
    """The GPU's loop (:func:`multi_step.fixed_trips`: all K steps run, the first n kept), here on the CPU:
    chunks shorter than K (step 1, before a line) drop their extra steps, so the run is the one-step run's."""
    name, out = runs
    monkeypatch.setattr(multi_step, "fixed_trips", lambda: True)
    multi_step.make_train_steps.cache_clear()
    try:
        trainer = Trainer(config_from_dict(INPUTS[name](steps_per_dispatch=K)), tmp_path, log=_quiet)
        trainer.fit()
    finally:
        multi_step.make_train_steps.cache_clear()
    assert trainer.chunked_steps == STEPS - 1
    a, b = np.array(rows(out[1][0] / "lcurve.out"), float), np.array(rows(tmp_path / "lcurve.out"), float)
    np.testing.assert_allclose(b, a, rtol=1e-12, atol=0)
    for x, y in zip(params(out[1][0]), params(tmp_path)):
        np.testing.assert_allclose(y, x, rtol=1e-12, atol=1e-15)


def test_restart_mid_run_is_exact(runs, tmp_path):
    name, out = runs
    cfg = config_from_dict(INPUTS[name](steps_per_dispatch=K))
    Trainer(cfg, tmp_path, log=_quiet).fit(30)
    Trainer(cfg, tmp_path, restart=tmp_path, log=_quiet).fit()
    assert rows(tmp_path / "lcurve.out") == rows(out[K][0] / "lcurve.out")
    assert all(np.array_equal(x, y) for x, y in zip(params(tmp_path), params(out[K][0])))


def test_nan_inside_a_chunk_stops_at_its_step(tmp_path):
    trainer = Trainer(config_from_dict(tiny_cu_dict(40, steps_per_dispatch=K)), tmp_path / "run", log=_quiet)
    probe = copy.deepcopy(trainer.train_data)  # the same draws as the trainer's
    draws = [probe.next_batch()["frames"] for _ in range(13)]
    assert not set(draws[12]) & set(np.concatenate(draws[:12]))  # a frame first drawn at step index 12
    trainer.train_systems[0].force[draws[12]] = np.nan  # step 13: inside the chunk of steps 11-15
    with pytest.raises(TrainingDiverged, match=r"step 13: loss or gradient is not finite .*checkpoint \(10\)"):
        trainer.fit()
    assert checkpoint_steps(tmp_path / "run" / "model.ckpt") == [10]
    assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree_util.tree_leaves(trainer.state.params))


def test_steps_per_dispatch_is_checked():
    for bad in (0, "10", 2.0):
        with pytest.raises(InputError, match=r"training.steps_per_dispatch"):
            config_from_dict(tiny_cu_dict(steps_per_dispatch=bad))


def test_sel_check_reads_a_chunks_counts_once():
    """SelCheck takes a chunk's neighbour counts at its first step, all of its steps' at once."""
    from types import SimpleNamespace

    from jaxmd_dp.train.callbacks import SelCheck
    from jaxmd_dp.train.multi_step import StepMetrics

    lines = []
    trainer = SimpleNamespace(
        hyper=SimpleNamespace(sel=(8, 8), type_map=("A", "B")),
        config=SimpleNamespace(training=SimpleNamespace(strict_sel=False)),
        log=lines.append,
    )
    check = SelCheck()
    check.on_train_begin(trainer, 0, 3)
    stacked = {"nneigh_max": jax.numpy.asarray([[3, 2], [9, 1], [5, 4]], jax.numpy.int32)}
    for i in range(3):
        check.on_step(trainer, i + 1, {}, StepMetrics(stacked, i))
    assert len(check.counts) == 1
    check.on_window(trainer, SimpleNamespace(step=3))
    assert check.nmax.tolist() == [9, 4]
    assert len(lines) == 1 and "reached [9, 4] > sel [8, 8]" in lines[0] and "at least [9, 8]" in lines[0]


def test_batches_of_two_shapes_run_one_per_dispatch_alike(tmp_path):
    """Two Cu systems of 32 and 16 atoms (batches merged into one padded shape, not rows of the store):
    the steps run one per dispatch, and the learning curve is that of steps_per_dispatch 1."""
    cu = require("cu_asc22")
    lines = {}
    for k in (1, K):
        d = tiny_cu_dict(20, steps_per_dispatch=k)
        d["training"]["training_data"]["systems"] += [str(cu / "iter.000000/02.fp/data.008")]
        trainer = Trainer(config_from_dict(d), tmp_path / f"k{k}", log=_quiet)
        trainer.fit()
        lines[k] = rows(tmp_path / f"k{k}" / "lcurve.out")
    assert trainer.chunked_steps == 0
    assert lines[1] == lines[K]
