"""BABILong-style evaluation: accuracy per bAbI task and context length, and its figure.

Samples come from `atlas_data.synthetic.babilong` (template stories hidden in held-out corpus text); scoring is
`needle.score_samples` (greedy generation judged by BABILong's `compare_answers`, and/or ranking the task's
labels by log-likelihood).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from atlas_experiments.evaluation.needle import mean


def babilong_judge(sample: Any, prediction: str) -> bool:
    from atlas_data.synthetic.babilong import compare_answers

    # BABILong reads the first line of the answer; later lines are the model rambling on
    first = prediction.strip().split("\n", 1)[0]
    return compare_answers(sample.answer, first, sample.question, sample.candidates)


def babilong_metrics(samples: Sequence[Any], records: Sequence[dict[str, Any]], scorings: Sequence[str]) -> dict:
    """`acc/<task>/len=L`, `acc/<task>`, `acc/len=L` (mean over tasks) and `acc`; `rank_acc/...` likewise."""
    metrics: dict[str, float] = {}
    for scoring in scorings:
        prefix = "acc" if scoring == "generate" else "rank_acc"
        key = f"{scoring}_correct"
        cells: dict[tuple[str, int], list[float]] = {}
        for s, r in zip(samples, records):
            cells.setdefault((s.task, s.length), []).append(float(r[key]))
        by_task: dict[str, list[float]] = {}
        by_len: dict[int, list[float]] = {}
        for (task, length), hits in sorted(cells.items()):
            metrics[f"{prefix}/{task}/len={length}"] = mean(hits)
            by_task.setdefault(task, []).extend(hits)
            by_len.setdefault(length, []).append(mean(hits))
        for task, hits in sorted(by_task.items()):
            metrics[f"{prefix}/{task}"] = mean(hits)
        for length, accs in sorted(by_len.items()):
            metrics[f"{prefix}/len={length}"] = mean(accs)
        metrics[prefix] = mean([float(r[key]) for r in records])
    return metrics


def plot_babilong(
    metrics: dict[str, float],
    tasks: Sequence[str],
    lengths: Sequence[int],
    path: Path,
    prefix: str = "acc",
    model: str = "",
) -> Path:
    """Accuracy (%) per task (rows) and context length (columns), as a heatmap."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    grid = np.full((len(tasks), len(lengths)), np.nan)
    for i, task in enumerate(tasks):
        for j, length in enumerate(lengths):
            v = metrics.get(f"{prefix}/{task}/len={length}")
            if v is not None:
                grid[i, j] = 100.0 * v
    fig, ax = plt.subplots(figsize=(1.5 + 0.9 * len(lengths), 1.0 + 0.45 * len(tasks)))
    image = ax.imshow(grid, cmap="RdYlGn", vmin=0, vmax=100, aspect="auto")
    for i in range(len(tasks)):
        for j in range(len(lengths)):
            if not np.isnan(grid[i, j]):
                ax.text(j, i, f"{grid[i, j]:.0f}", ha="center", va="center", fontsize=8)
    ax.set_xticks(range(len(lengths)), [str(x) if x else "0 (facts only)" for x in lengths], fontsize=8)
    ax.set_yticks(range(len(tasks)), list(tasks), fontsize=8)
    ax.set_xlabel("context length (tokens)")
    kind = "generation" if prefix == "acc" else "ranking"
    ax.set_title(f"BABILong-style accuracy (%), {kind}, {model}".rstrip(", "), fontsize=10)
    fig.colorbar(image, ax=ax, shrink=0.8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path
