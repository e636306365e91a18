"""A dict (our keys or DeePMD-kit's) -> a validated section: aliases renamed, ``_comment`` keys dropped,
fixed keys judged, unknown keys named with a suggestion, data paths resolved."""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Mapping
from dataclasses import MISSING, fields
from typing import Any

from jaxmd_dp.config.checks import Bad, show
from jaxmd_dp.config.schema import DATA_SECTIONS, Config
from jaxmd_dp.config.section import join_key, key_error
from jaxmd_dp.errors import InputError


def fields_of(cls: type) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in fields(cls)}


def subsections(cls: type, path: str = "") -> list[tuple[str, type]]:
    """Every section below (and including) ``cls`` with its dotted path."""
    out = [(path, cls)]
    for f in fields(cls):
        if f.metadata.get("section") is not None:
            out += subsections(f.metadata["section"], join_key(path, f.name))
    return out


def known_keys(cls: Any) -> list[str]:
    return [*fields_of(cls), *cls._fixed, *cls._forbidden, *cls._aliases]


def unknown_key(cls: Any, path: str, key: str) -> InputError:
    full = join_key(path, key)
    close = difflib.get_close_matches(key, known_keys(cls), n=1, cutoff=0.6)
    if close:
        suggestion = join_key(path, cls._aliases.get(close[0], close[0]))
        return InputError(f"config key '{full}' is not known; did you mean '{suggestion}'?")
    elsewhere = [join_key(p, key) for p, c in subsections(Config) if p != path and key in known_keys(c)]
    if elsewhere:
        return InputError(f"config key '{full}' is not known; did you mean '{elsewhere[0]}'?")
    return InputError(f"config key '{full}' is not known (known keys here: {', '.join(fields_of(cls))})")


def canonical(cls: Any, raw: Any, path: str) -> Any:
    """A copy of ``raw`` with DeePMD-kit's alias keys renamed, section by section."""
    if not isinstance(raw, Mapping):
        return raw
    cls = cls._variant(raw)
    known = fields_of(cls)
    out: dict[Any, Any] = {}
    for key, value in raw.items():
        ckey = cls._aliases.get(key, key) if isinstance(key, str) else key
        if ckey in out or (ckey != key and ckey in raw):
            raise InputError(
                f"config key '{join_key(path, key)}' is another name for '{join_key(path, ckey)}', which is also given"
            )
        f = known.get(ckey)
        if f is not None and f.metadata["section"] is not None:
            value = canonical(f.metadata["section"], value, join_key(path, ckey))
        out[ckey] = value
    return out


def resolve_path(p: str, base_dir: str | None) -> str:
    if base_dir is None or os.path.isabs(p):
        return p
    return os.path.normpath(os.path.join(base_dir, p))


def parse(cls: Any, raw: Any, path: str, base_dir: str | None) -> Any:
    if not isinstance(raw, Mapping):
        if not path:
            what = "empty" if raw is None else f"a {type(raw).__name__}, not a mapping of sections"
            raise InputError(f"the config is {what}")
        raise key_error(path, f"expected a mapping, got {show(raw)}")
    cls = cls._variant(raw)
    known = fields_of(cls)
    if "type" in known and "type" in raw:  # an unsupported type first, before its keys look unknown
        try:
            known["type"].metadata["check"](raw["type"])
        except Bad as e:
            raise key_error(join_key(path, "type"), str(e)) from None
    kwargs: dict[str, Any] = {}
    for key, value in raw.items():
        if not isinstance(key, str):
            raise key_error(join_key(path, str(key)), "keys must be strings")
        if key.startswith("_"):  # _comment... (DeePMD-kit drops every key starting with "_")
            continue
        full = join_key(path, key)
        if key in known:
            section = known[key].metadata["section"]
            if section is None:
                kwargs[key] = value
            elif value is None and known[key].metadata["nullable"]:
                kwargs[key] = None
            elif value is None and known[key].default_factory is not MISSING:
                continue  # a null optional section: all defaults
            else:
                kwargs[key] = parse(section, value, full, base_dir)
        elif key in cls._fixed:
            fixed = cls._fixed[key]
            if not fixed.ok(value):
                raise key_error(full, f"{fixed.msg}, got {show(value)}")
        elif key in cls._forbidden:
            raise key_error(full, cls._forbidden[key])
        else:
            raise unknown_key(cls, path, key)
    for name, f in known.items():
        if name not in kwargs and f.default is MISSING and f.default_factory is MISSING:
            raise InputError(f"config key '{join_key(path, name)}' is required but missing")
    if cls in DATA_SECTIONS:
        systems = kwargs["systems"]
        if isinstance(systems, str):
            kwargs["systems"] = resolve_path(systems, base_dir)
        elif isinstance(systems, (list, tuple)):
            kwargs["systems"] = [resolve_path(s, base_dir) if isinstance(s, str) else s for s in systems]
    return cls(**kwargs)
