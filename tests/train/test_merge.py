"""Merged batches (training.merge_batches): batches of every shape run through one compiled step and give
the per-shape step's loss, metrics and gradients."""

import copy

import jax
import numpy as np
import pytest
from shared_paths import require
from tiny import tiny_cu_dict

from jaxmd_dp.config import config_from_dict
from jaxmd_dp.train import Trainer
from jaxmd_dp.train.merge import bucket_sizes
from jaxmd_dp.train.step import batch_loss

# Cu systems of 1, 12, 16 and 32 atoms: batch size "auto" gives 32 × 1, 3 × 12, 2 × 16 and 1 × 32 atoms
CU_SYSTEMS = [
    "vacuum",
    "iter.000032/02.fp/data.024",
    "cu.bcc.02x02x02/02.md/sys-0016/deepmd",
    "iter.000000/02.fp/data.000",
]


def cu_dict(**training) -> dict:
    cu = require("cu_asc22")
    d = tiny_cu_dict(numb_steps=10, **training)
    d["training"]["training_data"] = {"systems": [str(cu / s) for s in CU_SYSTEMS], "batch_size": "auto"}
    d["training"]["validation_data"] = {
        "systems": [str(cu / s) for s in CU_SYSTEMS[1:3]],
        "batch_size": "auto",
        "numb_btch": 2,
    }
    return d


def nopbc_dict() -> dict:
    root = require("nopbc_cho_combustion")
    d = tiny_cu_dict(numb_steps=10)
    d["model"]["type_map"] = ["C", "H", "O"]
    d["model"]["descriptor"].update(sel=[8, 8, 8], rcut=5.0, rcut_smth=1.0)
    d["training"]["training_data"] = {
        "systems": [str(p) for p in sorted(root.iterdir()) if p.is_dir()],
        "batch_size": "auto",
    }
    d["training"]["validation_data"] = None
    return d


VARIANTS = {"cu": cu_dict(), "cu_table": cu_dict(embedding_table=16), "nopbc": nopbc_dict()}


def pair(d: dict, tmp_path_factory):
    """The same set-up with merged batches and with one step per shape."""
    plain = copy.deepcopy(d)
    plain["training"]["merge_batches"] = False
    return tuple(
        Trainer(config_from_dict(x), tmp_path_factory.mktemp("merge"), log=lambda *a: None) for x in (d, plain)
    )


@pytest.fixture(scope="module", params=list(VARIANTS))
def trainers(request, tmp_path_factory):
    return pair(VARIANTS[request.param], tmp_path_factory)


def _loss(trainer, arrays, layout):
    fn = jax.jit(
        jax.value_and_grad(
            lambda p, a, lay: batch_loss(
                trainer.hyper, trainer.prefs, trainer.start_lr, lay, p, trainer.stats, a, 3e-4
            ),
            has_aux=True,
        ),
        static_argnums=2,
    )
    (loss, metrics), grads = fn(trainer.state.params, arrays, layout)
    return float(loss), {k: np.asarray(v) for k, v in metrics.items()}, grads


def test_merged_step_gives_the_per_shape_numbers(trainers):
    merged, plain = trainers
    assert merged.merged and not plain.merged
    systems = merged.train_data.systems
    assert len({(s.natoms, min(b, s.nframes)) for s, b in zip(systems, merged.train_data.batch_sizes)}) >= 3
    shapes, layouts = set(), set()
    for i in range(len(systems)):
        batch = merged.train_data.next_batch_from(i)
        arrays, layout = merged.prepare(batch)
        shapes.add(tuple((k, np.shape(v)) for k, v in sorted(arrays.items())))
        layouts.add(layout)
        loss_m, metrics_m, grads_m = _loss(merged, arrays, layout)
        loss_p, metrics_p, grads_p = _loss(plain, *plain.prepare(batch))
        assert loss_m == pytest.approx(loss_p, rel=1e-10), i
        for k in metrics_p:
            np.testing.assert_allclose(metrics_m[k], metrics_p[k], rtol=1e-10, err_msg=f"system {i} {k}")
        for gm, gp in zip(jax.tree_util.tree_leaves(grads_m), jax.tree_util.tree_leaves(grads_p)):
            np.testing.assert_allclose(gm, gp, rtol=1e-8, atol=1e-12 * np.abs(gp).max())
    nshapes = len({(s.natoms, min(b, s.nframes)) for s, b in zip(systems, merged.train_data.batch_sizes)})
    assert len(shapes) == len(layouts) == len(merged.merged["train"]) < nshapes  # one compile per merged size


def test_merged_training_equals_per_shape(tmp_path_factory):
    """Ten steps with validation: the same learning curve to ~1e-9, merged or not."""
    merged, plain = pair(cu_dict(), tmp_path_factory)
    merged.fit()
    plain.fit()
    rows = [np.loadtxt(t.lcurve_path) for t in (merged, plain)]
    assert rows[0].shape == rows[1].shape and rows[0].shape[0] >= 3
    np.testing.assert_allclose(rows[0], rows[1], rtol=1e-9)


def test_bucket_sizes():
    # Al-Cu-Mg's batches: 32 atoms (2 × 16, 1 × 32) nearly always, 36 and 40 rarely: 36 joins 40, 32 stays
    assert bucket_sizes([32, 32, 36, 40], [0.46, 0.46, 0.07, 0.01]) == [32, 40]
    assert bucket_sizes([32, 36], [0.5, 0.5]) == [32, 36]  # padding half the batches by 12 % costs > 2 %
    assert bucket_sizes([32, 36], [0.5, 0.5], budget=0.1) == [36]
    assert bucket_sizes([16, 16], [1, 3]) == [16]
    # a short run pads everything to one size (the compiles cost more), a long one keeps 32 unpadded
    assert bucket_sizes([32, 32, 36, 40], [0.46, 0.46, 0.07, 0.01], calls=200) == [40]
    assert bucket_sizes([32, 32, 36, 40], [0.46, 0.46, 0.07, 0.01], calls=1_000_000) == [32, 40]


def test_merge_only_where_shapes_differ(tmp_path):
    d = tiny_cu_dict(numb_steps=1)  # one system, one shape: nothing to merge
    t = Trainer(config_from_dict(d), tmp_path, log=lambda *a: None)
    assert t.merged == {}
