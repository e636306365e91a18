"""Reading a config: ``.yaml`` / ``.yml`` / ``.json`` files, ``key.path=value`` overrides, and the public
entry points :func:`load_config`, :func:`config_from_dict` and :func:`model_config_from_dict`."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from jaxmd_dp.config.model import ModelConfig
from jaxmd_dp.config.parse import canonical, fields_of, parse, resolve_path, unknown_key
from jaxmd_dp.config.schema import SYSTEMS_KEYS, Config
from jaxmd_dp.errors import InputError


def _override_path(parts: list[str], text: str, raw: Mapping | None = None) -> list[str]:
    """Canonical key path of an override; unknown keys are errors, like in a file. ``raw``: the config as
    read so far (a section with variants is the one its mapping there chooses)."""
    cls: Any = Config
    canon: list[str] = []
    node: Any = raw
    for i, part in enumerate(parts):
        if part.startswith("_"):
            return canon + parts[i:]
        part = cls._aliases.get(part, part)
        known = fields_of(cls)
        if part in known:
            canon.append(part)
            section = known[part].metadata["section"]
            if section is None:
                if i < len(parts) - 1:
                    raise InputError(f"config key '{'.'.join(canon)}' is a value, not a section (override {text!r})")
                return canon
            node = node.get(part) if isinstance(node, Mapping) else None
            cls = section._variant(node)
        elif part in cls._fixed or part in cls._forbidden:
            return canon + [part] + parts[i + 1 :]  # its value is judged when the config is validated
        else:
            raise InputError(f"{unknown_key(cls, '.'.join(canon), part)} (override {text!r})")
    return canon


def _apply_override(raw: dict[str, Any], text: str) -> None:
    """Set ``a.b.c=value`` (value parsed as YAML) in ``raw``, creating sections on the way."""
    key, sep, value_text = text.partition("=")
    parts = key.strip().split(".")
    if not sep or any(not p for p in parts):
        raise InputError(f"override {text!r}: expected KEY=VALUE, e.g. training.numb_steps=2000")
    try:
        value = yaml.load(value_text, Loader=_YamlLoader)  # noqa: S506 -- a SafeLoader subclass
    except yaml.YAMLError as e:
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise InputError(f"override {text!r}: cannot parse the value: {problem}") from None
    parts = _override_path(parts, text, raw)
    if tuple(parts) in SYSTEMS_KEYS:  # typed on a command line: relative to the working directory
        cwd = os.getcwd()
        if isinstance(value, str):
            value = resolve_path(value, cwd)
        elif isinstance(value, list):
            value = [resolve_path(v, cwd) if isinstance(v, str) else v for v in value]
    node = raw
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = {}
        elif not isinstance(child, Mapping):
            raise InputError(f"override {text!r}: config key '{'.'.join(parts[: i + 1])}' is not a mapping")
        node[part] = child = dict(child)
        node = child
    node[parts[-1]] = value


# ============================================================================ files
class _YamlLoader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 core scalars (``1e-3`` float, decimal ints, only true/false booleans) and
    an error on duplicate keys."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:
                continue  # unhashable: the base class reports it
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark, f"found duplicate key {key!r}", key_node.start_mark
                )
        return super().construct_mapping(node, deep=deep)


_YAML_CORE = {"tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"}
_YamlLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in _YAML_CORE]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_YamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
_YamlLoader.add_implicit_resolver("tag:yaml.org,2002:int", re.compile(r"^[-+]?[0-9]+$"), list("-+0123456789"))
_YamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"  # 1, 1.5, .5, 1e-3, 1.0E+2
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+0123456789."),
)
_YamlLoader.add_constructor("tag:yaml.org,2002:int", lambda loader, node: int(loader.construct_scalar(node)))


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _read(path: Path) -> Any:
    suffix = path.suffix.lower()
    if suffix not in (".json", ".yaml", ".yml"):
        raise InputError(f"config file {path}: unknown extension {path.suffix!r}; expected .json, .yaml or .yml")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise InputError(f"cannot read config file {path}: {reason}") from None
    if suffix == ".json":
        try:
            return json.loads(text, object_pairs_hook=_no_duplicates)
        except json.JSONDecodeError as e:
            raise InputError(f"cannot parse config file {path}: line {e.lineno}, column {e.colno}: {e.msg}") from None
        except ValueError as e:
            raise InputError(f"cannot parse config file {path}: {e}") from None
    try:
        return yaml.load(text, Loader=_YamlLoader)  # noqa: S506 -- a SafeLoader subclass
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise InputError(f"cannot parse config file {path}: {where}{problem}") from None


# ============================================================================ public API
def _build(raw: Any, base_dir: str | None, overrides: Sequence[str]) -> Config:
    if not isinstance(raw, Mapping):
        return parse(Config, raw, "", base_dir)  # raises the top-level message
    raw = canonical(Config, raw, "")
    for text in overrides:
        _apply_override(raw, text)
    return parse(Config, raw, "", base_dir)


def config_from_dict(d: Mapping[str, Any], base_dir: str | os.PathLike | None = None) -> Config:
    """Validate a config dict (our keys or DeePMD-kit's) into a :class:`Config`.

    base_dir: directory that relative data-system paths are resolved against; None keeps them as given.
    Raises :class:`InputError` naming the first bad key.
    """
    return _build(d, None if base_dir is None else os.path.abspath(base_dir), ())


def load_config(path: str | os.PathLike, overrides: Sequence[str] = ()) -> Config:
    """Read a ``.yaml``/``.yml``/``.json`` config, apply ``overrides``, validate.

    overrides: ``"dotted.key=value"`` strings, the value parsed as YAML (``training.numb_steps=2000``,
    ``model.descriptor.sel=[46,92]``, ``training.validation_data=null``); applied in order before validation;
    an unknown key is an error.  Relative data-system paths in the file are resolved against the file's
    directory; relative paths given in an override (``training.training_data.systems=...``) against the
    current working directory.  Errors name the file.
    """
    if isinstance(overrides, str):
        overrides = [overrides]
    p = Path(path)
    raw = _read(p)
    try:
        return _build(raw, os.path.dirname(os.path.abspath(p)), overrides)
    except InputError as e:
        raise InputError(f"{e} ({p})") from None


def model_config_from_dict(d: Mapping[str, Any]) -> ModelConfig:
    """Validate a ``model`` section alone (DeePMD-kit's input.json / out.json ``model``, or
    ``ModelConfig.to_dict()``) into a :class:`ModelConfig`, DeePMD-kit's defaults filled in. Raises
    :class:`InputError` naming the first bad key (``model.descriptor.…``)."""
    return parse(ModelConfig, canonical(ModelConfig, d, "model"), "model", None)
