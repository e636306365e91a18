"""A short water run with every option around the loop: length from numb_epoch, cosine learning rate after
a warmup, AdamW, gradient clipping, the weights' moving average (EMA), the best checkpoint and the early
stop. Restarted half-way it gives the same learning curve, EMA and outcome; the EMA, best step and stop
step are those of DeePMD-kit's rule and of a hand computation from the learning curve."""

import math

import jax
import numpy as np
import pytest
from shared_paths import require
from tiny import small_water_model

from jaxmd_dp.config import config_from_dict
from jaxmd_dp.data.load import load_systems
from jaxmd_dp.data.sampler import DataSampler
from jaxmd_dp.errors import InputError
from jaxmd_dp.train import Trainer
from jaxmd_dp.train.callbacks import Callback
from jaxmd_dp.train.checkpoint import Checkpointer, checkpoint_steps, load_trained, restore_state
from jaxmd_dp.train.schedule import epoch_steps, prefactor

deepmd_lr = pytest.importorskip("deepmd.dpmodel.utils.learning_rate")
from deepmd.dpmodel.utils.training_utils import compute_total_numb_batch  # noqa: E402
from deepmd.utils.data_system import DeepmdDataSystem  # noqa: E402

EPOCHS = 0.0171875  # 5.5 of the 320 batches of an epoch of water data_0..2 at batch size 1: 6 steps
EMA_DECAY = 0.7
PATIENCE = 2
LR = {"type": "cosine", "start_lr": 1e-2, "stop_lr": 1e-4, "warmup_steps": 1, "warmup_start_factor": 0.1}
LOSS = {"start_pref_e": 0.02, "limit_pref_e": 1, "start_pref_f": 1000, "limit_pref_f": 1}


def train_paths():
    water = require("water")
    return [str(water / f"data_{k}") for k in range(3)]


def features_config():
    return config_from_dict(
        {
            "model": small_water_model(),
            "learning_rate": LR,
            "loss": LOSS,
            "optimizer": {"type": "AdamW", "weight_decay": 0.01},
            "training": {
                "training_data": {"systems": train_paths(), "batch_size": 1},
                "validation_data": {"systems": [str(require("water/data_3"))], "batch_size": 1, "numb_btch": 1},
                "numb_epoch": EPOCHS,
                "seed": 7,
                "disp_freq": 1,
                "save_freq": 3,
                "gradient_max_norm": 5.0,
                "enable_ema": True,
                "ema_decay": EMA_DECAY,
                "keep_best": True,
                "early_stop": PATIENCE,
            },
        }
    )


class Watch(Callback):
    """The weights the run starts from and has after each step (host copies), and its lcurve lines."""

    def __init__(self):
        self.params, self.windows = {}, []

    def on_train_begin(self, trainer, start, total):
        self.params[start] = jax.tree_util.tree_map(np.array, trainer.state.params)

    def on_step(self, trainer, step, batch, metrics):
        self.params[step] = jax.tree_util.tree_map(np.array, trainer.state.params)

    def on_window(self, trainer, w):
        self.windows.append(w)


def _quiet(*a, **k):
    pass


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    out = tmp_path_factory.mktemp("full")
    watch = Watch()
    trainer = Trainer(features_config(), out, log=_quiet, callbacks=[watch])
    summary = trainer.fit()
    return trainer, out, watch, summary


@pytest.fixture(scope="module")
def split(tmp_path_factory, full):
    """The same run, stopped after step 3 and restarted from its checkpoint."""
    out = tmp_path_factory.mktemp("split")
    Trainer(features_config(), out, log=_quiet).fit(3)
    trainer = Trainer(features_config(), out, restart=out, log=_quiet)
    assert int(trainer.state.step) == 3
    return trainer, out, trainer.fit()


def lcurve_rows(path):
    return [ln for ln in path.read_text().splitlines() if not ln.startswith("#")]


def test_numb_epoch_gives_deepmds_steps(full):
    trainer = full[0]
    data = DeepmdDataSystem(train_paths(), 1, 1, 6.0, type_map=["O", "H"])
    want = math.ceil(EPOCHS * compute_total_numb_batch(data.nbatches, data.sys_probs))
    assert trainer.config.training.numb_steps == want == 6
    assert trainer.config.training.numb_epoch is None  # resolved: out.json gives the steps


@pytest.mark.parametrize(
    "batch_size,sys_probs,epochs", [(1, None, 2.5), ([2, 1, 3], [0.2, 0.5, 0.3], 1.0), (4, [0.0, 0.25, 0.75], 0.3)]
)
def test_epoch_steps_are_deepmds(batch_size, sys_probs, epochs):
    systems = load_systems(train_paths(), ["O", "H"])
    ours = DataSampler(systems, batch_size, sys_probs=sys_probs)
    data = DeepmdDataSystem(train_paths(), batch_size, 1, 6.0, type_map=["O", "H"], sys_probs=sys_probs)
    want = math.ceil(epochs * compute_total_numb_batch(data.nbatches, data.sys_probs))
    assert epoch_steps(epochs, ours.nbatches, ours.probs) == want


def test_restart_is_exact_with_every_option(full, split):
    """Stopped after step 3 and restarted, the run writes the same learning curve (bit for bit: its
    numbers print the same), ends with the same EMA, best checkpoint and early stop."""
    trainer, out, watch, summary = full
    again, split_out, split_summary = split
    assert lcurve_rows(split_out / "lcurve.out") == lcurve_rows(out / "lcurve.out")
    for a, b in zip(jax.tree_util.tree_leaves(again.state.ema), jax.tree_util.tree_leaves(trainer.state.ema)):
        assert np.array_equal(np.asarray(a), np.asarray(b))
    assert split_summary["best"]["step"] == summary["best"]["step"]
    assert split_summary["best"]["valid_loss"] == summary["best"]["valid_loss"]
    assert split_summary["stopped_early"] == summary["stopped_early"]
    for d in ("model.ckpt", "model_ema.ckpt", "model.ckpt/best"):
        assert checkpoint_steps(split_out / d) == checkpoint_steps(out / d), d


def test_ema_is_deepmds_rule(full):
    """The EMA after each step follows ema ← ema + (1 − decay)(w − ema) from the starting weights (DeePMD-kit's
    ModelEMA, torch.lerp), and the EMA checkpoint directory holds it for test and freeze."""
    trainer, out, watch, _ = full
    steps = sorted(watch.params)
    w = 1.0 - EMA_DECAY
    ema = watch.params[0]
    for k in steps[1:]:
        ema = jax.tree_util.tree_map(lambda e, p: p - (p - e) * (1.0 - w), ema, watch.params[k])  # w ≥ 0.5
    for a, b in zip(jax.tree_util.tree_leaves(trainer.state.ema), jax.tree_util.tree_leaves(ema)):
        np.testing.assert_allclose(np.asarray(a), b, rtol=1e-13, atol=1e-15)
    hyper, params, stats = load_trained(out / "model_ema.ckpt")  # what test, freeze and the API load
    assert hyper == trainer.hyper and checkpoint_steps(out / "model_ema.ckpt") == [3, steps[-1]]
    for a, b in zip(jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(trainer.state.ema)):
        assert np.array_equal(a, np.asarray(b))
    live = load_trained(out)[1]  # the output directory: the live weights, as DeePMD-kit's model.ckpt
    assert not np.array_equal(jax.tree_util.tree_leaves(live)[0], jax.tree_util.tree_leaves(params)[0])


def test_best_and_early_stop_as_by_hand(full):
    """From each lcurve line's validation RMSEs: loss = pe·N·rmse_e² + pf·rmse_f² with the prefactors of
    the last step's lr (DeePMD-kit's schedule); the best line is its minimum, and the run stops at the
    PATIENCE-th line after it."""
    trainer, out, watch, summary = full
    nsteps = trainer.config.training.numb_steps
    lr_end = deepmd_lr.BaseLR(**LR, num_steps=nsteps).value(nsteps - 1)
    pe = prefactor(LOSS["start_pref_e"], LOSS["limit_pref_e"], lr_end, LR["start_lr"])
    pf = prefactor(LOSS["start_pref_f"], LOSS["limit_pref_f"], lr_end, LR["start_lr"])
    natoms = len(np.loadtxt(require("water/data_3/type.raw")))
    losses = [pe * natoms * w.valid["rmse_e"] ** 2 + pf * w.valid["rmse_f"] ** 2 for w in watch.windows]
    np.testing.assert_allclose([w.valid_loss for w in watch.windows], losses, rtol=1e-10)
    steps = [w.step for w in watch.windows]
    best, since, stop = 0, 0, None
    for i in range(1, len(losses)):
        best, since = (i, 0) if losses[i] < losses[best] else (best, since + 1)
        if since == PATIENCE:
            stop = steps[i]
            break
    assert stop is not None and stop < nsteps  # this run does stop early
    early = summary["stopped_early"]
    assert (early["step"], early["patience"], early["best_step"]) == (stop, PATIENCE, steps[best])
    assert early["best_loss"] == pytest.approx(losses[best], rel=1e-10)
    assert steps[-1] == stop == int(trainer.state.step) and int(lcurve_rows(out / "lcurve.out")[-1].split()[0]) == stop
    assert checkpoint_steps(out / "model.ckpt") == [3, stop]  # the stop saves its step
    assert summary["best"]["step"] == steps[best] and checkpoint_steps(out / "model.ckpt/best") == [steps[best]]
    params = load_trained(out / "model.ckpt" / "best")[1]  # test and freeze read it as any checkpoint
    for a, b in zip(jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(watch.params[steps[best]])):
        assert np.array_equal(a, b)


def test_ema_restored_or_left_out(full):
    """A restart restores the checkpoint's EMA, or leaves it out when enable_ema is off; the EMA checkpoint
    (weights alone) is no restart point."""
    trainer, out, _, _ = full
    ckpt = Checkpointer(out / "model.ckpt", read_only=True)
    meta = ckpt.restore_meta()
    state, _ = restore_state(ckpt, meta, trainer.hyper, trainer.optimizer, ema=True)
    for a, b in zip(jax.tree_util.tree_leaves(state.ema), jax.tree_util.tree_leaves(trainer.state.ema)):
        assert np.array_equal(np.asarray(a), np.asarray(b))
    assert restore_state(ckpt, meta, trainer.hyper, trainer.optimizer)[0].ema is None
    ema_ckpt = Checkpointer(out / "model_ema.ckpt", read_only=True)
    with pytest.raises(InputError, match="moving average alone.*--init-model"):
        restore_state(ema_ckpt, ema_ckpt.restore_meta(), trainer.hyper, trainer.optimizer, ema=True)
