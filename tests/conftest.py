"""Shared test set-up: float64 on, ``tests/`` importable (for ``shared_paths``), jax's persistent compilation
cache off between tests, and the ``jit_options`` fixture."""

import gc
import os
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


# The command-line tools turn jax's persistent compilation cache on (by default); in the test process it is
# turned off again after each test, and the in-process training tests compile their programs: a process that
# writes and reads the cache's entries for about a thousand tests can abort inside XLA's executable
# (de)serialization.


@pytest.fixture(autouse=True)
def no_compile_cache_after():
    """After each test (and whatever module fixture it set up), jax's persistent compilation cache off again
    (unless jax's own ``$JAX_COMPILATION_CACHE_DIR`` turned it on for the whole run)."""
    yield
    if jax.config.jax_compilation_cache_dir is not None and not os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        from jax.experimental.compilation_cache import compilation_cache

        jax.config.update("jax_compilation_cache_dir", None)
        compilation_cache.reset_cache()


@pytest.fixture(scope="module", autouse=True)
def free_compiled_programs():
    """After each test module, the programs jax compiled for it freed (``jax.clear_caches``): one process runs
    the whole suite, and XLA's CPU compiler crashed the process (in a compile, or in serialising or loading
    an executable) after about a thousand tests had kept every program they compiled alive."""
    yield
    jax.clear_caches()
    gc.collect()
