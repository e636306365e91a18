"""XLA compile options for the CPU that this jaxlib accepts (shared by the programs that set their own).

Some programs compile better with options of their own on the CPU: the evaluation step
(:func:`jaxmd_dp.train.step.eval_compiler_options`) and the programs that reduce neighbour candidates
(:func:`jaxmd_dp.geometry.neighbor.reduction_jit`). Off the CPU they do not apply. And a jaxlib may drop an
option, after which every compile that names it fails ("No such compile option", on any backend): jaxlib
0.11.2 has no ``xla_cpu_use_fusion_emitters``, and every GPU run with validation data stopped at its first
validation (session 23). So the options are checked once per process before any program uses them.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np


@functools.lru_cache(maxsize=16)
def cpu_options(wanted: tuple[tuple[str, object], ...], backend: str | None = None) -> dict | None:
    """The options of ``wanted`` ((name, value) pairs) that this jaxlib accepts, where ``backend`` (default:
    jax's default backend) is the CPU; None elsewhere, or when it accepts none.

    A one-op program is compiled with them all (~20 ms, once per process and set), and only when that
    fails is each tried on its own."""
    if (backend or jax.default_backend()) != "cpu":
        return None

    def accepted(options: dict) -> bool:
        try:
            jax.jit(jnp.negative, compiler_options=options).lower(np.float32(0)).compile()
        except Exception as e:  # jaxlib's error type has moved between versions
            if "compile option" not in str(e):
                raise
            return False
        return True

    options = dict(wanted)
    if accepted(options):
        return options
    return {k: v for k, v in options.items() if accepted({k: v})} or None
