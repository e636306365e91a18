"""Model files (jaxmd_dp.model.io): one content in a directory or a zip file, bit for bit; the layouts
written by earlier versions still load; Model.save / Model.load pick the container by suffix."""

import io
import json
import zipfile

import jax
import numpy as np
import pytest
from flax.traverse_util import flatten_dict

from jaxmd_dp.errors import InputError
from jaxmd_dp.model import io as mio
from jaxmd_dp.model.energy import ModelHyper, Stats, param_shapes
from jaxmd_dp.model.trained import Model
from jaxmd_dp.version import __version__

#: The ``hyper`` dict of a small se_e2_a model as earlier versions wrote it (no ``descriptor`` key).
OLD_HYPER = {
    "type_map": ["O", "H"],
    "sel": [6, 12],
    "rcut": 4.0,
    "rcut_smth": 0.5,
    "neuron": [4, 8],
    "axis_neuron": 2,
    "type_one_side": True,
    "resnet_dt": False,
    "activation": "tanh",
    "fit_neuron": [8],
    "fit_resnet_dt": True,
    "fit_activation": "tanh",
    "precision": "float64",
    "fit_precision": "float32",
}


@pytest.fixture(scope="module")
def model():
    """A two-type model with random weights and statistics (float64, and a float32 fitting net)."""
    hyper = ModelHyper.from_dict(OLD_HYPER)
    rng = np.random.default_rng(0)
    params = jax.tree_util.tree_map(lambda s: rng.normal(0, 0.3, s.shape).astype(s.dtype), param_shapes(hyper))
    stats = Stats(rng.normal(0, 0.1, (2, 18, 4)), rng.uniform(0.5, 1.5, (2, 18, 4)), np.array([-93.6, -187.1]))
    return hyper, params, stats


def _arrays(params, stats):
    """The weights as earlier versions wrote them: Flax paths under params/, statistics under stats/."""
    arrays = {"params/" + "/".join(k): np.asarray(v) for k, v in flatten_dict(params).items()}
    arrays.update({f"stats/{k}": np.asarray(v) for k, v in Stats(*stats)._asdict().items()})
    return arrays


def _assert_identical(params, stats, want):
    """(params, stats) equal the model ``want`` bit for bit, dtypes and shapes included."""
    got, ref = _arrays(params, stats), _arrays(*want[1:])
    assert sorted(got) == sorted(ref)
    for k, v in ref.items():
        assert got[k].dtype == v.dtype and got[k].shape == v.shape and got[k].tobytes() == v.tobytes(), k


@pytest.mark.parametrize("container", ["directory", "zip"])
def test_round_trip_is_bitwise(tmp_path, model, container):
    hyper, params, stats = model
    info = {"source": "tests", "note": "Å"}
    if container == "directory":
        path = mio.save_model(tmp_path / "m", hyper, params, stats, info)
        assert sorted(p.name for p in path.iterdir()) == [mio.META_NAME, mio.WEIGHTS_NAME]
    else:
        path = mio.save_frozen(tmp_path / "m.jaxdp", hyper, params, stats, info)
        with zipfile.ZipFile(path) as z:
            assert sorted(z.namelist()) == [mio.META_NAME, mio.WEIGHTS_NAME]
    meta = mio.read_meta(path)
    assert meta["format"] == mio.FORMAT and meta["version"] == mio.FORMAT_VERSION and meta["jaxmd_dp"] == __version__
    assert meta["info"] == info and meta["exported"] is None and meta["hyper"] == hyper.to_dict()
    h, p, s = mio.load_model(path)
    assert h == hyper
    _assert_identical(p, s, model)
    assert np.asarray(p["fitting"]["fit_0"]["layer_0"]["matrix"]).dtype == np.float32
    mio.save_model(path.parent / "again", *mio.load_model(path))  # an existing model directory is replaced
    path2 = mio.save_model(path.parent / "again", hyper, params, stats)
    _assert_identical(*mio.load_model(path2)[1:], model)
    assert not [q.name for q in tmp_path.iterdir() if q.name.startswith(".")]  # no temporaries left


def test_directory_and_zip_hold_the_same_members(tmp_path, model):
    d = mio.save_model(tmp_path / "m", *model, info={"k": 1})
    f = mio.save_frozen(tmp_path / "m.jaxdp", *model, info={"k": 1})
    with zipfile.ZipFile(f) as z:
        for name in z.namelist():
            assert z.read(name) == (d / name).read_bytes(), name


def test_earlier_layouts_load(tmp_path, model):
    """A model directory (model.json, format "jaxmd_dp.model" 1, no "exported") and a frozen zip file
    (frozen.json, format "jaxmd_dp.frozen" 1), each written as earlier versions wrote them."""
    hyper, params, stats = model
    old_dir = tmp_path / "old_model"
    old_dir.mkdir()
    np.savez(old_dir / "weights.npz", **_arrays(params, stats))
    meta = {
        "format": "jaxmd_dp.model",
        "version": 1,
        "jaxmd_dp": "0.1.0",
        "hyper": OLD_HYPER,
        "info": {"converted_from": "params.npz"},
    }
    (old_dir / "model.json").write_text(json.dumps(meta, indent=2))

    old_zip = tmp_path / "old.jaxdp"
    buf = io.BytesIO()
    np.savez(buf, **_arrays(params, stats))
    meta = {
        "format": "jaxmd_dp.frozen",
        "version": 1,
        "jaxmd_dp": "0.1.0",
        "hyper": OLD_HYPER,
        "info": {"step": 7},
        "exported": None,
    }
    with zipfile.ZipFile(old_zip, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("frozen.json", json.dumps(meta, indent=2, ensure_ascii=False).encode())
        z.writestr("weights.npz", buf.getvalue())

    for path, info in ((old_dir, {"converted_from": "params.npz"}), (old_zip, {"step": 7})):
        h, p, s = mio.load_model(path)
        assert h == hyper
        _assert_identical(p, s, model)
        meta = mio.read_meta(path)
        assert meta["info"] == info and meta["exported"] is None
        assert Model.load(path).hyper == hyper
    with pytest.raises(InputError, match="holds no exported function"):
        mio.read_exported(old_zip)
    # a version of the earlier zip layout newer than this code reads is refused as such
    newer = tmp_path / "newer.jaxdp"
    with zipfile.ZipFile(old_zip) as zi, zipfile.ZipFile(newer, "w") as zo:
        zo.writestr("frozen.json", json.dumps({**json.loads(zi.read("frozen.json")), "version": 2}))
        zo.writestr("weights.npz", zi.read("weights.npz"))
    with pytest.raises(InputError, match="newer.jaxdp: model format version 2 is newer"):
        mio.load_model(newer)


def test_bad_model_files(tmp_path, model):
    with pytest.raises(InputError, match="nothing: no such model"):
        mio.load_model(tmp_path / "nothing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="empty: not a model directory"):
        mio.load_model(tmp_path / "empty")
    d = mio.save_model(tmp_path / "m", *model)
    (d / mio.WEIGHTS_NAME).unlink()
    with pytest.raises(InputError, match="m: corrupt model .*weights.npz"):
        mio.load_model(d)
    (d / mio.META_NAME).write_text(json.dumps({"format": "something.else", "version": 1}))
    with pytest.raises(InputError, match="not a jaxmd_dp model directory \\(format 'something.else'\\)"):
        mio.load_model(d)
    (d / mio.META_NAME).write_text("{not json")
    with pytest.raises(InputError, match="cannot read the model directory"):
        mio.load_model(d)
    (tmp_path / "a_file").write_text("")
    for save in (mio.save_frozen, mio.save_model):
        with pytest.raises(InputError, match="inside.jaxdp: cannot write the model"):
            save(tmp_path / "a_file" / "inside.jaxdp", *model)  # a parent that is a file


def test_model_save_picks_the_container_by_suffix(tmp_path, model):
    m = Model(*model)
    d, f = m.save(tmp_path / "model_dir"), m.save(tmp_path / "model.JAXDP", {"k": "v"})
    assert d.is_dir() and zipfile.is_zipfile(f) and mio.read_meta(f)["info"] == {"k": "v"}
    assert mio.file_format(tmp_path / "x.bin") is mio.FILE_FORMATS[".jaxdp"]  # unknown suffix: the zip file
    for path in (d, f):
        back = Model.load(path)
        assert back.hyper == m.hyper
        _assert_identical(back.params, back.stats, model)
