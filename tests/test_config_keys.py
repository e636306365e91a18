"""No config key is accepted and then ignored: the schema is walked section by section.

- A key of a DeePMD-kit feature jaxmd_dp does not have (a section's ``_fixed`` keys) loads at DeePMD-kit's
  default, and any other value is refused with one line that names the key.
- Every key the schema stores is read by the package outside jaxmd_dp.config.
- Nothing is type-checked and dropped (no ``_ignored`` keys).
"""

from __future__ import annotations

import ast
import copy
import dataclasses
from pathlib import Path

import pytest

from jaxmd_dp.config import Config, config_from_dict
from jaxmd_dp.errors import InputError

PACKAGE = Path(__file__).resolve().parents[1] / "jaxmd_dp"

# values tried for every fixed key: at least one of them must be refused
PROBES = (
    True,
    False,
    0,
    1,
    7,
    0.25,
    1e9,
    "x",
    "timeline.txt",
    [[0, 1]],
    {"enable": True, "full_validation": True},
    None,
    -3,
)


def _sections(cls=Config, path=()):
    """(key path, section class) of every section below ``cls``."""
    out = [(path, cls)]
    for f in dataclasses.fields(cls):
        if f.metadata.get("section") is not None:
            out += _sections(f.metadata["section"], path + (f.name,))
    return out


SECTIONS = _sections()
FIXED = [(path, cls, key) for path, cls in SECTIONS for key in cls._fixed]


def _minimal() -> dict:
    return {
        "model": {
            "type_map": ["O", "H"],
            "descriptor": {"type": "se_e2_a", "sel": [8, 16], "neuron": [4, 8], "axis_neuron": 2},
            "fitting_net": {"neuron": [8]},
        },
        "training": {"training_data": {"systems": ["a"]}, "validation_data": {"systems": ["b"]}, "numb_steps": 1},
    }


def _with(path: tuple, key: str, value) -> dict:
    d = copy.deepcopy(_minimal())
    node = d
    for p in path:
        node = node.setdefault(p, {})
    node[key] = value
    return d


def test_every_section_is_walked():
    names = {".".join(p) for p, _ in SECTIONS}
    assert {
        "",
        "model",
        "model.descriptor",
        "model.fitting_net",
        "learning_rate",
        "loss",
        "optimizer",
        "training",
        "training.training_data",
        "training.validation_data",
    } <= names
    assert len(FIXED) > 50


def test_nothing_is_type_checked_and_dropped():
    for path, cls in SECTIONS:
        assert not getattr(cls, "_ignored", None), ".".join(path)


@pytest.mark.parametrize("path,cls,key", FIXED, ids=[".".join((*p, k)) for p, _, k in FIXED])
def test_fixed_key_accepts_default_refuses_the_rest(path, cls, key):
    fixed = cls._fixed[key]
    full = ".".join((*path, key))
    assert fixed.ok(fixed.default), full
    config_from_dict(_with(path, key, fixed.default))  # DeePMD-kit's out.json writes it: it must load
    refused = 0
    for value in PROBES:
        if fixed.ok(value):
            config_from_dict(_with(path, key, value))
            continue
        with pytest.raises(InputError) as info:
            config_from_dict(_with(path, key, value))
        msg = str(info.value)
        assert f"config key '{full}'" in msg and "\n" not in msg, msg
        assert "not supported" in msg or "only" in msg, msg
        refused += 1
    assert refused, f"{full}: no probe value was refused"


def _names_read_by_the_package() -> set[str]:
    """Attribute names read anywhere in jaxmd_dp outside jaxmd_dp/config, and string constants (the model
    section is also read as a dict: ``ModelHyper.from_deepmd(config.model.to_dict())``)."""
    names = set()
    for f in PACKAGE.rglob("*.py"):
        if "config" in f.relative_to(PACKAGE).parts:
            continue
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute):
                names.add(node.attr)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names.add(node.value)
    return names


def test_every_stored_key_is_read():
    read = _names_read_by_the_package()
    unread = []
    for path, cls in SECTIONS:
        for f in dataclasses.fields(cls):
            if f.name == "type":  # one canonical value each: se_e2_a, ener, exp, Adam
                continue
            if f.name not in read:
                unread.append(".".join((*path, f.name)))
    assert not unread, f"accepted but read nowhere: {unread}"


@pytest.mark.parametrize(
    "path,key,value,fragment",
    [
        (("training",), "disp_avg", True, "averaged"),
        (("training",), "enable_compile", True, "torch.compile"),
        (("training",), "stat_file", "stat.hdf5", "statistics"),
        (("training",), "save_dir", "ckpts", "output directory"),
        (("training",), "ckpt_keep_ratio", 0.5, "max_ckpt_keep"),
        (("model",), "data_bias_nsample", 5, "energy bias"),
        (("model",), "bridging_r_inner", 0.3, "ZBL"),
    ],
)
def test_refusals_say_why(path, key, value, fragment):
    with pytest.raises(InputError, match=fragment):
        config_from_dict(_with(path, key, value))
