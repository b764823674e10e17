"""Checks of the plain values read from a claims file; every error names where the value is (`ClaimsError`)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any


class ClaimsError(ValueError):
    """claims.yaml is malformed; the message starts with the claim id (or section) and key."""


def keys(raw: Mapping[str, Any], where: str, *, required: tuple[str, ...], known: tuple[str, ...]) -> None:
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise ClaimsError(f"{where}.{unknown[0]}: unknown key (known: {', '.join(known)})")
    for key in required:
        if key not in raw:
            raise ClaimsError(f"{where}.{key}: required")


def mapping(raw: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise ClaimsError(f"{where}: expected a mapping, got {type(raw).__name__}")
    return raw


def list_(data: Mapping[str, Any], key: str) -> list[Any]:
    if not isinstance(data[key], list):
        raise ClaimsError(f"{key}: expected a list, got {type(data[key]).__name__}")
    return data[key]


def text(raw: Any, where: str) -> str:
    if not (isinstance(raw, str) and raw.strip()):
        raise ClaimsError(f"{where}: expected a non-empty string, got {raw!r}")
    return raw


def texts(raw: Any, where: str, names: tuple[str, ...]) -> Mapping[str, str]:
    """A mapping of exactly `names`, each a non-empty string."""
    raw = mapping(raw, where)
    keys(raw, where, required=names, known=names)
    return MappingProxyType({k: text(raw[k], f"{where}.{k}") for k in names})


def choice(raw: Any, choices: tuple[str, ...], where: str) -> str:
    if raw not in choices:
        raise ClaimsError(f"{where}: expected one of {', '.join(choices)}, got {raw!r}")
    return raw


def number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def date(raw: Any, where: str) -> str:
    if isinstance(raw, dt.date):
        return raw.isoformat()
    try:
        return dt.date.fromisoformat(str(raw)).isoformat()
    except ValueError:
        raise ClaimsError(f"{where}: expected a date YYYY-MM-DD, got {raw!r}") from None


def freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return MappingProxyType({k: freeze(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    return value
