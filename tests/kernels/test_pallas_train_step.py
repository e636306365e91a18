"""A whole training step with the Pallas kernels (interpreted on CPU) equals the jnp step."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from step_case import HYPER, STATS, random_batch, train_step_for

from jaxmd_dp.geometry import neighbor
from jaxmd_dp.model.energy import Stats, init_params, type_capacity
from jaxmd_dp.train.step import BatchLayout, init_state


@pytest.mark.parametrize("pbc", [True, False])
def test_train_step_pallas_equals_jnp(pbc):
    rng = np.random.default_rng(1)
    hyper = HYPER.replace(type_one_side=False, resnet_dt=True)
    batch, box, atype = random_batch(rng, 20, 2, pbc)
    spec = neighbor.allocate(batch["coord"], box, hyper.rcut, hyper.sel, method="brute")
    step, opt = train_step_for(hyper)
    params = jax.tree_util.tree_map(jnp.asarray, init_params(hyper, 3))
    out = {}
    for kernels in ("jnp", "pallas"):
        layout = BatchLayout(spec, type_capacity([atype], 2), kernels)
        fresh = jax.tree_util.tree_map(jnp.array, params)  # the step donates its state
        state, metrics = step(init_state(fresh, opt), Stats(*map(jnp.asarray, STATS)), batch, layout)
        out[kernels] = (state.params, metrics)
    for a, b in zip(jax.tree_util.tree_leaves(out["jnp"]), jax.tree_util.tree_leaves(out["pallas"])):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-12, atol=1e-14)
    assert float(out["jnp"][1]["rmse"]) > 0
