"""The training state holds each group of stacked nets stacked (``model.fast.stacked_weights``): a six-type
Al-Cu-Mg model (36 embedding nets, 6 fitting nets) trains to the same numbers as with its weights held per
net (to rounding: XLA sums some weight gradients in another order when they are sliced per net); its
checkpoints hold the per-net layout, and a restart from them is exact."""

import jax
import numpy as np
import pytest
from many_types_data import ALMGCU_6, write_system
from shared_paths import require
from tiny import LOSS_EFV

from jaxmd_dp.config import config_from_dict
from jaxmd_dp.model.energy import ModelHyper, init_params
from jaxmd_dp.model.fast import stacked_weights
from jaxmd_dp.model.fast.stacked_weights import has_stacked, to_nets, to_stacked
from jaxmd_dp.train import Trainer
from jaxmd_dp.train.callbacks import Callback
from jaxmd_dp.train.checkpoint import load_trained
from jaxmd_dp.train.step import weights

STEPS = 4


def model_section(type_one_side=False):
    return {
        "type_map": ALMGCU_6["type_map"],
        "descriptor": {
            "type": "se_e2_a",
            "sel": [10, 10, 15, 15, 10, 10],
            "rcut": 5.0,
            "rcut_smth": 0.5,
            "neuron": [4, 8],
            "axis_neuron": 2,
            "type_one_side": type_one_side,
            "seed": 1,
        },
        "fitting_net": {"neuron": [8, 8], "resnet_dt": True, "seed": 1},
        "data_stat_nbatch": 2,
    }


@pytest.fixture(scope="module")
def system(tmp_path_factory):
    src = require("almgcu_jiang2021_subset/init.1240")
    return write_system(
        src, tmp_path_factory.mktemp("six") / "sys", ALMGCU_6["splits"], ALMGCU_6["type_map"], max_frames=4
    )


def config(system):
    return config_from_dict(
        {
            "model": model_section(),
            "learning_rate": {"start_lr": 1e-2, "stop_lr": 1e-4, "decay_steps": 2},
            "loss": dict(LOSS_EFV),
            "training": {
                "training_data": {"systems": [str(system)], "batch_size": 1},
                "numb_steps": STEPS,
                "seed": 3,
                "disp_freq": 1,
                "save_freq": 2,
            },
        }
    )


class Weights(Callback):
    """The per-net weights after each step (host copies)."""

    def __init__(self):
        self.after = {}

    def on_step(self, trainer, step, batch, metrics):
        self.after[step] = jax.tree_util.tree_map(np.array, weights(trainer.state.params))


def _quiet(*a, **k):
    pass


def _run(system, out, held, restart=None, steps=None):
    stacked_weights.HELD = held
    try:
        watch = Weights()
        trainer = Trainer(config(system), out, restart=restart, log=_quiet, callbacks=[watch])
        trainer.fit(steps)
        return trainer, watch
    finally:
        stacked_weights.HELD = True


@pytest.fixture(scope="module")
def runs(system, tmp_path_factory):
    return {held: (tmp := tmp_path_factory.mktemp(f"held{held}"), *_run(system, tmp, held)) for held in (True, False)}


def lcurve_rows(path):
    return [ln for ln in path.read_text().splitlines() if not ln.startswith("#")]


def _equal(a, b, rel=0.0):
    """The same tree; each leaf equal, or within ``rel`` of its largest entry."""
    la, lb = jax.tree_util.tree_leaves_with_path(a), jax.tree_util.tree_leaves_with_path(b)
    assert [p for p, _ in la] == [p for p, _ in lb]
    for (path, x), (_, y) in zip(la, lb):
        x, y = np.asarray(x), np.asarray(y)
        assert np.max(np.abs(x - y), initial=0.0) <= rel * np.max(np.abs(y), initial=0.0), jax.tree_util.keystr(path)


def test_groups_stacked_and_back():
    hyper = ModelHyper.from_deepmd(model_section())
    params = jax.tree_util.tree_map(np.asarray, init_params(hyper, 1))
    held = to_stacked(params)
    assert has_stacked(held) and not has_stacked(params)
    desc = next(v for v in held.values() if "embed_*" in v)
    assert not any(k.startswith("embed_") and k != "embed_*" for k in desc)
    assert {x.shape[0] for x in jax.tree_util.tree_leaves(desc["embed_*"])} == {36}
    assert len(jax.tree_util.tree_leaves(held)) < len(jax.tree_util.tree_leaves(params)) / 5
    _equal(to_nets(held), params)
    one_side = jax.tree_util.tree_map(np.asarray, init_params(ModelHyper.from_deepmd(model_section(True)), 1))
    assert has_stacked(to_stacked(one_side))  # 6 nets of each kind
    stacked_weights.HELD = False
    try:
        assert not has_stacked(to_stacked(params))
    finally:
        stacked_weights.HELD = True


def test_gradient_through_the_split_is_the_per_net_one():
    hyper = ModelHyper.from_deepmd(model_section())
    params = jax.tree_util.tree_map(np.asarray, init_params(hyper, 1))

    def loss(p):
        return sum(jax.numpy.sum(jax.numpy.sin(x) * (i + 1)) for i, x in enumerate(jax.tree_util.tree_leaves(p)))

    per_net = jax.grad(loss)(params)
    held = jax.jit(jax.grad(lambda h: loss(to_nets(h))))(to_stacked(params))
    _equal(to_nets(jax.tree_util.tree_map(np.asarray, held)), jax.tree_util.tree_map(np.asarray, per_net))


def test_training_held_stacked_gives_the_per_net_numbers(runs):
    (out_s, trainer_s, watch_s), (out_n, trainer_n, watch_n) = runs[True], runs[False]
    assert has_stacked(trainer_s.state.params) and not has_stacked(trainer_n.state.params)
    assert lcurve_rows(out_s / "lcurve.out") == lcurve_rows(out_n / "lcurve.out")
    assert len(lcurve_rows(out_s / "lcurve.out")) == STEPS
    for step in range(1, STEPS + 1):
        _equal(watch_s.after[step], watch_n.after[step], rel=1e-14)
    _, saved_s, _ = load_trained(out_s)
    _, saved_n, _ = load_trained(out_n)
    _equal(saved_s, saved_n, rel=1e-14)  # checkpoints hold the per-net layout either way
    _equal(saved_s, watch_s.after[STEPS])
    assert not has_stacked(saved_s)


def test_restart_from_a_stacked_state_is_exact(runs, system, tmp_path):
    out_s, _, watch_s = runs[True]
    half = tmp_path / "half"
    _run(system, half, True, steps=STEPS // 2)
    trainer, watch = _run(system, half, True, restart=half)
    assert has_stacked(trainer.state.params) and int(trainer.state.step) == STEPS
    _equal(watch.after[STEPS], watch_s.after[STEPS])
    assert lcurve_rows(half / "lcurve.out") == lcurve_rows(out_s / "lcurve.out")
