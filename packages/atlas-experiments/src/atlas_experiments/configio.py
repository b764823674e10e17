"""Reading config files at the CLI boundary.

YAML belongs to the workflow layer; the CLI turns a YAML or JSON file into a plain mapping
once, and every package then builds its typed dataclass from that mapping (`from_dict`).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml


class ConfigFileError(ValueError):
    """A config file is missing, unreadable or not a mapping; the message names the file."""


def load_mapping(path: str | Path) -> dict[str, Any]:
    """Load a YAML (``.yaml``/``.yml``) or JSON file whose top level is a mapping."""
    p = Path(path)
    if not p.is_file():
        raise ConfigFileError(f"config file not found: {p}")
    text = p.read_text(encoding="utf-8")
    try:
        data = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise ConfigFileError(f"cannot parse config file {p}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigFileError(f"config file {p} must hold a mapping at the top level, got {type(data).__name__}")
    return data


def merge_settings(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """The one merge rule of every config layer (workflow defaults + run, recipe + train config, a model's
    overrides + a task's): a mapping merges key by key into the mapping it replaces, anything else (a number, a
    string, a list) replaces the old value whole. Neither input is modified."""
    out = copy.deepcopy(dict(base))
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge_settings(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out
