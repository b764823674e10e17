"""Atomic file writes and checksums.

Every output file is written under a temporary name in the same directory and moved into place
with `os.replace`, so a reader (or a crashed run) never sees a half-written file under its final
name. Temporary names start with "." and end in ".tmp" and are never listed in a manifest.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

TMP_SUFFIX = ".tmp"
_CHUNK = 1 << 22


def tmp_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}{TMP_SUFFIX}")


def atomic_write_bytes(path: Path, data: bytes | memoryview) -> None:
    """Write `data` to `path` atomically (temp file, fsync, rename)."""
    tmp = tmp_path(path)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def sha256_bytes(data: bytes | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()
