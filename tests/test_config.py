"""jaxmd_dp.config: the schema reads our YAML configs and DeePMD-kit's input.json/out.json files unchanged,
fills DeePMD-kit's defaults, applies overrides, resolves data paths, round-trips, and rejects bad input
with one-line InputErrors that name the key."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from pathlib import Path

import pytest

from jaxmd_dp.config import (
    Config,
    DescriptorConfig,
    TrainingConfig,
    config_from_dict,
    load_config,
)
from jaxmd_dp.errors import InputError

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
REQUIRE_SHARED = os.environ.get("JAXMD_DP_REQUIRE_SHARED") == "1"
CONFIGS = sorted((REPO / "configs").glob("*.yaml"))


def _need_shared() -> None:
    if not SHARED.is_dir():
        msg = f"shared reference files not found at {SHARED}"
        if REQUIRE_SHARED:
            pytest.fail(msg + " (JAXMD_DP_REQUIRE_SHARED=1)")
        pytest.skip(msg)


def _shared_inputs() -> list:
    if not SHARED.is_dir():
        return [pytest.param(None, id="shared-missing")]
    files = [SHARED / "bench" / n for n in ("water_se_e2_a.json", "copper_asc22.json", "almgcu.json")]
    files += sorted(SHARED.glob("fixtures/*/input.json")) + sorted(SHARED.glob("fixtures/*/out.json"))
    return [pytest.param(f, id=str(f.relative_to(SHARED))) for f in files]


def _fixture_dirs() -> list:
    if not SHARED.is_dir():
        return [pytest.param(None, id="shared-missing")]
    return [pytest.param(d, id=d.name) for d in sorted(SHARED.glob("fixtures/*/")) if (d / "out.json").is_file()]


def _minimal() -> dict:
    return {
        "model": {
            "type_map": ["O", "H"],
            "descriptor": {"type": "se_e2_a", "sel": [46, 92], "rcut": 6.0, "rcut_smth": 0.5, "neuron": [8, 16, 32],
                           "axis_neuron": 4},
            "fitting_net": {"neuron": [16, 16]},
        },
        "training": {"training_data": {"systems": ["a", "b"], "batch_size": 1}, "numb_steps": 10},
    }  # fmt: skip


_DELETE = object()


def _set(d: dict, dotted: str, value: object) -> None:
    *parents, last = dotted.split(".")
    for p in parents:
        d = d.setdefault(p, {})
    if value is _DELETE:
        del d[last]
    else:
        d[last] = value


def _write(tmp_path: Path, name: str, content: object) -> Path:
    p = tmp_path / name
    p.write_text(content if isinstance(content, str) else json.dumps(content))
    return p


def _raises(d: dict, **kw) -> str:
    with pytest.raises(InputError) as info:
        config_from_dict(d, **kw)
    msg = str(info.value)
    assert "\n" not in msg
    return msg


# ----------------------------------------------------------------------------- shared inputs, unchanged
@pytest.mark.parametrize("path", _shared_inputs())
def test_shared_input_loads(path):
    if path is None:
        _need_shared()
    raw = json.loads(path.read_text())
    cfg = load_config(path)
    assert list(cfg.model.type_map) == raw["model"]["type_map"]
    assert list(cfg.model.descriptor.sel) == raw["model"]["descriptor"]["sel"]
    assert cfg.model.descriptor.rcut == raw["model"]["descriptor"]["rcut"]
    assert cfg.training.numb_steps == raw["training"]["numb_steps"]
    systems = cfg.training.training_data.systems
    assert len(systems) == len(raw["training"]["training_data"]["systems"])
    assert all(os.path.isabs(s) for s in systems)
    if path.parent.name == "bench":  # these point at real data under shared/data
        assert all(os.path.isdir(s) for s in systems), systems
    assert config_from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize("folder", _fixture_dirs())
def test_fixture_input_and_out_agree(folder):
    """DeePMD-kit's out.json is input.json with every default filled: both must give the same Config,
    and every value we write must equal DeePMD-kit's where the keys overlap."""
    if folder is None:
        _need_shared()
    cfg = load_config(folder / "input.json")
    assert load_config(folder / "out.json") == cfg
    out = json.loads((folder / "out.json").read_text())

    def compare(ours, theirs, path):
        for key, value in ours.items():
            if key not in theirs or key == "systems":
                continue
            if isinstance(value, dict) and isinstance(theirs[key], dict):
                compare(value, theirs[key], f"{path}.{key}")
            else:
                assert value == theirs[key], f"{path}.{key}: {value!r} != {theirs[key]!r}"

    compare(cfg.to_dict(), out, "")


# ----------------------------------------------------------------------------- our configs
def test_configs_present():
    assert {p.name for p in CONFIGS} >= {"water.yaml", "copper.yaml", "almgcu.yaml", "nopbc.yaml"}


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_config_file_loads_and_round_trips(path):
    cfg = load_config(path)
    assert isinstance(cfg, Config)
    d = cfg.to_dict()
    json.dumps(d)
    assert config_from_dict(d) == cfg
    assert config_from_dict(json.loads(json.dumps(d))) == cfg


def test_water_yaml_values():
    cfg = load_config(REPO / "configs" / "water.yaml")
    m = cfg.model
    assert m.type_map == ("O", "H")
    assert (m.descriptor.rcut, m.descriptor.rcut_smth, m.descriptor.sel) == (6.0, 0.5, (46, 92))
    assert (m.descriptor.neuron, m.descriptor.axis_neuron) == ((25, 50, 100), 16)
    assert m.descriptor.type_one_side is True and m.descriptor.resnet_dt is False and m.descriptor.seed == 1
    assert m.fitting_net.neuron == (240, 240, 240) and m.fitting_net.resnet_dt is True and m.fitting_net.seed == 1
    lr, loss = cfg.learning_rate, cfg.loss
    assert (lr.start_lr, lr.stop_lr, lr.decay_steps) == (1e-3, 3.51e-8, 100)
    assert (loss.start_pref_e, loss.limit_pref_e, loss.start_pref_f, loss.limit_pref_f) == (0.02, 1, 1000, 1)
    t = cfg.training
    assert (t.numb_steps, t.seed, t.disp_freq, t.save_freq) == (2000, 10, 100, 1000)
    data = REPO / "data" / "water"
    assert t.training_data.systems == tuple(str(data / f"data_{i}") for i in range(3))
    assert t.training_data.batch_size == 1
    assert t.validation_data.systems == (str(data / "data_3"),)
    assert (t.validation_data.batch_size, t.validation_data.numb_btch) == (1, 1)


def test_water_yaml_matches_deepmd_example():
    _need_shared()
    ours = load_config(REPO / "configs" / "water.yaml")
    bench = load_config(SHARED / "bench" / "water_se_e2_a.json")
    assert ours.model == bench.model and ours.loss == bench.loss
    assert dataclasses.replace(ours.learning_rate, decay_steps=5000) == bench.learning_rate


@pytest.mark.parametrize("name,bench", [("copper", "copper_asc22.json"), ("almgcu", "almgcu.json")])
def test_yaml_equals_bench_json(name, bench):
    _need_shared()
    assert load_config(REPO / "configs" / f"{name}.yaml") == load_config(SHARED / "bench" / bench)


def test_nopbc_yaml_points_at_the_three_systems():
    cfg = load_config(REPO / "configs" / "nopbc.yaml")
    assert cfg.model.type_map == ("C", "H", "O") and cfg.model.descriptor.sel == (40, 80, 40)
    assert (cfg.model.descriptor.rcut, cfg.model.descriptor.rcut_smth) == (6.0, 1.0)
    root = SHARED / "data" / "nopbc_cho_combustion"
    assert cfg.training.training_data.systems == tuple(str(root / n) for n in ("C1H4O2", "C3H3O4", "C4H3O1"))
    if SHARED.is_dir():
        assert all((Path(s) / "type.raw").is_file() for s in cfg.training.training_data.systems)


# ----------------------------------------------------------------------------- defaults
def test_defaults_filled():
    d = {
        "model": {"type_map": ["Cu"], "descriptor": {"type": "se_a", "sel": [8], "neuron": [4, 8]}, "fitting_net": {}},
        "training": {"training_data": {"systems": "sys"}, "numb_steps": 3},
    }
    assert config_from_dict(d).to_dict() == {
        "model": {
            "type_map": ["Cu"],
            "descriptor": {"type": "se_e2_a", "sel": [8], "rcut": 6.0, "rcut_smth": 0.5, "neuron": [4, 8],
                           "axis_neuron": 4, "type_one_side": False, "resnet_dt": False,
                           "activation_function": "tanh", "precision": "default", "seed": None,
                           "set_davg_zero": False},
            "fitting_net": {"type": "ener", "neuron": [120, 120, 120], "resnet_dt": True,
                            "activation_function": "tanh", "precision": "default", "seed": None},
            "data_stat_nbatch": 10, "data_stat_protect": 0.01,
        },
        "learning_rate": {"type": "exp", "start_lr": 1e-3, "stop_lr": 5e-8, "stop_lr_ratio": None,
                          "decay_steps": 5000, "decay_rate": None, "smooth": False, "decay_phase_ratio": 0.1,
                          "decay_type": "inverse_linear", "warmup_steps": 0, "warmup_ratio": None,
                          "warmup_start_factor": 0.0, "scale_by_worker": "linear"},
        "loss": {"type": "ener", "start_pref_e": 0.02, "limit_pref_e": 1.0, "start_pref_f": 1000.0,
                 "limit_pref_f": 1.0, "start_pref_v": 0.0, "limit_pref_v": 0.0},
        "optimizer": {"type": "Adam", "adam_beta1": 0.9, "adam_beta2": 0.999, "weight_decay": 0.0,
                      "adam_form": "pytorch"},
        "training": {
            "training_data": {"systems": "sys", "batch_size": "auto", "auto_prob": "prob_sys_size", "sys_probs": None,
                              "set_prefix": "set", "rglob_patterns": None, "min_pair_dist": 0.0},
            "validation_data": None, "numb_steps": 3, "numb_epoch": None, "seed": None, "disp_file": "lcurve.out",
            "disp_freq": 1000,
            "save_freq": 1000, "save_ckpt": "model.ckpt", "max_ckpt_keep": 5, "disp_training": True,
            "time_training": True, "enable_profiler": False, "change_bias_after_training": False, "tensorboard": False,
            "tensorboard_log_dir": "log", "tensorboard_freq": 1,
            "strict_sel": False, "kernels": "auto", "pair_packing": True, "pair_sharing": True,
            "embedding_table": 0,
            "neighbor_cache_mb": 2048,
            "merge_batches": True,
            "gradient_max_norm": None, "enable_ema": False, "ema_decay": 0.999, "ema_ckpt_keep": None,
            "keep_best": False, "early_stop": 0, "steps_per_dispatch": "auto",
        },
    }  # fmt: skip


def test_descriptor_default_sel_is_auto_and_auto_forms_are_kept():
    d = _minimal()
    del d["model"]["descriptor"]["sel"]
    assert config_from_dict(d).model.descriptor.sel == "auto"
    d["model"]["descriptor"]["sel"] = "auto:1.5"
    assert config_from_dict(d).model.descriptor.sel == "auto:1.5"


def test_validation_defaults():
    d = _minimal()
    d["training"]["validation_data"] = {"systems": "v"}
    v = config_from_dict(d).training.validation_data
    assert (v.systems, v.batch_size, v.numb_btch, v.auto_prob, v.sys_probs) == ("v", "auto", 1, "prob_sys_size", None)


def test_deepmd_aliases_comments_and_defaults_of_features_we_lack():
    d = _minimal()
    d["_comment"] = "top"
    d["model"]["_comment1"] = "that's all"
    d["model"]["descriptor"]["type"] = "se_a"
    d["model"]["descriptor"]["n_axis_neuron"] = d["model"]["descriptor"].pop("axis_neuron")
    d["model"]["fitting_net"]["n_neuron"] = d["model"]["fitting_net"].pop("neuron")
    d["model"]["descriptor"]["activation_function"] = "None"
    d["training"]["stop_batch"] = d["training"].pop("numb_steps")
    d["training"]["training_data"]["auto_prob_style"] = "prob_uniform"
    d["training"]["training_data"]["sys_weights"] = [0.5, 0.5]
    d["training"]["validation_data"] = {"systems": ["v"], "numb_batch": 2, "_comment": "x"}
    d["training"].update(profiling=False, stat_file=None, zero_stage=0, enable_tf32=False, numb_test=1)
    d["model"].update(data_bias_nsample=10, bridging_r_inner=0.5)
    d["validating"] = {}
    d["nvnmd"] = {"enable": False}
    cfg = config_from_dict(d)
    assert cfg.model.descriptor.type == "se_e2_a" and cfg.model.descriptor.axis_neuron == 4
    assert cfg.model.descriptor.activation_function == "none"
    assert cfg.model.fitting_net.neuron == (16, 16)
    assert cfg.training.numb_steps == 10
    assert cfg.training.training_data.auto_prob == "prob_uniform"
    assert cfg.training.training_data.sys_probs == (0.5, 0.5)
    assert cfg.training.validation_data.numb_btch == 2


def test_frozen_hashable_and_replace_validates():
    cfg = config_from_dict(_minimal())
    assert hash(cfg) == hash(config_from_dict(_minimal()))
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.training.numb_steps = 5  # type: ignore[misc]
    longer = dataclasses.replace(cfg, training=dataclasses.replace(cfg.training, numb_steps=99))
    assert longer.training.numb_steps == 99 and cfg.training.numb_steps == 10
    with pytest.raises(InputError, match="'training.numb_steps'"):
        dataclasses.replace(cfg.training, numb_steps=-1)
    with pytest.raises(InputError, match="'model.descriptor.rcut_smth'"):
        dataclasses.replace(cfg.model.descriptor, rcut_smth=7.0)
    assert isinstance(dataclasses.replace(cfg.model.descriptor, neuron=[8, 16]).neuron, tuple)
    assert isinstance(cfg.training, TrainingConfig) and isinstance(cfg.model.descriptor, DescriptorConfig)


# ----------------------------------------------------------------------------- YAML scalars
def test_yaml_scalars(tmp_path):
    text = """
model:
  type_map: [No, O, Y]      # nobelium must not become false
  descriptor: {type: se_e2_a, sel: [4, 4, 4], neuron: [8], axis_neuron: 4}
  fitting_net: {}
learning_rate: {start_lr: 1e-3, stop_lr: 1E-8}
training:
  training_data: {systems: s}
  numb_steps: 010
  seed: -3
"""
    cfg = load_config(_write(tmp_path, "c.yml", text))
    assert cfg.model.type_map == ("No", "O", "Y")
    assert cfg.learning_rate.start_lr == 1e-3 and cfg.learning_rate.stop_lr == 1e-8
    assert cfg.training.numb_steps == 10 and cfg.training.seed == -3


# ----------------------------------------------------------------------------- overrides
@pytest.fixture
def small_yaml(tmp_path):
    d = _minimal()
    d["training"]["validation_data"] = {"systems": ["v"], "numb_btch": 3}
    return _write(tmp_path, "in.yaml", json.dumps(d))


def test_overrides(small_yaml):
    cfg = load_config(
        small_yaml,
        [
            "training.numb_steps=2000",
            "model.descriptor.sel=[40, 90]",
            "learning_rate.start_lr=1e-4",
            "optimizer.weight_decay=0.01",  # a section the file does not have
            "optimizer.adam_form=tensorflow",
            "training.num_steps=3000",  # DeePMD-kit alias, applied after: wins
            "training.validation_data.numb_btch = 5",
        ],
    )
    assert cfg.training.numb_steps == 3000
    assert cfg.model.descriptor.sel == (40, 90)
    assert cfg.learning_rate.start_lr == 1e-4
    assert cfg.optimizer.weight_decay == 0.01 and cfg.optimizer.adam_form == "tensorflow"
    assert cfg.training.validation_data.numb_btch == 5
    with pytest.raises(InputError, match="'optimizer.adam_form'"):
        load_config(small_yaml, ["optimizer.adam_form=tf"])
    assert load_config(small_yaml, ["training.validation_data=null"]).training.validation_data is None
    assert load_config(small_yaml, "training.seed=7").training.seed == 7  # one string is one override


def test_override_systems_relative_to_cwd(small_yaml, tmp_path, monkeypatch):
    run = tmp_path / "run"
    run.mkdir()
    monkeypatch.chdir(run)
    cfg = load_config(small_yaml, ["training.training_data.systems=[x, /abs/y]", "training.training_data.batch_size=2"])
    assert cfg.training.training_data.systems == (str(run / "x"), "/abs/y")


@pytest.mark.parametrize(
    "override,fragment",
    [
        ("training.numb_stepz=5", "did you mean 'training.numb_steps'?"),
        ("model.descriptor.rcutt=5", "did you mean 'model.descriptor.rcut'?"),
        ("modle.type_map=[O]", "did you mean 'model'?"),
        ("model.type_map.x=1", "is a value, not a section"),
        ("training.numb_steps", "expected KEY=VALUE"),
        ("training..numb_steps=1", "expected KEY=VALUE"),
        ("training.numb_steps=[1", "cannot parse the value"),
        ("training.numb_steps=abc", "'training.numb_steps': expected an integer, got 'abc'"),
    ],
)
def test_override_errors(small_yaml, override, fragment):
    with pytest.raises(InputError) as info:
        load_config(small_yaml, [override])
    msg = str(info.value)
    assert fragment in msg and str(small_yaml) in msg and "\n" not in msg


# ----------------------------------------------------------------------------- data paths
def test_paths_resolve_against_config_dir(tmp_path):
    d = _minimal()
    d["training"]["training_data"]["systems"] = ["../data/a", "/abs/b", "c/"]
    d["training"]["validation_data"] = {"systems": "../data/v"}
    sub = tmp_path / "configs"
    sub.mkdir()
    cfg = load_config(_write(sub, "x.json", d))
    assert cfg.training.training_data.systems == (str(tmp_path / "data" / "a"), "/abs/b", str(sub / "c"))
    assert cfg.training.validation_data.systems == str(tmp_path / "data" / "v")
    assert all(isinstance(s, str) for s in cfg.training.training_data.systems)
    # config_from_dict: as given without base_dir, resolved with one; absolute paths never change
    assert config_from_dict(d).training.training_data.systems == ("../data/a", "/abs/b", "c/")
    assert config_from_dict(d, base_dir=sub).training.training_data.systems == cfg.training.training_data.systems
    assert config_from_dict(cfg.to_dict(), base_dir="/elsewhere") == cfg


# ----------------------------------------------------------------------------- validation errors
_ERROR_CASES = [
    ({"training.numb_stepz": 5}, "training.numb_stepz", "did you mean 'training.numb_steps'?"),
    ({"model.descriptor.rcutt": 5.0}, "model.descriptor.rcutt", "did you mean 'model.descriptor.rcut'?"),
    ({"modle": {}}, "modle", "did you mean 'model'?"),
    ({"training.rcut": 6.0}, "training.rcut", "did you mean 'model.descriptor.rcut'?"),
    ({"training.numb_steps": "abc"}, "training.numb_steps", "expected an integer, got 'abc'"),
    ({"training.numb_steps": True}, "training.numb_steps", "expected an integer, got true"),
    ({"training.numb_steps": 2.5}, "training.numb_steps", "expected an integer"),
    ({"model.descriptor.rcut": "6"}, "model.descriptor.rcut", "expected a number"),
    ({"model.descriptor.type_one_side": 1}, "model.descriptor.type_one_side", "expected true or false"),
    ({"training.numb_steps": _DELETE}, "training.numb_steps", "required"),
    ({"model.type_map": _DELETE}, "model.type_map", "required"),
    ({"model.descriptor.type": _DELETE}, "model.descriptor.type", "required"),
    ({"training.training_data": _DELETE}, "training.training_data", "required"),
    ({"model.descriptor.rcut_smth": 6.0}, "model.descriptor.rcut_smth", "smaller than rcut"),
    ({"model.descriptor.rcut": 0}, "model.descriptor.rcut", "> 0"),
    ({"model.descriptor.rcut": -6.0}, "model.descriptor.rcut", "> 0"),
    ({"model.descriptor.sel": [46]}, "model.descriptor.sel", "2 types"),
    ({"model.descriptor.sel": [46, 0]}, "model.descriptor.sel", "entry 1"),
    ({"model.descriptor.sel": "auto:0.5"}, "model.descriptor.sel", "auto"),
    ({"model.descriptor.sel": "many"}, "model.descriptor.sel", "auto"),
    ({"model.type_map": ["O", "O"]}, "model.type_map", "appears twice"),
    ({"model.descriptor.axis_neuron": 64}, "model.descriptor.axis_neuron", "neuron[-1] = 32"),
    ({"model.descriptor.neuron": []}, "model.descriptor.neuron", "non-empty"),
    ({"training.training_data.batch_size": 0}, "training.training_data.batch_size", "> 0"),
    ({"training.training_data.batch_size": -2}, "training.training_data.batch_size", "> 0"),
    ({"training.training_data.batch_size": [1, 2, 3]}, "training.training_data.batch_size", "2 systems"),
    ({"training.training_data.batch_size": [1, 0]}, "training.training_data.batch_size", "entry 1"),
    ({"training.training_data.batch_size": "mixed:4"}, "training.training_data.batch_size", "auto:N"),
    ({"training.training_data.sys_probs": [1.0]}, "training.training_data.sys_probs", "2 systems"),
    ({"training.training_data.auto_prob": "prob_weird"}, "training.training_data.auto_prob", "prob_uniform"),
    ({"training.training_data.auto_prob": "prob_sys_size;0:x:1"}, "training.training_data.auto_prob", "0:x:1"),
    ({"training.training_data.systems": []}, "training.training_data.systems", "non-empty"),
    ({"training.numb_steps": -1}, "training.numb_steps", ">= 0"),
    ({"learning_rate.start_lr": 0}, "learning_rate.start_lr", "> 0"),
    ({"learning_rate.stop_lr": 0.0}, "learning_rate.stop_lr", "> 0"),
    ({"learning_rate.stop_lr": -1e-8}, "learning_rate.stop_lr", "> 0"),
    ({"learning_rate.decay_steps": 0}, "learning_rate.decay_steps", "> 0"),
    ({"learning_rate.decay_rate": 0.0}, "learning_rate.decay_rate", "in (0, 1]"),
    ({"training.disp_freq": 0}, "training.disp_freq", "> 0"),
    ({"training.save_freq": -5}, "training.save_freq", "> 0"),
    ({"training.validation_data": {"systems": "v", "numb_btch": 0}}, "training.validation_data.numb_btch", "> 0"),
    ({"training.validation_data": {"numb_btch": 1}}, "training.validation_data.systems", "required"),
    ({"loss.start_pref_ae": 0.5}, "loss.start_pref_ae", "only 0.0 is supported"),
    ({"loss.loss_func": "mae"}, "loss.loss_func", "only 'mse' is supported"),
    ({"loss.start_pref_e": 0, "loss.limit_pref_e": 0, "loss.start_pref_f": 0, "loss.limit_pref_f": 0}, "loss",
     "nothing to fit"),
    ({"loss.start_pref_v": -1}, "loss.start_pref_v", ">= 0"),
    ({"training.enable_ema": "yes"}, "training.enable_ema", "expected true or false"),
    ({"training.gradient_max_norm": -1.0}, "training.gradient_max_norm", ">= 0"),
    ({"training.numb_epoch": 3}, "training.numb_epoch", "numb_steps"),
    ({"training.profiling": "yes"}, "training.profiling", "not supported by jaxmd_dp (only false)"),
    ({"training.profiling": True}, "training.profiling", "enable_profiler"),
    ({"training.stat_file": "stat.hdf5"}, "training.stat_file", "not supported by jaxmd_dp (only null)"),
    ({"training.zero_stage": 1}, "training.zero_stage", "not supported"),
    ({"training.numb_test": 5}, "training.numb_test", "numb_btch"),
    ({"model.data_bias_nsample": 20}, "model.data_bias_nsample", "not supported by jaxmd_dp (only 10)"),
    ({"model.bridging_r_outer": 1.0}, "model.bridging_r_outer", "only 0.8"),
    ({"training.enable_profiler": 1}, "training.enable_profiler", "expected true or false"),
    ({"training.training_data.min_pair_dist": -0.5}, "training.training_data.min_pair_dist", ">= 0"),
    ({"training.training_data.rglob_patterns": []}, "training.training_data.rglob_patterns", "non-empty"),
    ({"training.validation_data": {"systems": "v", "min_pair_dist": 0.5}}, "training.validation_data.min_pair_dist",
     "not known"),
    ({"training.kernels": "cuda"}, "training.kernels", "'pallas'"),
    ({"training.embedding_table": 8}, "training.embedding_table", "from 16 to 1024"),
    ({"training.embedding_table": 2048}, "training.embedding_table", "from 16 to 1024"),
    ({"training.neighbor_cache_mb": -1}, "training.neighbor_cache_mb", ">= 0"),
    ({"training.numb_step": 3}, "training.numb_step", "another name for 'training.numb_steps'"),
    ({"training.systems": ["a"]}, "training.systems", "training.training_data.systems"),
    ({"model.descriptor.type": "se_e3", "model.descriptor.attn": 128}, "model.descriptor.type", "se_atten_v2"),
    ({"model.descriptor.type_map": ["O", "H"]}, "model.descriptor.type_map", "model.type_map"),
    ({"model.descriptor.activation_function": "swish"}, "model.descriptor.activation_function", "tanh"),
    ({"model.descriptor.precision": "float16"}, "model.descriptor.precision", "float32"),
    ({"model.descriptor.exclude_types": [[0, 1]]}, "model.descriptor.exclude_types", "only [] is supported"),
    ({"model.descriptor.trainable": False}, "model.descriptor.trainable", "only true"),
    ({"model.descriptor.env_protection": 0.1}, "model.descriptor.env_protection", "only 0.0"),
    ({"model.fitting_net.numb_fparam": 2}, "model.fitting_net.numb_fparam", "only 0 is supported"),
    ({"model.fitting_net.type": "dipole"}, "model.fitting_net.type", "'ener'"),
    ({"model.pair_exclude_types": [[0, 0]]}, "model.pair_exclude_types", "only []"),
    ({"model.use_srtab": "tab.txt"}, "model.use_srtab", "not supported"),
    ({"model.bridging_method": "ZBL"}, "model.bridging_method", "None"),
    ({"model.type": "dpa4"}, "model.type", "standard"),
    ({"model.descriptor": [1, 2]}, "model.descriptor", "expected a mapping"),
    ({"learning_rate.type": "poly"}, "learning_rate.type", "'exp', 'cosine', 'wsd'"),
    ({"learning_rate.warmup_steps": 100}, "learning_rate.warmup_steps", "not fewer than the 10 steps"),
    ({"learning_rate.scale_by_worker": "cube"}, "learning_rate.scale_by_worker", "'sqrt'"),
    ({"optimizer.type": "LKF"}, "optimizer.type", "'Adam', 'AdamW'"),
    ({"optimizer.adam_beta2": 1.0}, "optimizer.adam_beta2", "< 1"),
    ({"validating": {"full_validation": True}}, "validating", "full validation"),
    ({"nvnmd": {"enable": True}}, "nvnmd", "NVNMD"),
]  # fmt: skip


@pytest.mark.parametrize("changes,key,fragment", _ERROR_CASES, ids=[case[1] for case in _ERROR_CASES])
def test_validation_errors(changes, key, fragment):
    d = copy.deepcopy(_minimal())
    for dotted, value in changes.items():
        _set(d, dotted, value)
    msg = _raises(d)
    assert f"config key '{key}'" in msg, msg
    assert fragment in msg, msg


def test_bad_top_level():
    assert "mapping" in _raises([1, 2])  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- files
@pytest.mark.parametrize(
    "name,content,fragment",
    [
        ("bad.yaml", "model:\n  type_map: [O, H\ntraining: {}\n", "line "),
        ("bad.json", '{"model": {"type_map": ["O",]}}', "line 1"),
        ("dup.yaml", "model: {}\nmodel: {}\n", "duplicate key 'model'"),
        ("dup.json", '{"model": {}, "model": {}}', "duplicate key 'model'"),
        ("list.yaml", "- model\n", "mapping"),
        ("empty.yaml", "", "empty"),
        ("c.toml", "x = 1", "extension"),
    ],
)
def test_file_errors(tmp_path, name, content, fragment):
    path = _write(tmp_path, name, content)
    with pytest.raises(InputError) as info:
        load_config(path)
    msg = str(info.value)
    assert fragment in msg and str(path) in msg and "\n" not in msg


def test_missing_file_and_key_error_name_the_file(tmp_path):
    with pytest.raises(InputError, match="nope.yaml"):
        load_config(tmp_path / "nope.yaml")
    d = _minimal()
    d["training"]["numb_stepz"] = 3
    path = _write(tmp_path, "typo.yaml", json.dumps(d))
    with pytest.raises(InputError) as info:
        load_config(path)
    assert str(info.value) == (
        f"config key 'training.numb_stepz' is not known; did you mean 'training.numb_steps'? ({path})"
    )
