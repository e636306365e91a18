"""Value checkers of the config schema: each takes a value as read from a file and returns it as stored
(lists as tuples), or raises :class:`Bad` with what is wrong; the section adds the key (and the file)."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

ACTIVATIONS = ("tanh", "gelu", "gelu_tf", "relu", "relu6", "softplus", "sigmoid", "linear", "none")
PRECISIONS = ("default", "float64", "float32", "bfloat16")  # "default" = DeePMD-kit's interface precision, float64
KERNELS = ("auto", "pallas", "jnp")
TABLE_MIN_NODES, TABLE_MAX_NODES = 16, 1024  # training.embedding_table: nodes of each embedding net's table


class Bad(Exception):
    """A bad value; whoever catches it adds the key (and the file)."""


def show(v: Any) -> str:
    """A value as the user wrote it (JSON spelling), cut to a readable length."""
    if isinstance(v, str):
        s = repr(v)
    else:
        try:
            s = json.dumps(v, default=str)
        except (TypeError, ValueError):
            s = repr(v)
    return s if len(s) <= 60 else s[:57] + "..."


def integer(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise Bad(f"expected an integer, got {show(v)}")
    return v


def number(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise Bad(f"expected a number, got {show(v)}")
    x = float(v)
    if not math.isfinite(x):
        raise Bad(f"expected a finite number, got {show(v)}")
    return x


def boolean(v: Any) -> bool:
    if not isinstance(v, bool):
        raise Bad(f"expected true or false, got {show(v)}")
    return v


def text(v: Any) -> str:
    if not isinstance(v, str) or not v:
        raise Bad(f"expected a non-empty string, got {show(v)}")
    return v


def above(check: Callable[[Any], Any], lo: float, strict: bool = True) -> Callable[[Any], Any]:
    def checked(v: Any) -> Any:
        x = check(v)
        if x < lo or (strict and x == lo):
            raise Bad(f"must be {'>' if strict else '>='} {lo:g}, got {show(v)}")
        return x

    return checked


def interval(lo: float, hi: float, lo_open: bool = False, hi_open: bool = True) -> Callable[[Any], float]:
    """A number in [lo, hi) (``lo_open`` / ``hi_open``: which ends are left out)."""
    text = f"{'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"

    def checked(v: Any) -> float:
        x = number(v)
        if x < lo or x > hi or (lo_open and x == lo) or (hi_open and x == hi):
            raise Bad(f"must be in {text}, got {show(v)}")
        return x

    return checked


pos_int = above(integer, 0)
nonneg_int = above(integer, 0, strict=False)
pos_float = above(number, 0.0)
nonneg_float = above(number, 0.0, strict=False)


def table_nodes(v: Any) -> int:
    n = integer(v)
    if n != 0 and not TABLE_MIN_NODES <= n <= TABLE_MAX_NODES:
        raise Bad(f"expected 0 (off) or a node count from {TABLE_MIN_NODES} to {TABLE_MAX_NODES}, got {show(v)}")
    return n


def optional(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def checked(v: Any) -> Any:
        return None if v is None else check(v)

    return checked


def list_of(check: Callable[[Any], Any], what: str, nonempty: bool = True) -> Callable[[Any], tuple]:
    def checked(v: Any) -> tuple:
        if not isinstance(v, (list, tuple)):
            raise Bad(f"expected a list of {what}, got {show(v)}")
        if nonempty and not v:
            raise Bad(f"expected a non-empty list of {what}, got []")
        out = []
        for i, x in enumerate(v):
            try:
                out.append(check(x))
            except Bad as e:
                raise Bad(f"entry {i}: {e}") from None
        return tuple(out)

    return checked


def choice(options: Sequence[str] | Mapping[str, str]) -> Callable[[Any], str]:
    """One of ``options``; a mapping renames aliases to their canonical value."""
    mapping = dict(options) if isinstance(options, Mapping) else {o: o for o in options}

    canonical = sorted(set(mapping.values()))
    if len(canonical) == 1:
        aliases = [a for a in mapping if a != canonical[0]]
        also = f" (or its alias {', '.join(map(repr, aliases))})" if aliases else ""
        expected = f"only {canonical[0]!r}{also} is supported"
    else:
        expected = f"expected one of {', '.join(map(repr, mapping))}"

    def checked(v: Any) -> str:
        if isinstance(v, str) and v in mapping:
            return mapping[v]
        raise Bad(f"{expected}, got {show(v)}")

    return checked


def activation(v: Any) -> str:
    if isinstance(v, str) and v.lower() in ACTIVATIONS:  # DeePMD-kit accepts "None" as well as "none"
        return v.lower()
    raise Bad(f"expected one of {', '.join(map(repr, ACTIVATIONS))}, got {show(v)}")


def element_names(v: Any) -> tuple[str, ...]:
    names = list_of(text, "element names")(v)
    seen = set()
    for name in names:
        if name in seen:
            raise Bad(f"element {name!r} appears twice")
        seen.add(name)
    return names


def sel_rule(v: Any) -> tuple[int, ...] | str:
    """A list of positive ints (one per type), "auto" or "auto:<factor>" (factor >= 1), kept as given."""
    if isinstance(v, str):
        if v == "auto":
            return v
        if v.startswith("auto:"):
            try:
                factor = float(v[5:])
            except ValueError:
                factor = math.nan
            if math.isfinite(factor) and factor >= 1.0:
                return v
        raise Bad(f'expected a list of positive integers, "auto" or "auto:<factor>" with factor >= 1, got {show(v)}')
    return list_of(pos_int, "positive integers (one per type)")(v)


def steps_rule(v: Any) -> int | str:
    """A positive int or "auto" (``training.steps_per_dispatch``)."""
    if v == "auto":
        return v
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise Bad(f'expected a positive integer or "auto", got {show(v)}')
    return v


def system_paths(v: Any) -> tuple[str, ...] | str:
    if isinstance(v, os.PathLike):
        v = os.fspath(v)
    if isinstance(v, str):
        return text(v)
    return list_of(lambda p: text(os.fspath(p) if isinstance(p, os.PathLike) else p), "paths")(v)


def batch_size_rule(v: Any) -> int | tuple[int, ...] | str:
    """int > 0; list of ints > 0 (one per system); "auto", "auto:N" or "max:N" (N atoms, > 0)."""
    if isinstance(v, str):
        rule, _, n = v.partition(":")
        if (rule == "auto" and not n) or (rule in ("auto", "max") and n.isdigit() and int(n) > 0):
            return v
        raise Bad(f'expected a positive integer, a list of them, "auto", "auto:N" or "max:N", got {show(v)}')
    if isinstance(v, (list, tuple)):
        return list_of(pos_int, "positive integers (one per system)")(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise Bad(f'expected a positive integer, a list of them, "auto", "auto:N" or "max:N", got {show(v)}')
    return pos_int(v)


def auto_prob_style(v: Any) -> str:
    """ "prob_uniform", "prob_sys_size" or "prob_sys_size;stt:end:weight;..." (blocks of systems)."""
    if v in ("prob_uniform", "prob_sys_size"):
        return v
    if isinstance(v, str) and v.startswith("prob_sys_size;"):
        blocks = [b for b in v.split(";")[1:] if b.strip()]
        for b in blocks:
            parts = b.split(":")
            try:
                stt, end, w = int(parts[0]), int(parts[1]), float(parts[2])
                ok = len(parts) == 3 and 0 <= stt < end and math.isfinite(w) and w >= 0
            except (ValueError, IndexError):
                ok = False
            if not ok:
                raise Bad(f"block {b!r} is not stt:end:weight with 0 <= stt < end and weight >= 0")
        if blocks:
            return v
    raise Bad(f"expected 'prob_uniform', 'prob_sys_size' or 'prob_sys_size;stt:end:weight;...', got {show(v)}")


def instance_of(cls: type) -> Callable[[Any], Any]:
    def checked(v: Any) -> Any:
        if not isinstance(v, cls):
            raise Bad(f"expected a {cls.__name__}, got {show(v)}")
        return v

    return checked
