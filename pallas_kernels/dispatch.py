"""Choose between the Pallas kernels and the jnp path.

``JAXMD_DP_KERNELS`` = ``pallas`` | ``jnp`` | ``auto`` (default ``auto``: Pallas when JAX's default backend
is a GPU). Forcing ``pallas`` off a GPU runs the kernels in Pallas' interpreter (``interpret_mode()``),
which is correct but slow — meant for tests and debugging.
"""

from __future__ import annotations

import os

import jax

ENV = "JAXMD_DP_KERNELS"
CHOICES = ("auto", "pallas", "jnp")


def kernels_setting(value: str | None = None) -> str:
    """The requested mode: ``value`` if given, else ``$JAXMD_DP_KERNELS``, else ``"auto"`` (validated)."""
    mode = (value if value is not None else os.environ.get(ENV, "auto")).strip().lower() or "auto"
    if mode not in CHOICES:
        raise ValueError(f"{ENV} must be one of {CHOICES}, got {mode!r}")
    return mode


def on_gpu() -> bool:
    """True when JAX's default backend is a GPU (CUDA or ROCm)."""
    return jax.default_backend() == "gpu"


def use_pallas(value: str | None = None) -> bool:
    """Whether to use the Pallas kernels: ``pallas`` → True, ``jnp`` → False, ``auto`` → on a GPU."""
    mode = kernels_setting(value)
    if mode == "auto":
        return on_gpu()
    return mode == "pallas"


def interpret_mode() -> bool:
    """True when the kernels must run in Pallas' interpreter (no GPU to compile them for)."""
    return not on_gpu()
