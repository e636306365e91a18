"""Never lose a run: SIGKILL + restart equals an uninterrupted run, SIGTERM saves, NaN guard, determinism."""

import copy
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from train.tiny import tiny_cu_dict, write_config

from jaxmd_dp.config import config_from_dict
from jaxmd_dp.train import Trainer
from jaxmd_dp.train.checkpoint import load_model_from_checkpoint

pytestmark = pytest.mark.slow
TRAIN = [sys.executable, "-m", "jaxmd_dp.train"]


def rows(path):
    return [ln for ln in path.read_text().splitlines() if not ln.startswith("#")]


def same_params(a, b):
    pa, pb = load_model_from_checkpoint(a)[1], load_model_from_checkpoint(b)[1]
    import jax

    la, lb = jax.tree_util.tree_leaves(pa), jax.tree_util.tree_leaves(pb)
    return len(la) == len(lb) and all(np.array_equal(x, y) for x, y in zip(la, lb))


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted 40-step run, as a subprocess (the CLI)."""
    d = tmp_path_factory.mktemp("ref")
    cfg = write_config(d / "input.json", tiny_cu_dict())
    r = subprocess.run(TRAIN + [cfg, "-o", str(d / "out")], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    return d / "out", cfg


def wait_for_line(path, step, proc, timeout=300):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if path.exists() and any(int(r.split()[0]) >= step for r in rows(path)):
            return
        if proc.poll() is not None:
            raise AssertionError(f"training ended early: {proc.stderr.read()[-2000:]}")
        time.sleep(0.05)
    raise AssertionError("timed out")


def test_sigkill_then_restart_equals_uninterrupted(reference, tmp_path):
    ref_out, cfg = reference
    out = tmp_path / "out"
    kill_at = random.Random().choice([11, 15, 20, 25, 30])
    p = subprocess.Popen(TRAIN + [cfg, "-o", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_for_line(out / "lcurve.out", kill_at, p)
    p.send_signal(signal.SIGKILL)
    p.wait()
    r = subprocess.run(
        TRAIN + [cfg, "-o", str(out), "--restart", str(out)], capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert rows(out / "lcurve.out") == rows(ref_out / "lcurve.out"), f"killed at lcurve step {kill_at}"
    assert same_params(out, ref_out)


def test_sigterm_saves_then_exits_zero(reference, tmp_path):
    _, cfg = reference
    out = tmp_path / "out"
    # far more steps than the signal takes to arrive (the tiny model's 40 steps can finish within ~50 ms)
    p = subprocess.Popen(
        TRAIN + [cfg, "-o", str(out), "training.save_freq=1000000", "training.numb_steps=100000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for_line(out / "lcurve.out", 5, p)
    p.send_signal(signal.SIGTERM)
    try:
        stdout, stderr = p.communicate(timeout=300)
    finally:
        p.kill()
    assert p.returncode == 0, stderr[-2000:]
    assert "received SIGTERM" in stdout
    steps = [int(s.name) for s in (out / "model.ckpt").iterdir() if s.name.isdigit()]
    assert len(steps) == 1 and 5 <= steps[0] < 100000  # saved at the step it was stopped, not at the end


def test_identical_runs_identical_lcurves(tmp_path):
    outs = []
    for k in range(2):
        cfg = config_from_dict(tiny_cu_dict(numb_steps=15))
        Trainer(cfg, tmp_path / f"run{k}", log=lambda *a: None).fit()
        outs.append(rows(tmp_path / f"run{k}" / "lcurve.out"))
    assert outs[0] == outs[1] and len(outs[0]) == 4
    info = (tmp_path / "run0" / "run_info.json").read_text()
    assert '"seed": 3' in info and '"jax"' in info


def test_nan_in_data_stops_and_keeps_last_checkpoint(tmp_path):
    from jaxmd_dp.train.loop import TrainingDiverged

    cfg = config_from_dict(tiny_cu_dict(numb_steps=40))
    trainer = Trainer(cfg, tmp_path / "run", log=lambda *a: None)
    probe = copy.deepcopy(trainer.train_data)  # the same draws as the trainer's
    draws = [probe.next_batch()["frames"] for _ in range(13)]
    assert not set(draws[12]) & set(np.concatenate(draws[:12]))  # a frame first drawn at step index 12
    # NaN forces in that frame of the data (the trainer copies its frames to the device at the first draw)
    trainer.train_systems[0].force[draws[12]] = np.nan
    trainer.fit(10)  # checkpoint at 10
    good = load_model_from_checkpoint(tmp_path / "run")[1]
    with pytest.raises(
        TrainingDiverged, match=r"step 13: loss or gradient is not finite .*data.000.*checkpoint \(10\)"
    ):
        trainer.fit(40)
    steps = sorted(int(s.name) for s in (tmp_path / "run" / "model.ckpt").iterdir() if s.name.isdigit())
    assert steps == [10]
    after = load_model_from_checkpoint(tmp_path / "run")[1]
    import jax

    assert all(np.array_equal(a, b) for a, b in zip(jax.tree_util.tree_leaves(good), jax.tree_util.tree_leaves(after)))
    # the in-memory parameters are the last good ones too: finite
    assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree_util.tree_leaves(trainer.state.params))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_all_finite_sees_every_inf_and_nan_under_jit(dtype):
    import jax
    import jax.numpy as jnp

    from jaxmd_dp.train.step import all_finite

    f = jax.jit(all_finite)
    # small leaves (summed packed) and one above SMALL_LEAF entries ("c")
    tree = {
        "a": jnp.ones((3, 4), dtype),
        "b": [jnp.full((5,), 1e30, dtype), jnp.zeros((2, 2), dtype)],
        "c": jnp.ones((40, 30), dtype),
    }
    assert bool(f(tree))
    for bad in (np.inf, -np.inf, np.nan):
        for path in (("a",), ("b", 0), ("b", 1), ("c",)):
            leaf = tree[path[0]] if len(path) == 1 else tree[path[0]][path[1]]
            poisoned = leaf.reshape(-1).at[-1].set(bad).reshape(leaf.shape)
            t = {"a": tree["a"], "b": list(tree["b"]), "c": tree["c"]}
            if len(path) == 1:
                t[path[0]] = poisoned
            else:
                t["b"][path[1]] = poisoned
            assert not bool(f(t)), (bad, path)
