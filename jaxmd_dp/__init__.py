"""jaxmd_dp: DeePMD-kit's se_e2_a Deep Potential, trained with JAX."""

__version__ = "0.1.0"

from jaxmd_dp.errors import InputError  # noqa: E402

__all__ = ["InputError", "__version__"]
