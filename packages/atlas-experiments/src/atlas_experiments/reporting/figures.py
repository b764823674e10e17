"""Report figures (PNG, written atomically): loss curves, ablation bars, grouped bars (MQAR, learnability);
the S-NIAH heatmaps are the niah task's (`evaluation.tasks.niah`)."""

from __future__ import annotations

from pathlib import Path

from atlas_experiments import tracking
from atlas_experiments.plotting import pyplot, save_figure_atomic


def loss_curves(runs: list[dict], uri: str, path: Path) -> bool:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    drawn = 0
    for run in runs:
        hist = tracking.metric_history(uri, run["run_id"], "loss")
        if hist:
            ax.plot(*zip(*hist), label=run["run_name"], lw=1.2)
            drawn += 1
    if not drawn:
        plt.close(fig)
        return False
    ax.set_xlabel("step")
    ax.set_ylabel("train loss")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    save_figure_atomic(fig, path)
    return True


def ablation_bars(axis: str, values: list[tuple[str, float]], path: Path) -> bool:
    if not values:
        return False
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.bar([v[0] for v in values], [v[1] for v in values], color="#4c72b0")
    ax.set_ylabel("validation loss")
    ax.set_title(f"ablation: {axis}")
    ax.tick_params(axis="x", labelrotation=30, labelsize=7)
    lo, hi = min(v[1] for v in values), max(v[1] for v in values)
    ax.set_ylim(lo * 0.98, hi * 1.01)
    fig.tight_layout()
    save_figure_atomic(fig, path)
    return True


def grouped_bars(title: str, ylabel: str, series: dict[str, dict[str, float]], path: Path) -> bool:
    """series: model -> {column: value}; one group of bars per column."""
    columns = sorted({c for s in series.values() for c in s})
    if not columns:
        return False
    plt = pyplot()
    # the legend sits right of the axes: with nine arms it covered the tallest bars
    fig, ax = plt.subplots(figsize=(max(5, 1.1 * len(columns) + 2) + 1.8, 3.2))
    width = 0.8 / max(len(series), 1)
    for i, (name, values) in enumerate(sorted(series.items())):
        xs = [j + i * width for j in range(len(columns))]
        ax.bar(xs, [values.get(c, 0.0) for c in columns], width=width, label=name)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(columns))], columns, fontsize=7, rotation=20)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    fig.tight_layout()
    save_figure_atomic(fig, path)
    return True
