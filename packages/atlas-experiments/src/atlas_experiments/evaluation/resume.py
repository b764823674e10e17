"""A folder that lets a long synthetic-task run (`atlas eval mqar|mad --resume-dir`) survive being killed.

Each training run of a sweep (`evaluation.sweep`: one model and sweep point, e.g. width and lr) is named by a key,
the hash of everything that determines its numbers (the arm, the point, seed and protocol). While it trains, `fit`
keeps a snapshot `<key>.pt` there (model, optimizer, batch streams, generator, losses, learning curve so far:
`synthetic_train.FitSnapshot`); when it ends, its result goes to `<key>.json` and the snapshot is removed. A rerun
with the same folder skips the finished runs and continues the unfinished one from its snapshot, so a kill at any
moment (kill -9 included) costs at most the steps since the last snapshot, and the final numbers are those of an
uninterrupted run. Files are written to a temp name and renamed, so a kill never leaves a half-written one under a
final name.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from atlas_experiments._io import write_json_atomic
from atlas_experiments.evaluation.synthetic_train import FitSnapshot


@dataclass(frozen=True)
class ResumeDir:
    """The snapshot folder of one command's sweep; `every`: steps between snapshots."""

    folder: Path
    every: int = 250

    def __post_init__(self) -> None:
        object.__setattr__(self, "folder", Path(self.folder))
        if self.every < 1:
            raise ValueError(f"--snapshot-every: expected >= 1 step, got {self.every}")

    @staticmethod
    def key(choice: Any, seed: int, protocol: Any, label: str, identity: Mapping[str, Any]) -> str:
        """The name of one training run: `<arm>-<label>-<hash>`, the hash of what determines its numbers (the arm,
        seed, protocol and the point's `identity`, e.g. width and lr), nothing else (not the device threads)."""
        clash = {"arm", "seed", "protocol"} & set(identity)
        if clash:
            raise ValueError(f"resume key: the point's identity may not use {sorted(clash)} (taken by the run)")
        identity = {"arm": choice.describe(), "seed": seed, "protocol": protocol.describe(), **identity}
        text = json.dumps(identity, sort_keys=True, default=str)
        return f"{choice.name}-{label}-" + hashlib.sha256(text.encode()).hexdigest()[:16]

    def snapshot(self, key: str, records: dict[str, list[Any]]) -> FitSnapshot:
        return FitSnapshot(self.folder / f"{key}.pt", self.every, key, records)

    def finished(self, key: str) -> dict[str, Any] | None:
        """The result of run `key` if an earlier invocation finished it; a file that is not its own is refused."""
        path = self.folder / f"{key}.json"
        if not path.exists():
            return None
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not a finished run's result ({exc}); delete it to run again") from exc
        if not isinstance(data, dict) or data.get("key") != key:
            raise ValueError(f"{path}: the result of another run; delete it or resume in another folder")
        return data["run"]

    def finish(self, key: str, run: dict[str, Any]) -> None:
        """Record run `key`'s result, then drop its snapshot (in that order: a kill between leaves both)."""
        write_json_atomic(self.folder / f"{key}.json", {"key": key, "run": run})
        (self.folder / f"{key}.pt").unlink(missing_ok=True)
