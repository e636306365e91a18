"""DeePMD-kit's se_atten_v2 water input (../shared/bench/water_se_atten_v2.json) trains unchanged but for small
nets: the loss falls, the statistics are DeePMD-kit's mixed-types ones, a restart is exact, float32 trains, and
the outputs are usable by freeze, test and MD."""

import json

import numpy as np
import pytest
from shared_paths import require

from jaxmd_dp.config import load_config
from jaxmd_dp.train import Trainer

SMALL = [
    "model.descriptor.neuron=[4,8]",
    "model.descriptor.axis_neuron=4",
    "model.descriptor.attn=8",
    "model.descriptor.tebd_dim=4",
    "model.fitting_net.neuron=[16,16]",
    "training.validation_data.numb_btch=1",
    "training.disp_freq=5",
    "training.save_freq=10",
]


def config(*overrides, numb_steps=20):
    bench = require(require("water").parents[1] / "bench" / "water_se_atten_v2.json")
    return load_config(bench, [*SMALL, f"training.numb_steps={numb_steps}", *overrides])


def rows(path):
    return [ln.split() for ln in path.read_text().splitlines() if not ln.startswith("#")]


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("se_atten_v2")
    trainer = Trainer(config(), out, log=lambda *a: None)
    trainer.fit()
    return trainer, out


def test_trains_and_the_loss_falls(full_run):
    trainer, out = full_run
    lc = np.array(rows(out / "lcurve.out"), float)
    assert lc[:, 0].tolist() == [1, 5, 10, 15, 20]
    assert np.all(np.isfinite(lc)) and lc[-1, 2] < 0.8 * lc[0, 2]  # rmse_trn
    written = json.loads((out / "out.json").read_text())
    assert written["model"]["descriptor"]["type"] == "se_atten_v2" and written["model"]["descriptor"]["sel"] == [120]
    assert trainer.hyper.sel == (120,) and trainer.hyper.fitting.neuron == (16, 16)
    assert not trainer.merged  # one shape of batches


def test_statistics_are_the_mixed_types_ones(full_run):
    """davg/dstd per centre type over the nearest 120 neighbours of any type (set_davg_zero false), the same
    row in every slot; from the neighbour scan's sums, equal to a pass over the sampled frames."""
    trainer, _ = full_run
    davg, dstd = np.asarray(trainer.stats.davg), np.asarray(trainer.stats.dstd)
    assert davg.shape == dstd.shape == (2, 120, 4)
    assert np.all(davg[..., 0] > 0) and np.all(davg[..., 1:] == 0) and np.all(davg == davg[:, :1])
    from jaxmd_dp.geometry.stats import sample_stat_frames

    frames = sample_stat_frames(trainer.train_data, trainer.config.model.data_stat_nbatch, trainer.seed)
    d2, s2 = trainer.hyper.descriptor.env_stats(frames, 2, trainer.config.model.data_stat_protect)
    np.testing.assert_allclose(davg, d2, rtol=1e-10)
    np.testing.assert_allclose(dstd, s2, rtol=1e-10)


def test_restart_is_exact(full_run, tmp_path):
    _, full_out = full_run
    Trainer(config(), tmp_path, log=lambda *a: None).fit(10)
    trainer = Trainer(config(), tmp_path, restart=tmp_path, log=lambda *a: None)
    assert int(trainer.state.step) == 10
    trainer.fit()
    assert rows(tmp_path / "lcurve.out") == rows(full_out / "lcurve.out")


def test_cut_list_changes_no_number(full_run, tmp_path):
    """The steps' lists hold the 112 slots the data fills of sel 120 (FastPaths.cut, training.pair_packing),
    and the atoms run in tiers of fewer slots by their neighbour count (ExecutionPlan.tiers, from the
    neighbour scan); with every slot and no tiers the run is the same."""
    trainer, full_out = full_run
    assert {lay.spec.sel for lay in trainer.layouts.values()} == {(112,)}
    tiers = [lay.tiers for lay in trainer.layouts.values()]
    assert all(t is not None and t[0] == (t[0][0], 112) and sum(a for a, _ in t) == 192 for t in tiers), tiers
    plain = Trainer(config("training.pair_packing=false", numb_steps=20), tmp_path, log=lambda *a: None)
    assert {lay.spec.sel for lay in plain.layouts.values()} == {(120,)}
    assert all(lay.tiers is None for lay in plain.layouts.values())
    plain.fit(10)
    got = np.array(rows(tmp_path / "lcurve.out"), float)
    want = np.array(rows(full_out / "lcurve.out")[:3], float)
    np.testing.assert_allclose(got, want, rtol=2e-3)  # lcurve prints 3 digits


def test_float32_trains(tmp_path):
    cfg = config("model.descriptor.precision=float32", "model.fitting_net.precision=float32", numb_steps=10)
    trainer = Trainer(cfg, tmp_path, log=lambda *a: None)
    trainer.fit()
    lc = np.array(rows(tmp_path / "lcurve.out"), float)
    assert np.all(np.isfinite(lc)) and lc[-1, 2] < lc[0, 2]
    assert trainer.state.params["descriptor"]["attention_0"]["in_proj"]["matrix"].dtype == np.float32


def test_freeze_test_and_md(full_run, tmp_path, capsys):
    """The trained model frozen to a .jaxdp file: ``test`` gives the trainer's errors, the jax-md energy
    function the model's energy and forces, and a few NVE steps run."""
    from jaxmd_dp import md
    from jaxmd_dp.api import load_model
    from jaxmd_dp.cli import freeze, test
    from jaxmd_dp.cli.util import run_cli

    trainer, out = full_run
    frozen = tmp_path / "model.jaxdp"
    assert run_cli(freeze.main, ["-m", str(out), "-o", str(frozen)]) == 0
    data = require("water/data_3")
    assert run_cli(test.main, ["-m", str(frozen), "-s", str(data), "-n", "2"]) == 0
    text = capsys.readouterr().out
    rmse_f = float(text.split("Force  RMSE        :")[1].split()[0])
    assert rmse_f == pytest.approx(trainer.evaluate(data, 2)["rmse_f"], rel=1e-6)

    model = load_model(frozen)
    coord = np.load(data / "set.000" / "coord.npy")[0].reshape(-1, 3).astype(np.float64)
    box = np.load(data / "set.000" / "box.npy")[0].reshape(3, 3).astype(np.float64)
    atype = np.loadtxt(data / "type.raw", dtype=int)
    pred = model.predict(coord[None], box[None], atype)
    neighbor_fn, energy = md.energy_fn(model, box, atype)
    nbrs = neighbor_fn.allocate(coord)
    assert float(energy(coord, neighbor=nbrs)) == pytest.approx(float(pred.energy[0]), rel=1e-12)
    pytest.importorskip("jax_md")
    run = md.run_nve(energy, neighbor_fn, coord, md.masses(model.type_map, atype), dt_fs=0.25, steps=4, record_every=2)
    assert np.all(np.isfinite(np.asarray(run.state.position))) and run.drift_per_atom()["max_dev"] < 1e-3
