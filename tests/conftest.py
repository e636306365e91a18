"""Shared test set-up: float64 on, and ``tests/`` importable (for ``shared_paths``)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import jaxmd_dp  # noqa: E402,F401  (enables jax_enable_x64 before any test builds arrays)
