"""XLA compile options per backend that this jaxlib accepts (shared by the programs that set their own).

Some programs compile better with options of their own on the CPU: the evaluation step
(:func:`jaxmd_dp.train.step.eval_compiler_options`) and the programs that reduce neighbour candidates
(:func:`jaxmd_dp.geometry.neighbor.reduction_jit`). On a GPU the training and evaluation steps are compiled
without XLA's GEMM autotuning (:data:`GPU_STEP_OPTIONS`). An option that a user sets in ``XLA_FLAGS`` is
theirs: it is left out of ours (:func:`backend_options`, on either backend). And a jaxlib may drop an option,
after which every compile that names it
fails ("No such compile option", on any backend): jaxlib 0.11.2 has no ``xla_cpu_use_fusion_emitters``, so an
evaluation step that named it would stop a run at its first validation. So the options are checked
once per process before any program uses them.
"""

from __future__ import annotations

import functools
import os

import jax
import jax.numpy as jnp
import numpy as np

# XLA GPU times each GEMM's candidate algorithms at compile time (level 4, its default). That lengthens the
# first training step's compile, for no faster step at these sizes (docs/performance.md, GPU). Level 0 takes
# cuBLAS's heuristic choice of algorithm.
GPU_STEP_OPTIONS = {"xla_gpu_autotune_level": 0}


def set_in_xla_flags(name: str, xla_flags: str) -> bool:
    """Whether ``xla_flags`` (an ``XLA_FLAGS`` value) sets the option ``name``."""
    return any(flag.lstrip("-").split("=", 1)[0] == name for flag in xla_flags.split())


def backend_options(wanted: tuple[tuple[str, object], ...], platform: str, backend: str | None = None) -> dict | None:
    """The options of ``wanted`` ((name, value) pairs) for programs on ``platform`` ("cpu" or "gpu"): those
    this jaxlib accepts and ``XLA_FLAGS`` does not set, where ``backend`` (default: jax's default backend)
    is ``platform``; None elsewhere, or when none is left.

    A one-op program is compiled with them all (once per process and set), and only when that fails is
    each tried on its own."""
    if (backend or jax.default_backend()) != platform:
        return None
    flags = os.environ.get("XLA_FLAGS", "")
    return _accepted(tuple((k, v) for k, v in wanted if not set_in_xla_flags(k, flags)))


@functools.lru_cache(maxsize=16)
def _accepted(wanted: tuple[tuple[str, object], ...]) -> dict | None:
    """The options of ``wanted`` this jaxlib accepts on the default backend (None when none)."""
    options = dict(wanted)
    if not options:
        return None

    def accepted(options: dict) -> bool:
        try:
            jax.jit(jnp.negative, compiler_options=options).lower(np.float32(0)).compile()
        except Exception as e:  # jaxlib's error type has moved between versions
            if "compile option" not in str(e) and "While setting option" not in str(e):  # no option / no value
                raise
            return False
        return True

    if accepted(options):
        return options
    return {k: v for k, v in options.items() if accepted({k: v})} or None
