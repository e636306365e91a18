"""A catalogue of bad inputs: each gives one line `error: ...` naming the file or key, exit status 1,
no traceback, and no half-written run."""

import errno
import shutil

import numpy as np
import pytest
from shared_paths import require
from train.tiny import tiny_cu_dict, write_config

from jaxmd_dp.cli.train import main as train_main
from jaxmd_dp.cli.util import run_cli


def cu_system(tmp_path, name="sys"):
    """A copy of a real 32-atom Cu system (first 20 frames) that a case can break."""
    src = require("cu_asc22") / "iter.000000/02.fp/data.000"
    dst = tmp_path / name
    (dst / "set.000").mkdir(parents=True)
    shutil.copy(src / "type.raw", dst / "type.raw")
    for f in ("coord", "box", "energy", "force", "virial"):
        np.save(dst / "set.000" / f"{f}.npy", np.load(src / "set.000" / f"{f}.npy")[:20])
    return dst


def _np(sys, name, fn):
    p = sys / "set.000" / f"{name}.npy"
    np.save(p, fn(np.load(p)))


def _system_case(fn):
    def make(tmp_path):
        s = cu_system(tmp_path)
        fn(s)
        d = tiny_cu_dict(numb_steps=2)
        d["training"]["training_data"]["systems"] = [str(s)]
        d["training"]["validation_data"] = None
        return [write_config(tmp_path / "in.json", d)]

    return make


def _config_case(edit):
    def make(tmp_path):
        d = tiny_cu_dict(numb_steps=2)
        edit(d)
        return [write_config(tmp_path / "in.json", d)]

    return make


def _close_atoms(s):
    def f(c):
        c = c.copy()
        c[3, 3:6] = c[3, 0:3] + 0.05
        return c

    _np(s, "coord", f)


def _singular_box(s):
    _np(s, "box", lambda b: np.concatenate([b[:, :6], b[:, :3]], axis=1))


def _left_handed_box(s):
    _np(s, "box", lambda b: np.concatenate([b[:, 3:6], b[:, :3], b[:, 6:]], axis=1))


CASES = {
    "missing system dir": (
        _config_case(lambda d: d["training"]["training_data"].update(systems=["/nonexistent/sys"])),
        "/nonexistent/sys",
    ),
    "empty system dir": (_system_case(lambda s: [p.unlink() for p in s.rglob("*") if p.is_file()]), "sys"),
    "coord shape": (_system_case(lambda s: _np(s, "coord", lambda c: c[:, :-1])), "coord.npy"),
    "force shape": (_system_case(lambda s: _np(s, "force", lambda c: c[:, :-3])), "force.npy"),
    "box shape": (_system_case(lambda s: _np(s, "box", lambda c: c[:, :6])), "box.npy"),
    "frame count mismatch": (_system_case(lambda s: _np(s, "energy", lambda c: c[:-1])), "energy.npy"),
    "NaN energy": (
        _system_case(lambda s: _np(s, "energy", lambda c: np.where(np.arange(c.size) == 4, np.nan, c))),
        "energy.npy",
    ),
    "Inf force": (_system_case(lambda s: _np(s, "force", lambda c: np.where(c > 1, np.inf, c))), "force.npy"),
    "singular box": (_system_case(_singular_box), "box"),
    "left-handed box": (_system_case(_left_handed_box), "box"),
    "atoms closer than 0.1 A": (_system_case(_close_atoms), "closer than 0.1"),
    "type index out of range": (_system_case(lambda s: (s / "type.raw").write_text("0\n" * 31 + "1\n")), "type.raw"),
    "type_map.raw element not in type_map": (_system_case(lambda s: (s / "type_map.raw").write_text("Ag\n")), "Ag"),
    "npy not numeric": (_system_case(lambda s: (s / "set.000" / "virial.npy").write_text("junk")), "virial.npy"),
    "duplicate element in type_map": (_config_case(lambda d: d["model"].update(type_map=["Cu", "Cu"])), "type_map"),
    "unknown config key": (_config_case(lambda d: d["training"].update(numb_stepz=3)), "numb_stepz"),
    "wrong value type": (_config_case(lambda d: d["training"].update(disp_freq="often")), "disp_freq"),
    "rcut_smth >= rcut": (_config_case(lambda d: d["model"]["descriptor"].update(rcut_smth=5.0)), "rcut_smth"),
    "sel shorter than ntypes": (_config_case(lambda d: d["model"].update(type_map=["Cu", "Ag"])), "sel"),
    "batch_size 0": (_config_case(lambda d: d["training"]["training_data"].update(batch_size=0)), "batch_size"),
    "numb_steps < 0": (_config_case(lambda d: d["training"].update(numb_steps=-5)), "numb_steps"),
    "config file missing": (lambda tmp_path: [str(tmp_path / "nope.yaml")], "nope.yaml"),
    "invalid YAML": (lambda tmp_path: [str(_file(tmp_path / "bad.yaml", "model: [1, 2\n"))], "bad.yaml"),
    "override without =": (
        lambda tmp_path: [write_config(tmp_path / "in.json", tiny_cu_dict(2)), "training.numb_steps"],
        "override",
    ),
    "output dir not writable": (
        lambda tmp_path: [
            write_config(tmp_path / "in.json", tiny_cu_dict(2)),
            "-o",
            str(_file(tmp_path / "file") / "out"),
        ],
        "not writable",
    ),
    "unreadable checkpoint": (
        lambda tmp_path: [
            write_config(tmp_path / "in.json", tiny_cu_dict(2)),
            "-o",
            str(tmp_path / "o"),
            "--restart",
            str(_garbage_ckpt(tmp_path)),
        ],
        "ckpt",
    ),
}


def _file(path, text=""):
    path.write_text(text)
    return path


def _garbage_ckpt(tmp_path):
    c = tmp_path / "ckpt"
    (c / "5" / "state").mkdir(parents=True)
    (c / "5" / "state" / "junk").write_text("x")
    return c


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_one_line_error(tmp_path, capsys, case):
    make, needle = CASES[case]
    argv = make(tmp_path)
    if "-o" not in argv:
        argv += ["-o", str(tmp_path / "out")]
    rc = run_cli(train_main, argv)
    err = capsys.readouterr().err.strip()
    assert rc == 1, err
    assert err.startswith("error: ") and "\n" not in err, err
    assert needle.lower() in err.lower(), err
    out = tmp_path / "out"
    assert not (out / "lcurve.out").exists() and not (out / "model.ckpt").exists()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    d = tmp_path_factory.mktemp("trained")
    cfg = write_config(d / "in.json", tiny_cu_dict(numb_steps=2))
    assert run_cli(train_main, [cfg, "-o", str(d / "out")]) == 0
    return d, cfg


def test_existing_run_is_not_overwritten(trained, capsys):
    d, cfg = trained
    before = (d / "out" / "lcurve.out").read_text()
    assert run_cli(train_main, [cfg, "-o", str(d / "out")]) == 1
    err = capsys.readouterr().err
    assert "already holds a training run" in err and "--force" in err
    assert (d / "out" / "lcurve.out").read_text() == before


def test_restart_with_incompatible_model(trained, tmp_path, capsys):
    d, _ = trained
    cfg = tiny_cu_dict(numb_steps=4)
    cfg["model"]["fitting_net"]["neuron"] = [16, 16]
    rc = run_cli(
        train_main, [write_config(tmp_path / "in.json", cfg), "-o", str(d / "out"), "--restart", str(d / "out")]
    )
    err = capsys.readouterr().err
    assert rc == 1 and "differs from the config" in err and "fit_neuron" in err


def test_disk_full_while_saving(trained, tmp_path, capsys, monkeypatch):
    from jaxmd_dp.train.checkpoint import Checkpointer

    d, cfg = trained

    def full(self, step, state, meta, replace=False):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Checkpointer, "save", full)
    rc = run_cli(train_main, [cfg, "-o", str(d / "out"), "--restart", str(d / "out"), "training.numb_steps=4"])
    err = capsys.readouterr().err.strip()
    assert rc == 1 and "No space left on device" in err and "last complete checkpoint is 2" in err and "\n" not in err


def test_sel_overflow_is_reported_or_strict(tmp_path):
    """More neighbours than sel: a warning naming the sel needed, or an error with training.strict_sel."""
    from jaxmd_dp.config import config_from_dict
    from jaxmd_dp.errors import InputError
    from jaxmd_dp.train import Trainer

    d = tiny_cu_dict(numb_steps=1)
    d["model"]["descriptor"]["sel"] = [8]  # fcc Cu has 12+ neighbours within 4.5 Å
    lines = []
    Trainer(config_from_dict(d), tmp_path / "warn", log=lines.append).fit()
    warn = [ln for ln in lines if ln.startswith("warning:")]
    assert len(warn) == 1 and "> sel [8]" in warn[0] and "raise sel to at least" in warn[0]
    d["training"]["strict_sel"] = True
    with pytest.raises(InputError, match="strict_sel"):
        Trainer(config_from_dict(d), tmp_path / "strict", log=lambda *a: None).fit()
