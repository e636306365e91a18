"""Every matmul of a float32 training step asks for full float32 precision, its derivatives' too.

On a GPU, XLA runs a float32 matmul that asks for nothing in TF32 (a 10-bit mantissa): the float32
fixture models then miss DeePMD-kit's predictions on a GPU by more than the bound of 1e-5. The CPU ignores the
setting, so this checks the traced step: each ``dot_general`` in it, in every nested computation, with a float32
operand carries ``Precision.HIGHEST`` on both (float64
ones are full precision anyway). Exact nets, pair packing and the embedding table; no compile (jaxprs
only).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from step_case import HYPER, STATS, random_batch, train_step_for

from jaxmd_dp.geometry import neighbor
from jaxmd_dp.model.energy import Stats, init_params, type_capacity
from jaxmd_dp.train.step import BatchLayout, init_state


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
    nat = 12
    hyper = HYPER.replace(precision="float32", fit_precision="float32")
    batch, box, atype = random_batch(rng, nat, 1)
    spec = neighbor.allocate(batch["coord"], box, hyper.rcut, hyper.sel, method="brute")
    pack = (nat * 8, nat * 16) if variant == "pack" else None
    layout = BatchLayout(spec, type_capacity([atype], 2), "jnp", pack, 16 if variant == "table" else 0)
    step, opt = train_step_for(hyper)
    params = jax.tree_util.tree_map(lambda x: jnp.asarray(x, jnp.float32), init_params(hyper, 3))
    stats = Stats(*map(jnp.asarray, STATS))
    jaxpr = jax.make_jaxpr(step, static_argnums=3)(init_state(params, opt), stats, batch, layout).jaxpr
    found = dot_precisions(jaxpr)
    full = (jax.lax.Precision.HIGHEST, jax.lax.Precision.HIGHEST)
    low = [(p, t) for p, t in found if any(d in ("float32", "bfloat16") for d in t)]
    assert len(low) >= 6, f"expected the nets' float32 matmuls in the traced step, found {len(low)}"
    missing = [(p, t) for p, t in low if p != full]
    assert not missing, f"{len(missing)} of {len(low)} float32 matmuls without full precision: {missing[:3]}"
