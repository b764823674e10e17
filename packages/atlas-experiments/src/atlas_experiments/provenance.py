"""Where a run came from: the git commit (and whether the tree was dirty), a hash of the resolved config, the host,
the world size and the versions of the project's packages and of torch/transformers, as tags on an MLflow run;
the commit label of a study result and report. Plain Python (no mlflow), so `tracking` stays the one module that
talks to MLflow."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGES = ("atlas-kernels", "atlas-model", "atlas-data", "atlas-experiments", "torch", "transformers")


def config_sha256(config: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()


def _git(cwd: Path | None, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True, timeout=10).stdout


def git_state(cwd: Path | None = None, ignore: str | Path | None = None) -> tuple[str, bool]:
    """(commit, dirty) of the working tree, or ('unknown', False) outside git.

    Tracked files under `ignore` do not make the tree dirty: a report's writer deletes its outputs before it
    rewrites them, so the report being written would otherwise always mark its own commit dirty."""
    try:
        commit = _git(cwd, "rev-parse", "HEAD").strip()
        top = _git(cwd, "rev-parse", "--show-toplevel").strip()
        status = _git(cwd, "status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return "unknown", False
    changed = [Path(top, line[3:].split(" -> ")[-1]).resolve() for line in status.splitlines()]
    if ignore is not None:
        skip = Path(ignore).resolve()
        changed = [p for p in changed if not p.is_relative_to(skip)]
    return commit, bool(changed)


def commit_label(ignore: str | Path | None = None, cwd: Path | None = None) -> str:
    """The short commit, "+ local changes" when the tracked files (outside `ignore`) differ from it: what a study
    result and a report name as their commit."""
    commit, dirty = git_state(cwd, ignore)
    if commit == "unknown":
        return "unknown (not a git checkout)"
    return _git(cwd, "rev-parse", "--short", commit).strip() + (" + local changes" if dirty else "")


def machine_label() -> str:
    """The machine in words, as a study report names it: cores, architecture, GPU, OS, torch."""
    import torch

    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    return f"{os.cpu_count()}-core {platform.machine()} CPU, {gpu}, {platform.system()}, torch {torch.__version__}"


def standard_tags(config: dict[str, Any], world_size: int = 1) -> dict[str, str]:
    commit, dirty = git_state(Path(__file__).parent)
    tags = {
        "git.commit": commit,
        "git.dirty": str(dirty).lower(),
        "config.sha256": config_sha256(config),
        "host": platform.node(),
        "world_size": str(world_size),
    }
    for pkg in PACKAGES:
        with contextlib.suppress(metadata.PackageNotFoundError):
            tags[f"version.{pkg}"] = metadata.version(pkg)
    return tags
