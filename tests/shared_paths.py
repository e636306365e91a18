"""Where the shared reference data lives for tests, and how tests react when it is absent.

The data sits next to the repository: ``<repo>/../shared/data`` (never copied into the repo).
Absent data makes a test skip, unless ``JAXMD_DP_REQUIRE_SHARED=1`` is set, then it fails.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REQUIRE_ENV = "JAXMD_DP_REQUIRE_SHARED"


def shared_dir() -> Path:
    """``<repo root>/../shared/data`` (this file is ``<repo root>/tests/shared_paths.py``)."""
    return Path(__file__).absolute().parents[1].parent / "shared" / "data"


def require(path: str | Path) -> Path:
    """Return ``path`` (relative paths are taken under :func:`shared_dir`) if it exists;
    otherwise skip the test, or fail it when ``JAXMD_DP_REQUIRE_SHARED=1``."""
    p = Path(path)
    if not p.is_absolute():
        p = shared_dir() / p
    if not p.exists():
        msg = f"shared data not found: {p}"
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{msg} ({REQUIRE_ENV}=1)", pytrace=False)
        pytest.skip(msg)
    return p
