"""Typed config dataclasses <-> plain mappings, with errors that name the offending key.

Config classes are frozen dataclasses whose field annotations are the schema: `from_mapping`
rejects unknown keys, turns lists into tuples and nested mappings into nested configs, and the
class's `__post_init__` calls `check_types`, so a config built from Python is held to the same
rules as one read from YAML. Bounds live in field metadata (`bounded(...)`).
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Literal, Self, TypeVar, Union, get_args, get_origin

from atlas_data.errors import ConfigError

T = TypeVar("T")


def bounded(default: Any, *, min: float | None = None, max: float | None = None) -> Any:
    """A dataclass field with inclusive bounds checked by `check_types`."""
    return dataclasses.field(default=default, metadata={"min": min, "max": max})


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _is_optional(tp: Any) -> tuple[bool, Any]:
    if get_origin(tp) in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(get_args(tp)) == 2:
            return True, args[0]
    return False, tp


def _describe(tp: Any, meta: Mapping[str, Any]) -> str:
    optional, inner = _is_optional(tp)
    if optional:
        return f"{_describe(inner, meta)} or null"
    lo, hi = meta.get("min"), meta.get("max")
    if inner in (int, float):
        name = inner.__name__
        if lo is not None and hi is not None:
            return f"{name} in [{lo}, {hi}]"
        if lo is not None:
            return f"{name} >= {lo}"
        return name
    if get_origin(inner) is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(inner))
    if get_origin(inner) is tuple:
        return f"list of {_describe(get_args(inner)[0], {})}"
    if dataclasses.is_dataclass(inner):
        return "a mapping"
    return getattr(inner, "__name__", str(inner))


def _value_ok(tp: Any, value: Any, meta: Mapping[str, Any]) -> bool:
    optional, inner = _is_optional(tp)
    if value is None:
        return optional
    if inner is bool:
        return isinstance(value, bool)
    if inner in (int, float):
        if isinstance(value, bool) or not isinstance(value, int if inner is int else (int, float)):
            return False
        lo, hi = meta.get("min"), meta.get("max")
        return (lo is None or value >= lo) and (hi is None or value <= hi)
    if inner is str:
        return isinstance(value, str) and value != ""
    if get_origin(inner) is Literal:
        return isinstance(value, str) and value in get_args(inner)
    if get_origin(inner) is tuple:
        return isinstance(value, tuple) and all(_value_ok(get_args(inner)[0], v, {}) for v in value)
    if dataclasses.is_dataclass(inner):
        return isinstance(value, inner)
    raise TypeError(f"unsupported config field type {inner!r}")


def check_types(obj: Any, where: str) -> None:
    """Raise `ConfigError` naming `where.<field>` for the first field whose value breaks its type."""
    hints = _hints(type(obj))
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if not _value_ok(hints[f.name], value, f.metadata):
            raise ConfigError(f"{where}.{f.name}: expected {_describe(hints[f.name], f.metadata)}, got {value!r}")


def check_keys(data: Mapping[str, Any], allowed: Iterable[str], where: str, why: str = "") -> None:
    """Reject keys outside `allowed`, naming the first (sorted) offender."""
    allowed = set(allowed)
    unknown = sorted(str(k) for k in data if k not in allowed)
    if unknown:
        hint = why or "allowed: " + ", ".join(sorted(allowed))
        raise ConfigError(f"{where}.{unknown[0]}: unknown key ({hint})")


def _convert(tp: Any, value: Any, where: str) -> Any:
    """Shape a YAML value into what the field holds; type errors are left to `check_types`."""
    _, inner = _is_optional(tp)
    if value is None:
        return None
    if dataclasses.is_dataclass(inner) and isinstance(inner, type):
        from_dict = getattr(inner, "from_dict", None)
        return from_dict(value, where) if from_dict else from_mapping(inner, value, where)
    if get_origin(inner) is tuple and isinstance(value, list | tuple):
        return tuple(value)
    if inner is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def from_mapping(cls: type[T], data: Any, where: str) -> T:
    """Build dataclass `cls` from a mapping; errors name `where.<key>`."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {data!r}")
    names = [f.name for f in dataclasses.fields(cls) if f.init]  # type: ignore[arg-type]
    check_keys(data, names, where)
    hints = _hints(cls)
    kwargs = {k: _convert(hints[k], v, f"{where}.{k}") for k, v in data.items()}
    return cls(**kwargs)


def to_mapping(obj: Any) -> dict[str, Any]:
    """A JSON-ready dict: tuples become lists, nested configs use their own `to_dict`."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            value = value.to_dict() if hasattr(value, "to_dict") else to_mapping(value)
        elif isinstance(value, tuple):
            value = list(value)
        out[f.name] = value
    return out


class MappingConfig:
    """Base of the frozen config dataclasses read from and written to plain mappings (YAML, the manifest): field
    types are checked on construction, and errors name the fields under `WHERE` (e.g. "data.split")."""

    WHERE: ClassVar[str]

    def __post_init__(self) -> None:
        check_types(self, self.WHERE)

    @classmethod
    def from_dict(cls, data: Any, where: str | None = None) -> Self:
        return from_mapping(cls, data, cls.WHERE if where is None else where)

    def to_dict(self) -> dict[str, Any]:
        return to_mapping(self)
