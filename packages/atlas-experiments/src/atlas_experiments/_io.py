"""Atomic text writes: a temporary name in the same directory, then `os.replace`, so a reader (or a crashed run)
never sees a half-written file under its final name.

The temporary name is unique to the writer (process id and a random part): two processes writing the same file at
once (two study workers starting jobs of one arm write its model file) each rename their own temporary file, and
the last rename wins with a whole file. A shared temporary name made the second rename fail."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any


def write_text_atomic(path: str | Path, text: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(tmp, "x", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def write_json_atomic(path: str | Path, data: Any, indent: int | None = 2) -> Path:
    return write_text_atomic(path, json.dumps(data, indent=indent))
