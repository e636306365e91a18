"""A whole training step with the Pallas kernels (interpreted on CPU) equals the jnp step."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxmd_dp.geometry import neighbor
from jaxmd_dp.model.energy import ModelHyper, Stats, init_params, type_capacity
from jaxmd_dp.train.loss import LossPrefs
from jaxmd_dp.train.schedule import exp_decay
from jaxmd_dp.train.step import BatchLayout, init_state, make_optimizer, make_train_step


@pytest.mark.parametrize("pbc", [True, False])
def test_train_step_pallas_equals_jnp(pbc):
    rng = np.random.default_rng(1)
    nat, nf = 20, 2
    hyper = ModelHyper(type_map=("A", "B"), sel=(8, 16), rcut=3.5, rcut_smth=0.8, neuron=(4, 8), axis_neuron=2,
                       fit_neuron=(8, 8), type_one_side=False, resnet_dt=True)
    box = np.tile((np.eye(3) * 6.0 + rng.uniform(-0.8, 0.8, (3, 3)) * (1 - np.eye(3)))[None], (nf, 1, 1))
    coord = rng.uniform(0, 1, (nf, nat, 3)) @ box[0] if pbc else rng.uniform(0, 5, (nf, nat, 3))
    atype = rng.integers(0, 2, nat)
    batch = {"coord": coord, "box": box if pbc else np.zeros_like(box), "atype": atype,
             "energy": rng.normal(size=nf), "force": rng.normal(size=(nf, nat, 3)), "virial": rng.normal(size=(nf, 9)),
             "find_energy": 1.0, "find_force": 1.0, "find_virial": 1.0}
    stats = Stats(np.full((2, 24, 4), 0.05) * [1, 0, 0, 0], np.full((2, 24, 4), 0.7), np.array([-1.0, -2.0]))
    spec = neighbor.allocate(coord, box if pbc else None, hyper.rcut, hyper.sel, method="brute")
    schedule = exp_decay(1e-3, 1e-5, 10, 100)
    opt = make_optimizer(schedule)
    step = make_train_step(hyper, LossPrefs(0.02, 1, 1000, 1, 0.02, 1), schedule, opt)
    params = jax.tree_util.tree_map(jnp.asarray, init_params(hyper, 3))
    out = {}
    for kernels in ("jnp", "pallas"):
        layout = BatchLayout(spec, type_capacity([atype], 2), kernels)
        fresh = jax.tree_util.tree_map(jnp.array, params)  # the step donates its state
        state, metrics = step(init_state(fresh, opt), Stats(*map(jnp.asarray, stats)), batch, layout)
        out[kernels] = (state.params, metrics)
    for a, b in zip(jax.tree_util.tree_leaves(out["jnp"]), jax.tree_util.tree_leaves(out["pallas"])):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-12, atol=1e-14)
    assert float(out["jnp"][1]["rmse"]) > 0
