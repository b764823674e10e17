"""Where a study report's numbers come from: the commit, the machine and when the results were made."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def _commit(report_dir: str | Path | None = None) -> str:
    """Short hash of the checkout's HEAD, "+ local changes" when the tracked files differ from it.

    Files under ``report_dir`` do not count: the workflow deletes a report's outputs before it rewrites them,
    so the report being written would otherwise always mark its own commit dirty.
    """
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, check=True)  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    changed = [Path(top.stdout.strip(), line[3:].split(" -> ")[-1]).resolve() for line in dirty.stdout.splitlines()]
    if report_dir is not None:
        skip = Path(report_dir).resolve()
        changed = [p for p in changed if not p.is_relative_to(skip)]
    return head.stdout.strip() + (" + local changes" if changed else "")


def _machine() -> str:
    import torch

    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    return f"{os.cpu_count()}-core {platform.machine()} CPU, {gpu}, {platform.system()}, torch {torch.__version__}"


def provenance(root: str | Path, jobs: Iterable[Any], report_dir: str | Path | None = None) -> str:
    """One line for the report: report date, commit, machine, and the span of the jobs' result timestamps."""
    created = []
    for job in jobs:
        stamp = json.loads(job.result(root).read_text()).get("created")
        if stamp:
            created.append(stamp)
    span = f"results created {min(created)} to {max(created)} ({len(created)} jobs)" if created else "no results"
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"Report written {now} at commit {_commit(report_dir)} on a {_machine()}; {span}."
