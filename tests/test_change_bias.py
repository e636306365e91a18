"""``jaxmd-dp change-bias`` gives the bias DeePMD-kit's ``change_out_bias`` gives (its NumPy model on the same
``.dp`` and frames), sets a given bias, and stops on bad input with one line."""

from pathlib import Path

import numpy as np
import pytest
from fixture_models import load_fixture
from shared_paths import require

from jaxmd_dp.cli.main import main
from jaxmd_dp.model.deepmd_file import save_deepmd
from jaxmd_dp.model.io import load_model

NFRAMES = 4


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    """nopbc_cho as DeePMD-kit's model.dp, and the first frames of the three C/H/O systems (three compositions)."""
    root = tmp_path_factory.mktemp("change_bias")
    hyper, params, stats, _ = load_fixture("nopbc_cho")
    save_deepmd(root / "model.dp", hyper, params, stats)
    src = require("nopbc_cho_combustion")
    for name in ("C1H4O2", "C3H3O4", "C4H3O1"):
        d = root / "data" / name
        (d / "set.000").mkdir(parents=True)
        for f in ("type.raw", "type_map.raw", "nopbc"):
            (d / f).write_bytes((src / name / f).read_bytes())
        for f in ("coord", "energy", "force"):
            np.save(d / "set.000" / f"{f}.npy", np.load(src / name / "set.000" / f"{f}.npy")[:NFRAMES])
    bad = root / "other" / "CHN"  # an element the model does not have
    bad.mkdir(parents=True)
    for f in ("type.raw", "nopbc", "set.000"):
        src_f, dst_f = root / "data" / "C4H3O1" / f, bad / f
        dst_f.symlink_to(src_f, target_is_directory=src_f.is_dir())
    (bad / "type_map.raw").write_text("C\nH\nN\n")
    return root, stats


def _deepmd_kit_bias(model: Path, data: Path, mode: str) -> np.ndarray:
    """DeePMD-kit's dpmodel: change_out_bias of the model on every frame of the systems under ``data``."""
    from deepmd.dpmodel.model.base_model import BaseModel
    from deepmd.dpmodel.utils.serialization import load_dp_model

    m = BaseModel.deserialize(load_dp_model(str(model))["model"])
    ntypes = len(m.get_type_map())
    sample = []
    for d in sorted(data.iterdir()):
        atype = np.loadtxt(d / "type.raw", dtype=int)
        coord = np.load(d / "set.000" / "coord.npy").reshape(NFRAMES, -1, 3)
        nf, natoms = coord.shape[:2]
        counts = np.bincount(atype, minlength=ntypes)
        sample.append(
            {
                "coord": coord,
                "atype": np.broadcast_to(atype, (nf, natoms)).copy(),
                "box": np.zeros((nf, 9)),
                "energy": np.load(d / "set.000" / "energy.npy").reshape(nf, 1),
                "find_energy": np.float32(1.0),
                "natoms": np.broadcast_to(np.concatenate([[natoms, natoms], counts]), (nf, 2 + ntypes)).copy(),
            }
        )
    m.change_out_bias(sample, bias_adjust_mode="change-by-statistic" if mode == "change" else "set-by-statistic")
    return np.asarray(m.get_out_bias()).reshape(-1) + np.asarray(m.atomic_model.fitting_net["bias_atom_e"]).reshape(-1)


@pytest.mark.parametrize("mode", ["change", "set"])
def test_bias_as_deepmd_kit(case, mode, capsys):
    root, stats = case
    out = root / f"{mode}.jaxdp"
    args = ["change-bias", str(root / "model.dp"), "-s", str(root / "data"), "-m", mode, "-o", str(out)]
    assert main(args) == 0
    assert "Saved model to" in capsys.readouterr().out
    ours = np.asarray(load_model(out)[2].energy_bias)
    ref = _deepmd_kit_bias(root / "model.dp", root / "data", mode)
    # the two models' energies (about 6e3 eV a frame) agree to ~1e-13 relative; the fit over three compositions
    # magnifies that
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-6)
    assert np.max(np.abs(ours - np.asarray(stats.energy_bias))) > 1e-3  # the bias did move


def test_given_bias_and_default_output(case):
    root, stats = case
    assert main(["change-bias", str(root / "model.dp"), "-b", "-1", "-2.5", "-3"]) == 0
    hyper, params, new = load_model(root / "model_updated.dp")
    np.testing.assert_array_equal(new.energy_bias, [-1.0, -2.5, -3.0])
    np.testing.assert_array_equal(new.davg, stats.davg)


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["nowhere.jaxdp", "-b", "1", "2", "3"], "nowhere.jaxdp: no such model"),
        (["{root}/model.dp", "-s", "{root}/no_data"], "no_data: systems directory not found"),
        (["{root}/model.dp", "-s", "{root}/other"], "'N'"),
        (["{root}/model.dp", "-b", "1", "2"], "-b: 2 values for the 3 types"),
        (["{root}/model.dp", "-f", "{root}/missing.txt"], "missing.txt: cannot read the data file"),
    ],
)
def test_bad_input_is_one_line(case, args, fragment, capsys):
    root, _ = case
    assert main(["change-bias", *(a.format(root=root) for a in args)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err
    assert fragment in err
