"""What every evaluation task's report section shares: runs grouped by model and task, column helpers, and the
protocol deviations of every task. The sections themselves live with their tasks (`evaluation.tasks`).

Input: the latest tracked evaluation runs (dicts from `tracking.load_runs`), grouped by their `task` tag. Metric
names are MLflow-sanitised (`acc/niah_single_1/len_256/depth_0.25`). Every table drops the columns no run has
(`drop_empty`), so a reduced protocol (the embedded default) gives a compact table instead of a wall of dashes.
"""

from __future__ import annotations

import re
from typing import Any

from atlas_experiments.evaluation.results import model_label


def model_name(run: dict) -> str:
    """`<study>/<run>` for a pretrained checkpoint; a synthetic task's model is its preset."""
    return model_label(run["tags"].get("model", run["run_name"]))


def numeric_suffix(key: str) -> tuple:
    """Sort 'len_64' < 'len_128' and 'T16 P2' < 'T64 P8': numbers compare as numbers."""
    return tuple(
        (0, float(x), "") if x.replace(".", "", 1).isdigit() else (1, 0.0, x) for x in re.split(r"[_= TP]+", key)
    )


def drop_empty(header: list[str], rows: list[list[Any]], keep: int = 1) -> tuple[list[str], list[list[Any]]]:
    cols = [i for i in range(len(header)) if i < keep or any(r[i] is not None for r in rows)]
    return [header[i] for i in cols], [[r[i] for i in cols] for r in rows]


def group_by_model(evals: list[dict]) -> dict[str, dict[str, dict]]:
    """model name -> task -> run (the latest per (experiment, run name) was picked upstream)."""
    out: dict[str, dict[str, dict]] = {}
    for run in evals:
        out.setdefault(model_name(run), {})[task_key(run)] = run
    return out


def task_key(run: dict) -> str:
    """The `task` tag as a key: `lm-eval` (the command's name) -> `lm_eval`."""
    return run["tags"]["task"].replace("-", "_")


def deviations(evals: list[dict]) -> str:
    """Each task's protocol deviations, every distinct item once (runs of one task share most of them)."""
    by_task: dict[str, dict[str, None]] = {}
    for run in evals:
        items = by_task.setdefault(task_key(run), {})
        for item in run["tags"].get("deviations", "").split("; "):
            if item.strip() and item.strip() != "none":
                items[item.strip()] = None
    lines = [f"\n- **{task}**: " + "; ".join(items) for task, items in sorted(by_task.items()) if items]
    return "\n## Protocol deviations\n" + "\n".join(lines) + "\n" if lines else ""
