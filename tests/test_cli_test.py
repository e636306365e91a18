"""`convert_deepmd` then `test -d` reproduces DeePMD-kit's predictions; bad inputs give one-line errors."""

import subprocess
import sys

import numpy as np
import pytest
from fixture_models import fixture_dir

from jaxmd_dp.cli import convert_deepmd
from jaxmd_dp.cli import test as dptest
from jaxmd_dp.cli.util import run_cli


def _write_system(root, pred, with_box=True):
    """A DeePMD-kit npy system made of the fixture's frames (float64, labels = DeePMD-kit's DFT labels)."""
    root.mkdir(parents=True)
    (root / "type.raw").write_text(" ".join(str(t) for t in pred["atype"]) + "\n")
    (root / "type_map.raw").write_text("\n".join(str(t) for t in pred["type_map"]) + "\n")
    s = root / "set.000"
    s.mkdir()
    nf = pred["coord"].shape[0]
    np.save(s / "coord.npy", pred["coord"].reshape(nf, -1))
    if with_box:
        np.save(s / "box.npy", pred["box"].reshape(nf, 9))
    else:
        (root / "nopbc").write_text("")
    np.save(s / "energy.npy", pred["label_energy"])
    np.save(s / "force.npy", pred["label_force"].reshape(nf, -1))
    if "label_virial" in pred:
        np.save(s / "virial.npy", pred["label_virial"])
    return root


@pytest.mark.parametrize("name", ["cu_virial", "nopbc_cho"])
def test_convert_then_test_detail(tmp_path, name):
    d = fixture_dir(name)
    with np.load(d / "predictions.npz") as z:
        pred = {k: z[k] for k in z.files}
    system = _write_system(tmp_path / "sys", pred, with_box="box" in pred)
    assert run_cli(convert_deepmd.main, [str(d / "params.npz"), str(d / "input.json"), "-o", str(tmp_path / "m")]) == 0
    assert run_cli(dptest.main, ["-m", str(tmp_path / "m"), "-s", str(system), "-d", str(tmp_path / "detail")]) == 0
    e = np.loadtxt(tmp_path / "detail.e.out")
    f = np.loadtxt(tmp_path / "detail.f.out")
    np.testing.assert_allclose(e[:, 0], pred["label_energy"], rtol=0, atol=0)
    np.testing.assert_allclose(e[:, 1], pred["energy"], rtol=1e-10, atol=0)
    np.testing.assert_allclose(f[:, 3:], pred["force"].reshape(-1, 3), rtol=0, atol=1e-10 * np.abs(pred["force"]).max())
    ea = np.loadtxt(tmp_path / "detail.e_peratom.out")
    np.testing.assert_allclose(ea[:, 1], pred["energy"] / pred["atype"].size, rtol=1e-10)
    assert (tmp_path / "detail.e.out").read_text().startswith(f"# {system}: data_e pred_e")
    if "box" in pred:
        v = np.loadtxt(tmp_path / "detail.v.out")
        np.testing.assert_allclose(v[:, 9:], pred["virial"], rtol=0, atol=1e-10 * np.abs(pred["virial"]).max())
        np.testing.assert_allclose(v[:, :9], pred["label_virial"], rtol=0, atol=0)
        assert (tmp_path / "detail.v_peratom.out").exists()
    else:
        assert not (tmp_path / "detail.v.out").exists()


@pytest.fixture(scope="module")
def cu_model(tmp_path_factory):
    d = fixture_dir("cu_virial")
    out = tmp_path_factory.mktemp("m") / "cu"
    convert_deepmd.convert(d / "params.npz", d / "input.json", out)
    return out


def _broken_system(tmp_path, kind):
    s = tmp_path / "bad"
    (s / "set.000").mkdir(parents=True)
    rng = np.random.default_rng(0)
    (s / "type.raw").write_text("0 0 0 0\n")
    np.save(s / "set.000" / "coord.npy", rng.random((2, 12)) * 5)
    np.save(s / "set.000" / "box.npy", np.tile(np.eye(3).ravel() * 10, (2, 1)))
    np.save(s / "set.000" / "energy.npy", np.zeros(2))
    if kind == "missing type.raw":
        (s / "type.raw").unlink()
    elif kind == "coord shape":
        np.save(s / "set.000" / "coord.npy", rng.random((2, 11)))
    elif kind == "type not in type map":
        (s / "type.raw").write_text("0 0 1 0\n")
    elif kind == "missing set":
        for f in (s / "set.000").iterdir():
            f.unlink()
        (s / "set.000").rmdir()
    elif kind == "not numeric":
        (s / "set.000" / "energy.npy").write_text("hello")
    return s


@pytest.mark.parametrize(
    "kind,needle",
    [
        ("missing type.raw", "type.raw"),
        ("coord shape", "coord.npy"),
        ("type not in type map", "type"),
        ("missing set", "set"),
        ("not numeric", "energy.npy"),
    ],
)
def test_bad_system_one_line_error(tmp_path, cu_model, capsys, kind, needle):
    s = _broken_system(tmp_path, kind)
    rc = run_cli(dptest.main, ["-m", str(cu_model), "-s", str(s)])
    err = capsys.readouterr().err.strip()
    assert rc == 1
    assert err.startswith("error: ") and "\n" not in err and needle in err, err
    assert "Traceback" not in err


def test_cli_exit_code_no_traceback(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "jaxmd_dp.test", "-m", str(tmp_path / "none"), "-s", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 1
    assert r.stderr.strip().count("\n") == 0 and str(tmp_path) in r.stderr and "Traceback" not in r.stderr


def test_convert_without_torch_for_pt(tmp_path, capsys):
    pt = tmp_path / "model.ckpt.pt"
    pt.write_bytes(b"not a checkpoint")
    d = fixture_dir("cu_virial")
    rc = run_cli(convert_deepmd.main, [str(pt), str(d / "input.json"), "-o", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 1 and "model.ckpt.pt" in err and "\n" not in err.strip()
