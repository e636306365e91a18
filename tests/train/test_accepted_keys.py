"""The trainer does what each formerly ignored DeePMD-kit key says: the data sections' set_prefix,
rglob_patterns and min_pair_dist, descriptor.set_davg_zero, fitting_net.seed, disp_training, time_training and
enable_profiler."""

import shutil

import jax
import numpy as np
from shared_paths import require
from tiny import tiny_cu_dict

from jaxmd_dp.config import config_from_dict
from jaxmd_dp.model.hyper import ModelHyper
from jaxmd_dp.train import Trainer, setup
from jaxmd_dp.train.callbacks import Profiler, default_callbacks

CU = "cu_asc22/iter.000000/02.fp/data.000"


def _system(dst, nframes, close=()):
    """The first ``nframes`` frames of the shared Cu system in ``frames.000``; atoms 0 and 1 1 Å apart in the
    frames ``close``."""
    src = require(CU)
    (dst / "frames.000").mkdir(parents=True)
    shutil.copy(src / "type.raw", dst / "type.raw")
    for name in ("coord", "box", "energy", "force", "virial"):
        a = np.load(src / "set.000" / f"{name}.npy")[:nframes].astype(np.float64)
        if name == "coord":
            for f in close:
                a[f, 3:6] = a[f, 0:3] + [1.0, 0.0, 0.0]
        np.save(dst / "frames.000" / f"{name}.npy", a)
    return dst


def test_trainer_honours_the_keys(tmp_path):
    root = tmp_path / "data"
    _system(root / "iter.000000" / "02.fp" / "data.000", 6, close=(1, 4))
    _system(root / "iter.000001" / "02.fp" / "data.001", 5)
    _system(root / "iter.000001" / "01.model" / "data.002", 4)  # not matched by the pattern
    valid = _system(tmp_path / "valid", 3, close=(0,))  # validation frames are not filtered (DeePMD-kit)
    d = tiny_cu_dict(numb_steps=3, disp_freq=1, disp_training=False, time_training=False)
    d["model"]["descriptor"]["set_davg_zero"] = True
    d["training"]["training_data"] = {
        "systems": str(root),
        "rglob_patterns": ["iter.*/02.fp/data.*"],
        "set_prefix": "frames",
        "min_pair_dist": 1.5,
        "batch_size": 1,
    }
    d["training"]["validation_data"] = {"systems": [str(valid)], "set_prefix": "frames", "batch_size": 1}
    lines = []
    trainer = Trainer(config_from_dict(d), tmp_path / "out", log=lines.append)
    assert [s.path.split("/")[-1] for s in trainer.train_systems] == ["data.000", "data.001"]
    assert [s.nframes for s in trainer.train_systems] == [4, 5] and trainer.valid_systems[0].nframes == 3
    text = "\n".join(lines)
    assert "min_pair_dist: 2 of 11 frames dropped" in text
    assert np.all(np.asarray(trainer.stats.davg) == 0.0) and np.all(np.asarray(trainer.stats.dstd) > 0.0)
    trainer.fit()
    text = "\n".join(lines)
    assert "trn:" not in text and "val:" not in text  # disp_training false
    assert "total wall time" not in text and "average training time" not in text  # time_training false
    assert not [ln for ln in (tmp_path / "out" / "lcurve.out").read_text().splitlines() if not ln.startswith("#")]


def test_fitting_seed_draws_the_fitting_nets_only():
    d = tiny_cu_dict()
    same = config_from_dict(d)
    d["model"]["fitting_net"]["seed"] = 2
    other = config_from_dict(d)
    hyper = ModelHyper.from_deepmd(same.model.to_dict())
    a, b = setup.fresh_params(same, hyper, 3), setup.fresh_params(other, hyper, 3)
    eq = lambda x, y: all(jax.tree_util.tree_leaves(jax.tree_util.tree_map(np.array_equal, x, y)))  # noqa: E731
    assert eq(a["descriptor"], b["descriptor"]) and not eq(a["fitting"], b["fitting"])


def test_enable_profiler_traces_into_the_tensorboard_dir(tmp_path):
    d = tiny_cu_dict(enable_profiler=True, tensorboard_log_dir="tb")
    (prof,) = [c for c in default_callbacks(config_from_dict(d), tmp_path, writer=True) if isinstance(c, Profiler)]
    assert prof.directory == tmp_path / "tb"
    given = default_callbacks(config_from_dict(d), tmp_path, writer=True, profile=tmp_path / "p")
    assert [c.directory for c in given if isinstance(c, Profiler)] == [tmp_path / "p"]  # --profile wins
    assert not [
        c for c in default_callbacks(config_from_dict(tiny_cu_dict()), tmp_path, True) if isinstance(c, Profiler)
    ]
