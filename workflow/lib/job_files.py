"""The files a workflow job reads its settings from (a run's `train.json`, the cost table's job list), written by
their own rules from the resolved settings, never through the shell: no quoting, no argument-length limit, and a
file is renamed into place only once complete, so a killed write never leaves half a config behind.

Plain Python, no snakemake: the rules call it from their `run:` blocks and the tests import it directly.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_job_file(path: str | Path, text: str, log: str | Path | None = None) -> Path:
    """Write `text` to `path` atomically (a temp file in the same folder, then a rename); `log` records it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if log is not None:
        Path(log).parent.mkdir(parents=True, exist_ok=True)
        Path(log).write_text(f"wrote {path} ({len(text.encode())} bytes)\n")
    return path
