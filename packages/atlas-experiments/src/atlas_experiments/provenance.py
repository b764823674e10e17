"""Where a run came from, as tags on its MLflow run: the git commit (and whether the tree was dirty), a hash of the
resolved config, the host, the world size and the versions of the project's packages and of torch/transformers.
Plain Python (no mlflow), so `tracking` stays the one module that talks to MLflow."""

from __future__ import annotations

import contextlib
import hashlib
import json
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGES = ("atlas-kernels", "atlas-model", "atlas-data", "atlas-experiments", "torch", "transformers")


def config_sha256(config: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()


def git_state(cwd: Path | None = None) -> tuple[str, bool]:
    """(commit, dirty) of the working tree, or ('unknown', False) outside git."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
        dirty = bool(
            subprocess.run(
                ["git", "status", "--porcelain", "--untracked-files=no"],
                cwd=cwd,
                capture_output=True,
                text=True,
                check=True,
                timeout=10,
            ).stdout.strip()
        )
        return commit, dirty
    except (OSError, subprocess.SubprocessError):
        return "unknown", False


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
