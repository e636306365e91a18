"""The keys of the learning-rate types, the optimizers, the run length, gradient clipping, EMA, keep_best and
early_stop: DeePMD-kit's normalised sections (its out.json) load with its values; bad values are refused
with one line that names the key."""

import copy

import pytest

from jaxmd_dp.config import config_from_dict
from jaxmd_dp.errors import InputError

argcheck = pytest.importorskip("deepmd.utils.argcheck")


def _minimal() -> dict:
    return {
        "model": {
            "type_map": ["O", "H"],
            "descriptor": {"type": "se_e2_a", "sel": [8, 16], "neuron": [4, 8], "axis_neuron": 2},
            "fitting_net": {"neuron": [8]},
        },
        "training": {"training_data": {"systems": ["a"]}, "validation_data": {"systems": ["b"]}, "numb_steps": 10},
    }


def _normalized(arg, section: dict) -> dict:
    """``section`` as DeePMD-kit writes it in out.json: every default filled, checked strictly."""
    value = arg.normalize_value(copy.deepcopy(section), trim_pattern="_*")
    arg.check_value(value, strict=True)
    return value


@pytest.mark.parametrize(
    "section",
    [
        {"start_lr": 1e-3},
        {"type": "exp", "start_lr": 1e-3, "stop_lr": 1e-6, "decay_steps": 3, "smooth": True, "warmup_steps": 2},
        {"type": "cosine", "start_lr": 1e-3, "stop_lr_ratio": 0.01, "warmup_ratio": 0.1, "warmup_start_factor": 0.1},
        {"type": "wsd", "start_lr": 1e-3, "stop_lr": 1e-5, "decay_phase_ratio": 0.3, "decay_type": "linear"},
    ],
)
def test_deepmds_learning_rate_sections_load(section):
    theirs = _normalized(argcheck.learning_rate_args(), section)
    d = _minimal()
    d["learning_rate"] = theirs
    ours = config_from_dict(d).learning_rate.to_dict()
    assert {k: ours[k] for k in theirs} == theirs


@pytest.mark.parametrize("section", [{}, {"type": "AdamW"}, {"type": "AdamW", "weight_decay": 0.1}])
def test_deepmds_optimizer_sections_load(section):
    theirs = _normalized(argcheck.optimizer_args(), section)
    d = _minimal()
    d["optimizer"] = theirs
    assert {k: v for k, v in config_from_dict(d).optimizer.to_dict().items() if k in theirs} == theirs


def test_deepmds_training_keys_load():
    keys = {"numb_epoch": 2.5, "gradient_max_norm": 1.5, "enable_ema": True, "ema_decay": 0.99, "ema_ckpt_keep": 2}
    section = {"training_data": {"systems": ["a"]}, **keys}
    theirs = _normalized(argcheck.training_args(), section)
    d = _minimal()
    d["training"] = {k: v for k, v in theirs.items() if k != "validation_data"}
    tc = config_from_dict(d).training
    assert {k: getattr(tc, k) for k in keys} == keys and tc.numb_steps is None


def _refused(changes: dict) -> str:
    d = _minimal()
    for dotted, value in changes.items():
        node = d
        *parents, last = dotted.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        if value is _DELETE:
            node.pop(last, None)
        else:
            node[last] = value
    with pytest.raises(InputError) as info:
        config_from_dict(d)
    msg = str(info.value)
    assert "\n" not in msg
    return msg


_DELETE = object()
REFUSED = [
    ({"learning_rate.type": "linear"}, "learning_rate.type", "'exp', 'cosine', 'wsd'"),
    ({"learning_rate.stop_lr_ratio": 0.01, "learning_rate.stop_lr": 1e-5}, "learning_rate.stop_lr_ratio", "not both"),
    ({"learning_rate.stop_lr_ratio": -0.1}, "learning_rate.stop_lr_ratio", "> 0"),
    ({"learning_rate.warmup_steps": 2, "learning_rate.warmup_ratio": 0.1}, "learning_rate.warmup_ratio", "not both"),
    ({"learning_rate.warmup_steps": 10}, "learning_rate.warmup_steps", "not fewer than the 10 steps"),
    ({"learning_rate.warmup_ratio": 1.0}, "learning_rate.warmup_ratio", "in [0, 1)"),
    ({"learning_rate.warmup_start_factor": -0.5}, "learning_rate.warmup_start_factor", ">= 0"),
    ({"learning_rate.decay_rate": 1.5}, "learning_rate.decay_rate", "in (0, 1]"),
    ({"learning_rate.type": "cosine", "learning_rate.smooth": True}, "learning_rate.smooth", "type 'exp'"),
    ({"learning_rate.type": "cosine", "learning_rate.decay_steps": 100}, "learning_rate.decay_steps", "type 'exp'"),
    ({"learning_rate.decay_type": "cosine"}, "learning_rate.decay_type", "type 'wsd', not 'exp'"),
    ({"learning_rate.type": "wsd", "learning_rate.decay_type": "step"}, "learning_rate.decay_type", "'linear'"),
    ({"learning_rate.type": "wsd", "learning_rate.decay_phase_ratio": 0.0}, "learning_rate.decay_phase_ratio",
     "in (0, 1]"),
    ({"optimizer.type": "HybridMuon"}, "optimizer.type", "'Adam', 'AdamW'"),
    ({"optimizer.type": "AdamW", "optimizer.weight_decay": -0.01}, "optimizer.weight_decay", ">= 0"),
    ({"training.numb_epoch": 2}, "training.numb_epoch", "not both"),
    ({"training.numb_steps": _DELETE, "training.numb_epoch": 0}, "training.numb_epoch", "> 0"),
    ({"training.numb_steps": _DELETE}, "training.numb_steps", "or give training.numb_epoch"),
    ({"training.gradient_max_norm": "big"}, "training.gradient_max_norm", "expected a number"),
    ({"training.ema_decay": 1.0}, "training.ema_decay", "in [0, 1)"),
    ({"training.ema_ckpt_keep": 0}, "training.ema_ckpt_keep", "> 0"),
    ({"training.enable_ema": 1}, "training.enable_ema", "expected true or false"),
    ({"training.keep_best": True, "training.validation_data": None}, "training.keep_best", "validation"),
    ({"training.early_stop": 3, "training.disp_training": False}, "training.early_stop", "validation"),
    ({"training.early_stop": -1}, "training.early_stop", ">= 0"),
    ({"training.early_stop": True}, "training.early_stop", "expected an integer"),
]  # fmt: skip


@pytest.mark.parametrize("changes,key,fragment", REFUSED, ids=[f"{c[1]}-{i}" for i, c in enumerate(REFUSED)])
def test_bad_values_refused_in_one_line(changes, key, fragment):
    msg = _refused(changes)
    assert f"config key '{key}'" in msg and fragment in msg, msg


def test_defaults_are_deepmds():
    """Neither stop_lr nor stop_lr_ratio: DeePMD-kit 3.2's stop_lr; AdamW's weight decay is its own default."""
    cfg = config_from_dict(_minimal())
    assert cfg.learning_rate.stop_lr == 5e-8 and cfg.optimizer.weight_decay == 0.0
    d = _minimal()
    d["optimizer"] = {"type": "AdamW"}
    assert config_from_dict(d).optimizer.weight_decay == 0.001
    assert (cfg.training.enable_ema, cfg.training.ema_decay, cfg.training.gradient_max_norm) == (False, 0.999, None)
