"""The files a workflow job reads its settings from (a run's `train.json`, the cost table's job list), written by
their own rules from the resolved settings, never through the shell: no quoting, no argument-length limit, and a
file is renamed into place only once complete (`atlas_experiments._io.write_text_atomic`), so a killed write never
leaves half a config behind.

Plain Python, no snakemake: the rules' script (workflow/scripts/write_job_file.py) calls it and the tests import it.
"""

from __future__ import annotations

from pathlib import Path

from atlas_experiments._io import write_text_atomic


def write_job_file(path: str | Path, text: str, log: str | Path | None = None) -> Path:
    """Write `text` to `path` atomically; `log` records what was written."""
    path = write_text_atomic(path, text)
    if log is not None:
        Path(log).parent.mkdir(parents=True, exist_ok=True)
        Path(log).write_text(f"wrote {path} ({len(text.encode())} bytes)\n")
    return path
