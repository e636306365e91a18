"""DeePMD-kit's model file through the command-line tools: ``freeze -o model.dp``, ``test -m model.dp``,
``convert_deepmd model.dp -o DIR``, and the one-line refusals."""

from __future__ import annotations

import numpy as np
import pytest

from jaxmd_dp.cli import convert_deepmd, freeze
from jaxmd_dp.cli import test as dptest
from jaxmd_dp.cli.util import run_cli
from jaxmd_dp.model.io import load_model, save_model

CASE = "water_pairnets"


@pytest.fixture(scope="module")
def model_dir(cases, tmp_path_factory):
    c = cases[CASE]
    return save_model(tmp_path_factory.mktemp("cli") / "model", c.hyper, c.params, c.stats)


def _same(a, b):
    import jax

    la, lb = jax.tree_util.tree_leaves((a[1], tuple(a[2]))), jax.tree_util.tree_leaves((b[1], tuple(b[2])))
    return a[0] == b[0] and len(la) == len(lb) and all(np.array_equal(x, y) for x, y in zip(la, lb))


@pytest.mark.parametrize("suffix", [".dp", ".yaml"])
def test_freeze_to_deepmd_file_and_back(model_dir, tmp_path, suffix, capsys):
    out = tmp_path / f"model{suffix}"
    assert run_cli(freeze.main, ["-m", str(model_dir), "-o", str(out)]) == 0
    assert _same(load_model(model_dir), load_model(out))  # test -m, freeze -m and --init-frz-model read it so
    back = tmp_path / "back"
    assert run_cli(convert_deepmd.main, [str(out), "-o", str(back)]) == 0
    assert _same(load_model(model_dir), load_model(back))


def test_test_command_on_a_dp_file(model_dir, cases, tmp_path, capsys):
    from deepmd_cases import write_system

    out = tmp_path / "model.dp"
    assert run_cli(freeze.main, ["-m", str(model_dir), "-o", str(out)]) == 0
    system = write_system(tmp_path / "system", cases[CASE])  # labels: our own predictions
    capsys.readouterr()
    assert run_cli(dptest.main, ["-m", str(out), "-s", str(system)]) == 0
    rmse = [
        float(line.split(":")[1].split()[0])
        for line in capsys.readouterr().out.splitlines()
        if "Energy RMSE        :" in line or "Force  RMSE        :" in line
    ]
    assert rmse and max(rmse) < 1e-9, rmse


def test_refusals_are_one_line(model_dir, cases, tmp_path, capsys):
    from deepmd_cases import write_system

    system = write_system(tmp_path / "system", cases[CASE])
    assert run_cli(freeze.main, ["-m", str(model_dir), "-o", str(tmp_path / "m.dp"), "--export", "--natoms", "3"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--export" in err[0] and not (tmp_path / "m.dp").exists()
    assert run_cli(freeze.main, ["-m", str(model_dir), "-o", str(tmp_path / "m.pb")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "freeze -o m.dp), then dp convert-backend m.dp m.pb" in err[0], err
    assert not (tmp_path / "m.pb").exists()
    (tmp_path / "graph.pb").write_bytes(b"x")
    assert run_cli(dptest.main, ["-m", str(tmp_path / "graph.pb"), "-s", str(system)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "dp convert-backend graph.pb graph.dp" in err[0]
    assert run_cli(convert_deepmd.main, [str(tmp_path / "params.npz"), "-o", str(tmp_path / "x")]) == 1
    assert "needs DeePMD-kit's input.json" in capsys.readouterr().err
