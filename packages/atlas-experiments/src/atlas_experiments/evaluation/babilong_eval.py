"""BABILong-style evaluation: accuracy per bAbI task and context length, and its figure.

Samples come from `atlas_data.synthetic.babilong` (template stories hidden in held-out corpus text); scoring is
`needle.score_samples` (greedy generation judged by BABILong's `compare_answers`, and/or ranking the task's
labels by log-likelihood).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from atlas_experiments.evaluation.needle import Rollup, accuracy_metrics, draw_percent_grid
from atlas_experiments.plotting import pyplot, save_figure_atomic


def babilong_judge(sample: Any, prediction: str) -> bool:
    from atlas_data.synthetic.babilong import compare_answers

    # BABILong reads the first line of the answer; later lines are the model rambling on
    first = prediction.strip().split("\n", 1)[0]
    return compare_answers(sample.answer, first, sample.question, sample.candidates)


def babilong_metrics(samples: Sequence[Any], records: Sequence[dict[str, Any]], scorings: Sequence[str]) -> dict:
    """`acc/<task>/len=L`, `acc/<task>`, `acc/len=L` (mean over tasks) and `acc`; `rank_acc/...` likewise."""
    by_task, by_length = Rollup(("task",)), Rollup(("length",), pooled=False)
    return accuracy_metrics(samples, records, scorings, cell=("task", "length"), rollups=(by_task, by_length))


def plot_babilong(
    metrics: dict[str, float],
    tasks: Sequence[str],
    lengths: Sequence[int],
    path: Path,
    prefix: str = "acc",
    model: str = "",
) -> Path:
    """Accuracy (%) per task (rows) and context length (columns), as a heatmap."""
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(1.5 + 0.9 * len(lengths), 1.0 + 0.45 * len(tasks)))
    image = draw_percent_grid(ax, metrics, tasks, lengths, lambda task, length: f"{prefix}/{task}/len={length}")
    ax.set_xticks(range(len(lengths)), [str(x) if x else "0 (facts only)" for x in lengths], fontsize=8)
    ax.set_yticks(range(len(tasks)), list(tasks), fontsize=8)
    ax.set_xlabel("context length (tokens)")
    kind = "generation" if prefix == "acc" else "ranking"
    ax.set_title(f"BABILong-style accuracy (%), {kind}, {model}".rstrip(", "), fontsize=10)
    fig.colorbar(image, ax=ax, shrink=0.8)
    return save_figure_atomic(fig, path, bbox_inches="tight")
