"""Programs traced with jax.numpy's jitted helpers inlined (jaxmd_dp.runtime.inline_trace): no nested calls, the
same results, Pallas kernels' loops kept, other threads' jit untouched."""

import threading

import jax
import jax.numpy as jnp
import numpy as np
from step_case import HYPER, STATS, random_batch, train_step_for

from jaxmd_dp.geometry import neighbor
from jaxmd_dp.model.energy import Stats, init_params, type_capacity
from jaxmd_dp.runtime.inline_trace import inline_trace
from jaxmd_dp.train.step import BatchLayout, init_state


def _count(jaxpr, names, n=0):
    """How many equations of jaxpr (and of every jaxpr in its equations' parameters) bind ``names``."""
    for e in jaxpr.eqns:
        n += e.primitive.name in names
        for p in e.params.values():
            for q in p if isinstance(p, (tuple, list)) else (p,):
                inner = getattr(q, "jaxpr", q)
                if hasattr(inner, "eqns"):
                    n = _count(inner, names, n)
    return n


def _helpers(x):
    return jnp.where(x > 0, jnp.clip(x, 0.1, 0.9), jnp.take_along_axis(x, jnp.argsort(x), axis=0))


def test_helpers_are_bound_inline_with_the_same_results():
    x = jnp.linspace(-1.0, 1.0, 7)
    plain, inline = jax.jit(_helpers), jax.jit(inline_trace(_helpers))
    assert _count(plain.trace(x).jaxpr.jaxpr, {"pjit", "jit"}) >= 3
    assert _count(inline.trace(x).jaxpr.jaxpr, {"pjit", "jit"}) == 0
    np.testing.assert_array_equal(inline(x), plain(x))


def test_training_step_traced_inline_is_the_same_step():
    """The training step (its body wrapped by make_train_step) against the same body traced as written:
    no nested calls left, bitwise the same weights and metrics after a step."""
    rng = np.random.default_rng(3)
    batch, box, atype = random_batch(rng, 12, 2)
    spec = neighbor.allocate(batch["coord"], box, HYPER.rcut, HYPER.sel, method="brute")
    layout = BatchLayout(spec, type_capacity([atype], 2), "jnp")
    step, opt = train_step_for(HYPER)
    plain = jax.jit(step.__wrapped__.__wrapped__, static_argnums=3)  # jit → inline_trace → train_step
    params = jax.tree_util.tree_map(jnp.asarray, init_params(HYPER, 5))
    stats = Stats(*map(jnp.asarray, STATS))
    out = {}
    for name, f in (("inline", step), ("plain", plain)):
        state = init_state(jax.tree_util.tree_map(jnp.array, params), opt)  # the step donates its state
        calls = _count(f.trace(state, stats, batch, layout).jaxpr.jaxpr, {"pjit", "jit"})
        out[name] = calls, f(state, stats, batch, layout)
    assert out["inline"][0] == 0 < out["plain"][0]
    a, b = (jax.tree_util.tree_leaves((s.params, m)) for _, (s, m) in (out["inline"], out["plain"]))
    assert len(a) == len(b)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_pallas_kernel_loops_stay_loops_when_traced_inline():
    """The neighbour-list kernel's fori_loops (interpreted on the CPU) stay loops in the kernel's program:
    with jit disabled they would run as Python loops, unrolled (pallas_kernels._common.jit_enabled)."""
    from pallas_kernels.neighbor import build

    rng = np.random.default_rng(0)
    batch, box, atype = random_batch(rng, 10, 1)
    spec = neighbor.allocate(batch["coord"], box, HYPER.rcut, HYPER.sel, method="brute")

    def lists(coord, box):
        return build(spec, coord, box, jnp.asarray(atype)[None], interpret=True).idx

    loops = {
        name: _count(jax.jit(f).trace(batch["coord"], box).jaxpr.jaxpr, {"while", "scan"})
        for name, f in (("plain", lists), ("inline", inline_trace(lists)))
    }
    assert loops["inline"] == loops["plain"] > 0


def test_other_threads_keep_jit():
    """While one thread traces a body inline, a jitted function called in another is still traced once."""
    traces, inside, leave = [], threading.Event(), threading.Event()

    @jax.jit
    def counted(x):
        traces.append(1)
        return x + 1

    def body(x):
        inside.set()
        leave.wait(30)
        return x * 2

    worker = threading.Thread(target=lambda: jax.jit(inline_trace(body)).trace(1.0))
    worker.start()
    assert inside.wait(30)
    try:
        for _ in range(3):
            counted(2.0)
    finally:
        leave.set()
        worker.join()
    assert len(traces) == 1
