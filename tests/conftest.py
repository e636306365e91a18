"""Shared test set-up: float64 on, ``tests/`` importable (for ``shared_paths``), and the ``jit_options``
fixture."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import jax  # noqa: E402
import pytest  # noqa: E402

import jaxmd_dp  # noqa: E402,F401  (enables jax_enable_x64 before any test builds arrays)


@pytest.fixture
def jit_options(monkeypatch):
    """The ``compiler_options`` of each ``jax.jit`` made while the test runs, in order (the jits work as ever)."""
    made = []
    real_jit = jax.jit

    def spy(fun, **kw):
        made.append(kw.get("compiler_options"))
        return real_jit(fun, **kw)

    monkeypatch.setattr(jax, "jit", spy)
    return made
