"""jaxmd_dp: DeePMD-kit's se_e2_a Deep Potential, trained with JAX."""

# our command-line tools start over once with glibc's huge pages for XLA's CPU buffers (before jax loads),
# and keep those buffers in malloc's heaps between steps
from jaxmd_dp.runtime.hugepages import keep_freed_blocks, reexec_with_hugepages  # noqa: E402
from jaxmd_dp.version import __version__

reexec_with_hugepages()
keep_freed_blocks()

from jaxmd_dp.errors import InputError  # noqa: E402

__all__ = ["InputError", "__version__"]

# DeePMD-kit models are float64 by default; float32/bfloat16 are opt-in per net (``precision``).
import jax as _jax  # noqa: E402

_jax.config.update("jax_enable_x64", True)


def __getattr__(name):
    """``from jaxmd_dp import Trainer, load_config, Model`` (imported lazily: the CLI tools stay light)."""
    if name in ("Trainer", "load_config", "Model", "live_plot_callback"):
        from jaxmd_dp import api

        return getattr(api, name)
    raise AttributeError(f"module 'jaxmd_dp' has no attribute {name!r}")
