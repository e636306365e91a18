"""Shared test set-up: float64 on, ``tests/`` importable (for ``shared_paths``), jax's persistent compilation
cache as each test found it, and the ``jit_options`` fixture."""

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


CACHE_OPTIONS = (
    "jax_compilation_cache_dir",
    "jax_persistent_cache_min_compile_time_secs",
    "jax_compilation_cache_max_size",
)


@pytest.fixture(autouse=True)
def compile_cache_as_found():
    """A test that turns jax's persistent compilation cache on (the command-line tools do) leaves it as it
    found it: the programs later tests compile in this process are neither written to nor loaded from the
    directory of an earlier test."""
    before = {k: getattr(jax.config, k) for k in CACHE_OPTIONS}
    yield
    if any(getattr(jax.config, k) != v for k, v in before.items()):
        from jax.experimental.compilation_cache import compilation_cache

        for k, v in before.items():
            jax.config.update(k, v)
        compilation_cache.reset_cache()
