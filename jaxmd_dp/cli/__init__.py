"""The command-line tools (``jaxmd-dp COMMAND`` and ``python -m jaxmd_dp.COMMAND``) and the process
set-up only they do (huge pages and malloc settings, the persistent compilation cache).

This package's ``__init__`` imports nothing: :mod:`jaxmd_dp.runtime.hugepages` runs before jax is loaded.
"""
