"""jax's persistent compilation cache, as our command-line tools and the notebook API turn it on."""

from __future__ import annotations

import importlib.util
import os

from jaxmd_dp.errors import InputError

COMPILE_CACHE_DEFAULT = "~/.cache/jaxmd_dp/xla"
COMPILE_CACHE_MAX_BYTES = 4 * 2**30  # least recently used entries are evicted beyond this (with filelock)
COMPILE_CACHE_MIN_SECONDS = 0.1  # programs that compile faster are not written (jax's default: 1 s); the
# neighbour scan and list builds compile in less than jax's threshold each, and a warm start-up is shorter
# with them cached too


def compile_cache_dir(arg: str | None) -> str | None:
    """The persistent compilation cache directory a command should use: ``arg`` (``--compile-cache``),
    else ``$JAXMD_DP_COMPILE_CACHE``, else ``~/.cache/jaxmd_dp/xla``; "off" (or "none", "") for none."""
    value = arg if arg is not None else os.environ.get("JAXMD_DP_COMPILE_CACHE", COMPILE_CACHE_DEFAULT)
    if value.strip().lower() in ("", "off", "none"):
        return None
    return os.path.expanduser(value)


def use_compile_cache(path: str | None = COMPILE_CACHE_DEFAULT) -> None:
    """Turn on jax's persistent compilation cache in ``path`` (None: do nothing): a later run with the
    same model, batch shapes and versions loads its compiled steps from disk instead of compiling them
    again (jax keys each entry on the program, the compile options and the jax/XLA versions, so a stale
    entry is never used). Programs that compile in :data:`COMPILE_CACHE_MIN_SECONDS` or more are written
    (``$JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS`` overrides).
    A cache that jax was already given (``$JAX_COMPILATION_CACHE_DIR``) is left as it is."""
    import jax

    if path is None or os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return
    path = os.path.expanduser(path)
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise InputError(
            f"--compile-cache {path}: cannot create the directory ({e.strerror}); give another one or 'off'"
        ) from None
    if jax.config.jax_compilation_cache_dir != path:
        from jax.experimental.compilation_cache import compilation_cache

        jax.config.update("jax_compilation_cache_dir", path)
        compilation_cache.reset_cache()  # one opened on another directory closes; the next compile opens this
    if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in os.environ:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", COMPILE_CACHE_MIN_SECONDS)
    if importlib.util.find_spec("filelock") is not None:  # jax evicts beyond a size only with filelock
        jax.config.update("jax_compilation_cache_max_size", COMPILE_CACHE_MAX_BYTES)
