"""Every matmul of a float32 training step asks for full float32 precision, its derivatives' too.

On a GPU, XLA runs a float32 matmul that asks for nothing in TF32 (a 10-bit mantissa): all four float32
fixture models then missed DeePMD-kit's predictions on an H200 (one by 5.6e-4 relative; session 23) against
a bound of 1e-5. The CPU ignores the setting, so this checks the traced step: each ``dot_general`` in
it, in every nested computation, with a float32 operand carries ``Precision.HIGHEST`` on both (float64
ones are full precision anyway). Exact nets, pair packing and the embedding table; no compile (jaxprs
only).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxmd_dp.geometry import neighbor
from jaxmd_dp.model.energy import ModelHyper, Stats, init_params, type_capacity
from jaxmd_dp.train.loss import LossPrefs
from jaxmd_dp.train.schedule import exp_decay
from jaxmd_dp.train.step import BatchLayout, init_state, make_optimizer, make_train_step


def dot_precisions(jaxpr) -> list:
    """(precision, operand dtypes) of every dot_general in ``jaxpr`` and the computations nested in it."""
    found = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            found.append((eqn.params["precision"], tuple(str(v.aval.dtype) for v in eqn.invars)))
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                inner = getattr(sub, "jaxpr", sub)  # a ClosedJaxpr holds its Jaxpr in .jaxpr
                if hasattr(inner, "eqns"):
                    found += dot_precisions(inner)
    return found


@pytest.mark.parametrize("variant", ["exact", "pack", "table"])
def test_float32_step_asks_for_full_precision(variant):
    rng = np.random.default_rng(2)
    nat, nf = 12, 1
    hyper = ModelHyper(type_map=("A", "B"), sel=(8, 16), rcut=3.5, rcut_smth=0.8, neuron=(4, 8), axis_neuron=2,
                       fit_neuron=(8, 8), precision="float32", fit_precision="float32")
    box = np.eye(3)[None] * 5.0
    coord = rng.uniform(0, 5.0, (nf, nat, 3))
    atype = rng.integers(0, 2, nat)
    batch = {"coord": coord, "box": box, "atype": atype, "energy": rng.normal(size=nf),
             "force": rng.normal(size=(nf, nat, 3)), "virial": rng.normal(size=(nf, 9)),
             "find_energy": 1.0, "find_force": 1.0, "find_virial": 1.0}
    stats = Stats(*map(jnp.asarray, (np.full((2, 24, 4), 0.05) * [1, 0, 0, 0], np.full((2, 24, 4), 0.7),
                                     np.array([-1.0, -2.0]))))
    spec = neighbor.allocate(coord, box, hyper.rcut, hyper.sel, method="brute")
    pack = (nat * 8, nat * 16) if variant == "pack" else None
    layout = BatchLayout(spec, type_capacity([atype], 2), "jnp", pack, 16 if variant == "table" else 0)
    schedule = exp_decay(1e-3, 1e-5, 10, 100)
    opt = make_optimizer(schedule)
    step = make_train_step(hyper, LossPrefs(0.02, 1, 1000, 1, 0.02, 1), schedule, opt)
    params = jax.tree_util.tree_map(lambda x: jnp.asarray(x, jnp.float32), init_params(hyper, 3))
    jaxpr = jax.make_jaxpr(step, static_argnums=3)(init_state(params, opt), stats, batch, layout).jaxpr
    found = dot_precisions(jaxpr)
    full = (jax.lax.Precision.HIGHEST, jax.lax.Precision.HIGHEST)
    low = [(p, t) for p, t in found if any(d in ("float32", "bfloat16") for d in t)]
    assert len(low) >= 6, f"expected the nets' float32 matmuls in the traced step, found {len(low)}"
    missing = [(p, t) for p, t in low if p != full]
    assert not missing, f"{len(missing)} of {len(low)} float32 matmuls without full precision: {missing[:3]}"
