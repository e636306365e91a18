"""Programs traced with jax.numpy's jitted helpers inlined: a shorter trace of the same program (CPU).

Many jax.numpy functions (``where``, ``clip``, ``take_along_axis``, ...) are jitted functions. Called while
a program is traced, each call is a nested jit: jax traces it as a program of its own and binds a call of
it, and differentiating the program goes through those calls too. Tracing the training step makes
hundreds of such calls, on one core before its compile can start. With jit disabled
(``jax.disable_jit``, which holds for the calling thread only) while the body of an outer ``jax.jit`` is
traced, the helpers bind their primitives straight into the outer program: the same primitives without
the calls, and the compiled program is the same (the same kernels, bitwise the same metrics), traced in
less time.

Where jit is disabled, ``lax.scan``, ``lax.map`` and ``lax.fori_loop`` with a known trip count run as Python
loops, unrolled into the program, and ``lax.cond`` on a known predicate takes its branch in Python: use
:func:`inline_trace` only on bodies without such loops (the neighbour scan's programs, which map over frames
with ``lax.map``, are not wrapped; while loops whose trip count is traced, as
:mod:`jaxmd_dp.geometry.computed_once`'s, stay loops). Pallas kernels enable jit again while they are
traced (``pallas_kernels._common.jit_enabled``). Only on the CPU, where the trace is on the start-up's
critical path; elsewhere the body is traced as written.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax


def inline_trace(fn: Callable) -> Callable:
    """``fn`` for ``jax.jit``: on the CPU its body is traced with ``jax.disable_jit()``, so that jitted
    helpers called in it are traced inline (see the module docstring). Same arguments and results."""

    @functools.wraps(fn)
    def traced(*args, **kwargs):
        if jax.default_backend() != "cpu":
            return fn(*args, **kwargs)
        with jax.disable_jit():
            return fn(*args, **kwargs)

    return traced
