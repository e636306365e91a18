"""The base of every config section: a frozen dataclass whose fields are checked on construction."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import MISSING, field, fields
from typing import Any, ClassVar

from jaxmd_dp.config.checks import Bad
from jaxmd_dp.config.fixed import Fixed
from jaxmd_dp.errors import InputError


def entry(
    check: Callable[[Any], Any],
    default: Any = MISSING,
    *,
    factory: Any = MISSING,
    section: type | None = None,
    nullable: bool = False,
) -> Any:
    """A section's field: ``check`` turns the value read into the value stored (or raises :class:`Bad`);
    ``default`` / ``factory`` as in ``dataclasses.field``; ``section``: the class of a sub-section read from
    a mapping; ``nullable``: null is a value of its own (not "all defaults")."""
    metadata = {"check": check, "section": section, "nullable": nullable}
    return field(default=default, default_factory=factory, metadata=metadata)


def join_key(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def key_error(key: str, msg: str) -> InputError:
    return InputError(f"config key '{key}': {msg}")


def plain(v: Any) -> Any:
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return {f.name: plain(getattr(v, f.name)) for f in fields(v)}
    if isinstance(v, (tuple, list)):
        return [plain(x) for x in v]
    return v


class Section:
    """Base of every section: field checks on construction, then cross-field checks (``_check``).

    Class attributes read by the parser: ``_path`` (dotted key of the section), ``_aliases`` (DeePMD-kit
    alias -> canonical key), ``_fixed`` (keys accepted only at one value, not stored), ``_forbidden``
    (key -> message).
    """

    _path: ClassVar[str] = ""
    _aliases: ClassVar[dict[str, str]] = {}
    _fixed: ClassVar[dict[str, Fixed]] = {}
    _forbidden: ClassVar[dict[str, str]] = {}

    def __post_init__(self) -> None:
        for f in fields(self):  # type: ignore[arg-type]
            try:
                value = f.metadata["check"](getattr(self, f.name))
            except Bad as e:
                raise key_error(join_key(self._path, f.name), str(e)) from None
            object.__setattr__(self, f.name, value)
        self._check()

    def _check(self) -> None:
        """Checks across fields; raise :class:`InputError` naming the key."""

    @classmethod
    def _variant(cls, raw: Any) -> type:
        """The section class that reads ``raw`` (the mapping as written, or None): this one, unless the section
        has variants chosen by a key (``model.descriptor`` by its ``type``)."""
        return cls

    def to_dict(self) -> dict[str, Any]:
        """This section as plain dicts/lists (JSON-serialisable), every default filled."""
        return plain(self)
