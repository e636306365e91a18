"""DeePMD-kit keys accepted at one value only: a feature jaxmd_dp does not have is accepted at DeePMD-kit's
default (its ``out.json`` writes them all) and refused with a line naming the key otherwise."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from jaxmd_dp.config.checks import show


@dataclass(frozen=True)
class Fixed:
    """A DeePMD-kit key we accept only where ``ok(value)`` (``default``, DeePMD-kit's default, is such a
    value); otherwise the error says ``msg``."""

    ok: Callable[[Any], bool]
    msg: str
    default: Any = None


def same(v: Any, d: Any) -> bool:
    """Whether ``v`` (as read from a file) is the value ``d`` (true is not 1, a tuple equals its list)."""
    if d is None:
        return v is None
    if isinstance(d, bool):
        return v is d
    if isinstance(d, (int, float)):
        return not isinstance(v, bool) and isinstance(v, (int, float)) and v == d
    if isinstance(d, (list, tuple)):
        return isinstance(v, (list, tuple)) and list(v) == list(d)
    if isinstance(d, dict):
        return isinstance(v, Mapping) and dict(v) == d
    return v == d


def only(default: Any) -> Fixed:
    """Accepted only at ``default`` (``None`` also covers the key being absent)."""
    return Fixed(lambda v: same(v, default), f"only {show(default)} is supported", default)


def unsupported(what: str) -> Fixed:
    """A DeePMD-kit feature we do not have: only absent or null is accepted."""
    return Fixed(lambda v: v is None, f"{what} is not supported by jaxmd_dp (only null)")


def not_ours(default: Any, what: str) -> Fixed:
    """A DeePMD-kit setting of a feature jaxmd_dp does not have: accepted only at DeePMD-kit's ``default``."""
    return Fixed(lambda v: same(v, default), f"{what} is not supported by jaxmd_dp (only {show(default)})", default)
