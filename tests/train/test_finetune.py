"""Fine-tuning a DeePMD-kit model (``--finetune``) on a reordered, extended type map: the config's model is the
pretrained one's, the kept types predict what they did up to the energy bias DeePMD-kit's fine-tuning changes
(the least-squares fit of label − prediction on the statistics' frames), training starts at step 0 with the
config's learning rate; ``training.change_bias_after_training`` changes the bias once more after the last
step. And the command line's one-line refusals."""

import json
from pathlib import Path

import jax
import numpy as np
import pytest
from fixture_models import load_fixture, max_rel
from shared_paths import require

from jaxmd_dp.cli import train as train_cli
from jaxmd_dp.cli.util import run_cli
from jaxmd_dp.config import config_from_dict
from jaxmd_dp.geometry.stats import sample_stat_frames
from jaxmd_dp.model.bias import change_energy_bias
from jaxmd_dp.model.deepmd_file import load_deepmd, save_deepmd
from jaxmd_dp.model.energy import ModelHyper, Stats
from jaxmd_dp.model.trained import Model
from jaxmd_dp.model.type_map import changed_hyper
from jaxmd_dp.train.checkpoint import load_trained
from jaxmd_dp.train.finetune import Pretrained, finetune_config
from jaxmd_dp.train.loop import Trainer

TYPE_MAP = ["O", "N", "C", "H"]  # the fixture's C, H, O reordered, N new
NFRAMES = 4


def _config(data: Path, type_map=TYPE_MAP, **training) -> dict:
    """A config whose model section the pretrained model's replaces (only type_map and seeds stay)."""
    return {
        "model": {
            "type_map": type_map,
            "descriptor": {"type": "se_e2_a", "sel": "auto", "neuron": [2], "axis_neuron": 1, "seed": 1},
            "fitting_net": {"neuron": [4], "seed": 1},
            "data_stat_nbatch": 2,
        },
        "learning_rate": {"type": "exp", "start_lr": 2e-3, "stop_lr": 1e-4, "decay_steps": 10},
        "loss": {"start_pref_e": 0.02, "limit_pref_e": 1, "start_pref_f": 1000, "limit_pref_f": 1},
        "training": {
            "training_data": {"systems": str(data), "batch_size": 1},
            "numb_steps": 2,
            "seed": 3,
            "disp_freq": 1,
            "save_freq": 2,
            **training,
        },
    }


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """nopbc_cho as DeePMD-kit's model.dp, the first frames of its three systems, and a fine-tuning Trainer:
    its model before the first step, then 2 steps with change_bias_after_training."""
    root = tmp_path_factory.mktemp("finetune")
    hyper, params, stats, pred = load_fixture("nopbc_cho")
    save_deepmd(root / "model.dp", hyper, params, stats)
    src = require("nopbc_cho_combustion")
    for name in ("C1H4O2", "C3H3O4", "C4H3O1"):
        d = root / "data" / name
        (d / "set.000").mkdir(parents=True)
        for f in ("type.raw", "type_map.raw", "nopbc"):
            (d / f).write_bytes((src / name / f).read_bytes())
        for f in ("coord", "energy", "force"):
            np.save(d / "set.000" / f"{f}.npy", np.load(src / name / "set.000" / f"{f}.npy")[:NFRAMES])
    config = config_from_dict(_config(root / "data", change_bias_after_training=True))
    lines = []
    trainer = Trainer(config, root / "run", finetune=root / "model.dp", log=lines.append)
    start = Model(trainer.hyper, jax.device_get(trainer.state.params), jax.device_get(trainer.stats))  # copies: the
    # step takes over the device buffers of the weights
    frames = sample_stat_frames(trainer.train_data, config.model.data_stat_nbatch, trainer.seed)
    trainer.fit()
    return root, (hyper, params, stats, pred), trainer, start, frames, lines


def test_config_is_the_pretrained_model(run):
    root, (hyper, *_), trainer, *_ = run
    d = trainer.hyper.descriptor
    assert trainer.hyper.type_map == tuple(TYPE_MAP) and d.sel == (4, 4, 4, 4)  # N's sel: auto, no N in the data
    assert (d.neuron, d.axis_neuron, d.rcut, trainer.hyper.fitting) == (
        hyper.descriptor.neuron,
        hyper.descriptor.axis_neuron,
        hyper.rcut,
        hyper.fitting,
    )
    out = json.loads((root / "run" / "out.json").read_text())["model"]
    assert out["descriptor"]["neuron"] == [8, 16, 32] and out["descriptor"]["sel"] == [4, 4, 4, 4]
    assert out["type_map"] == TYPE_MAP and out["fitting_net"]["neuron"] == [32, 32]


def test_kept_types_unchanged_but_the_bias(run):
    """Before the first step: forces and virials are the DeePMD-kit model's (1e-10); each energy differs by
    counts·δ, δ = lstsq(counts, E − E_pred) over the statistics' frames, E_pred the moved model with the
    pretrained bias; N's bias is δ_N = 0 (no N atom: the minimum-norm solution)."""
    _, (hyper, params, stats, p), trainer, start, frames, lines = run
    kept = np.array([stats.energy_bias[2], 0.0, stats.energy_bias[0], stats.energy_bias[1]])
    before = Model(trainer.hyper, start.params, Stats(start.stats.davg, start.stats.dstd, kept))
    counts, residual = [], []
    for f in frames:
        e = before.predict(f["coord"], None, f["atype"]).energy
        counts += [np.bincount(f["atype"], minlength=4)] * len(e)
        residual.append(f["energy"] - e)
    delta = np.linalg.lstsq(np.asarray(counts, float), np.concatenate(residual), rcond=None)[0]
    np.testing.assert_allclose(np.asarray(start.stats.energy_bias), kept + delta, rtol=0, atol=1e-9)
    assert abs(delta[1]) < 1e-12 and np.abs(delta).max() > 1e-3
    atype = np.array([{0: 2, 1: 3, 2: 0}[int(t)] for t in p["atype"]])  # C, H, O → new indices
    ours = start.predict(p["coord"], None, atype)
    for key in ("force", "virial"):
        assert max_rel(getattr(ours, key), p[key]) <= 1e-10, key
    shift = np.bincount(atype, minlength=4) @ delta
    assert max_rel(ours.energy - shift, p["energy"]) <= 1e-10
    assert any("energy bias per type (eV) changed from" in line for line in lines)


def test_starts_at_step_zero_with_the_config_lr(run):
    root, _, trainer, *_ = run
    lcurve = np.loadtxt(root / "run" / "lcurve.out", ndmin=2)
    assert lcurve[0, 0] == 1 and lcurve[0, -1] == pytest.approx(2e-3)  # step 1 trained at start_lr
    assert int(trainer.state.step) == 2


def test_writes_a_model_with_the_bias_changed_after_training(run):
    """The last checkpoint is a model of the new type map whose bias is DeePMD-kit's change-by-statistic of the
    trained weights: changing it again on the same frames moves it by ~0."""
    root, _, trainer, start, frames, _ = run
    hyper, params, stats = load_trained(root / "run")
    assert hyper == trainer.hyper and list(hyper.type_map) == TYPE_MAP
    np.testing.assert_array_equal(stats.energy_bias, np.asarray(trainer.stats.energy_bias))
    assert np.abs(stats.energy_bias - np.asarray(start.stats.energy_bias)).max() > 0  # the after-training change
    again = change_energy_bias(hyper, params, Stats(*stats), frames, "change")
    np.testing.assert_allclose(again.new, stats.energy_bias, rtol=0, atol=1e-6)


def test_dpa1_config_round_trip():
    """se_atten on [H, Zn, O]: the replaced config builds the moved model (exclude_types renumbered too); the
    config's seed and set_davg_zero stay, its other descriptor keys are the pretrained model's."""
    fixture = Path(__file__).resolve().parents[1] / "data" / "dpa1_fixtures" / "water_exclude" / "model.dp"
    hyper, params, stats = load_deepmd(fixture)
    d = _config(Path("unused"), ["H", "Zn", "O"])
    d["model"]["descriptor"] = {
        "type": "se_atten",
        "sel": 10,
        "neuron": [2],
        "axis_neuron": 1,
        "seed": 5,
        "set_davg_zero": False,
    }
    config = finetune_config(config_from_dict(d), Pretrained(hyper, params, stats, str(fixture)), log=lambda s: None)
    moved = changed_hyper(hyper, ["H", "Zn", "O"])
    assert ModelHyper.from_config(config.model) == moved and moved.descriptor.exclude_types == ((2, 0),)
    assert config.model.descriptor.seed == 5 and config.model.descriptor.set_davg_zero is False


@pytest.mark.parametrize(
    "extra,fragment",
    [
        (["--finetune", "nowhere.dp"], "--finetune: nowhere.dp: no such model"),
        (["--finetune", "{root}/model.dp", "--restart", "{root}/run"], "give only one of --finetune"),
        (["--use-pretrain-script"], "--use-pretrain-script: only with --finetune"),
    ],
)
def test_cli_refusals_are_one_line(run, tmp_path, extra, fragment, capsys):
    root = run[0]
    cfg = tmp_path / "in.json"
    cfg.write_text(json.dumps(_config(root / "data")))
    rc = run_cli(train_cli.main, [str(cfg), "-o", str(tmp_path / "out"), *(a.format(root=root) for a in extra)])
    err = capsys.readouterr().err.strip()
    assert rc == 1 and "Traceback" not in err and err.count("\n") == 0 and fragment in err, err
