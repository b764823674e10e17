"""Atomic text writes: a temporary name in the same directory, then `os.replace`, so a reader (or a crashed run)
never sees a half-written file under its final name."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def write_text_atomic(path: str | Path, text: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path


def write_json_atomic(path: str | Path, data: Any, indent: int | None = 2) -> Path:
    return write_text_atomic(path, json.dumps(data, indent=indent))
