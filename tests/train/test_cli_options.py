"""`train` options users bring from DeePMD-kit: -l/--log-path, --log-level, --init-frz-model, the
model summary (parameters per net, FLOPs per step), and the persistent compilation cache."""

import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tiny import tiny_cu_dict, write_config

from jaxmd_dp.cli import freeze
from jaxmd_dp.cli import train as train_cli
from jaxmd_dp.cli.util import run_cli
from jaxmd_dp.model.energy import param_shapes
from jaxmd_dp.runtime.compile_cache import COMPILE_CACHE_MIN_SECONDS, compile_cache_dir
from jaxmd_dp.train.checkpoint import load_trained


@pytest.fixture(scope="module")
def quiet_run(tmp_path_factory):
    """2 steps through the CLI with the console at WARNING and the full log in a file."""
    tmp = tmp_path_factory.mktemp("logrun")
    cfg = write_config(tmp / "in.json", tiny_cu_dict(numb_steps=2))
    out, logf = tmp / "run", tmp / "logs" / "train.log"
    rc = run_cli(
        train_cli.main,
        [cfg, "-o", str(out), "-l", str(logf), "--log-level", "WARNING", "--compile-cache", str(tmp / "xla")],
    )
    return rc, tmp, out, logf


def test_compile_cache_written(quiet_run, monkeypatch):
    """--compile-cache DIR points jax's persistent cache there: compiled programs land in DIR (a later
    run loads them). (The run's own train step may already be in this test process's in-memory cache from
    earlier tests, so a fresh program is compiled here to see the entry appear.)"""
    if os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        pytest.skip("JAX_COMPILATION_CACHE_DIR is set: jax's own cache setting wins")
    _, tmp, _, _ = quiet_run
    assert jax.config.jax_compilation_cache_dir == str(tmp / "xla")
    if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in os.environ:  # the neighbour scan's compile is kept too
        assert jax.config.jax_persistent_cache_min_compile_time_secs == COMPILE_CACHE_MIN_SECONDS < 1.0
    before = set((tmp / "xla").iterdir())
    min_time = jax.config.jax_persistent_cache_min_compile_time_secs
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    try:
        unique = float(np.random.default_rng().random())  # a program no earlier test compiled
        jax.block_until_ready(jax.jit(lambda x: jnp.sin(x) * unique)(jnp.ones(3)))
    finally:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", min_time)
    assert set((tmp / "xla").iterdir()) - before
    monkeypatch.delenv("JAXMD_DP_COMPILE_CACHE", raising=False)
    assert compile_cache_dir(None) == os.path.expanduser("~/.cache/jaxmd_dp/xla")
    assert compile_cache_dir("off") is None and compile_cache_dir(str(tmp)) == str(tmp)
    monkeypatch.setenv("JAXMD_DP_COMPILE_CACHE", "none")
    assert compile_cache_dir(None) is None


def test_log_path_and_level(quiet_run, capsys):
    rc, _, out, logf = quiet_run
    assert rc == 0
    text = logf.read_text()
    assert "batch       2: trn" in text and "average training time" in text and "saved checkpoint" in text
    assert "first training step (including compilation):" in text


def test_model_summary_counts_and_flops(quiet_run):
    _, _, out, logf = quiet_run
    text = logf.read_text()
    hyper, params, _ = load_trained(out)
    sizes = [int(np.prod(x.shape)) for x in jax.tree_util.tree_leaves(param_shapes(hyper))]
    total = int(re.search(r"^\s+total\s+([\d,]+)$", text, re.M).group(1).replace(",", ""))
    assert total == sum(sizes)
    for net in ("descriptor/embed_0", "fitting/fit_0"):
        assert re.search(rf"^\s+{net}\s+[\d,]+$", text, re.M), net
    gflop = float(re.search(r"training step \(1 frame\(s\) x (\d+) atoms\): ([\d.e+-]+) GFLOP", text).group(2))
    # at least the fitting net's forward matmuls (2 flops per weight per atom) times 3 for forces and gradients
    fit_weights = sum(int(np.prod(x.shape)) for x in jax.tree_util.tree_leaves(param_shapes(hyper)["fitting"]))
    assert gflop * 1e9 > 3 * 2 * fit_weights * 32


def test_init_frz_model(quiet_run):
    """Start a new training from a frozen model file: its statistics carry over (they are not trained)."""
    rc, tmp, out, _ = quiet_run
    frozen = tmp / "model.jaxdp"
    assert run_cli(freeze.main, ["-m", str(out), "-o", str(frozen)]) == 0
    cfg = write_config(tmp / "in2.json", tiny_cu_dict(numb_steps=1))
    out2, logf = tmp / "run2", tmp / "run2.log"
    assert (
        run_cli(
            train_cli.main,
            [cfg, "-o", str(out2), "--init-frz-model", str(frozen), "-l", str(logf), "--log-level", "ERROR"],
        )
        == 0
    )
    assert f"initialised weights and statistics from {frozen}" in logf.read_text()
    assert "data statistics in" not in logf.read_text()
    _, _, s0 = load_trained(frozen)
    _, _, s1 = load_trained(out2)
    for a, b in zip(s0, s1):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize(
    "args,msg",
    [
        (["--log-level", "LOUD"], "--log-level 'LOUD'"),
        (["--init-frz-model", "{tmp}"], "not a file"),
        (["--init-frz-model", "{tmp}/x.jaxdp", "--init-model", "{tmp}"], "give only one of"),
    ],
)
def test_bad_options_one_line(tmp_path, capsys, args, msg):
    cfg = write_config(tmp_path / "in.json", tiny_cu_dict(numb_steps=1))
    args = [a.format(tmp=tmp_path) for a in args]
    assert run_cli(train_cli.main, [cfg, "-o", str(tmp_path / "o")] + args) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and msg in err[0]


@pytest.mark.parametrize(
    "numb_steps, training, traced",
    [
        (9, {"steps_per_dispatch": 1}, "4-8"),  # one step per dispatch: steps 4-8 after 3 of warm-up
        (30, {"disp_freq": 20}, "11-20"),  # 10 per dispatch: step 3 ran in the first, so the second is traced
        (4, {"disp_freq": 20}, None),  # all 4 steps in one dispatch: nothing after warm-up, said so
    ],
    ids=["one_per_dispatch", "ten_per_dispatch", "nothing_after_warm_up"],
)
def test_profile_trace(tmp_path, numb_steps, training, traced):
    """--profile DIR writes a jax.profiler trace of steps after warm-up, whole dispatches, holding the training
    step's XLA ops, and the log names the steps it holds; a run with no dispatch after warm-up says so."""
    import gzip
    import json

    cfg = write_config(tmp_path / "in.json", tiny_cu_dict(numb_steps=numb_steps, **training))
    prof, logf = tmp_path / "prof", tmp_path / "log"
    assert (
        run_cli(
            train_cli.main,
            [cfg, "-o", str(tmp_path / "o"), "--profile", str(prof), "-l", str(logf), "--log-level", "ERROR"],
        )
        == 0
    )
    traces = list(prof.rglob("*.trace.json.gz"))
    if traced is None:
        assert "no profile written" in logf.read_text() and not traces
        return
    assert f"profiled steps {traced} into" in logf.read_text()
    assert len(traces) == 1
    names = {e.get("name", "") for e in json.load(gzip.open(traces[0]))["traceEvents"]}
    assert any("train_step" in n for n in names), sorted(names)[:20]
