"""`metrics.jsonl`: one JSON object per optimizer step, appended and flushed as training goes, so a finished
step's numbers survive a crash or a dead tracking server. On resume the file is truncated to the resumed step."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any


class MetricsFile:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = None

    def truncate_after(self, step: int) -> None:
        """Drop records with step > `step` (written after the checkpoint a resumed run restarts from)."""
        if not self.path.exists():
            return
        keep = [r for r in read_metrics(self.path) if r.get("step", -1) <= step]
        tmp = self.path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in keep))
        os.replace(tmp, self.path)

    def append(self, record: dict[str, Any]) -> None:
        if self._fh is None:
            self._fh = self.path.open("a", encoding="utf-8")
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}
        self._fh.write(json.dumps(clean) + "\n")
        self._fh.flush()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Records of a metrics file; a torn last line (killed mid-write) is ignored."""
    out = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out
