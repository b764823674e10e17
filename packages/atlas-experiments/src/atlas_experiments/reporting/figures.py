"""Report figures (PNG, written atomically): loss curves, ablation bars, S-NIAH heatmaps, grouped bars (MQAR,
learnability)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

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


def niah_heatmaps(by_model: dict[str, dict[str, Any]], path: Path) -> bool:
    """One panel per model: accuracy over (context length x needle depth), averaged over needle types."""
    grids = {}
    for name, runs in sorted(by_model.items()):
        metrics = runs.get("niah", {}).get("metrics", {})
        cells: dict[tuple[int, float], list[float]] = {}
        for k, v in metrics.items():
            m = re.fullmatch(r"acc/\w+/len_(\d+)/depth_([\d.]+)", k)
            if m:
                cells.setdefault((int(m.group(1)), float(m.group(2))), []).append(v)
        if cells:
            grids[name] = {key: sum(v) / len(v) for key, v in cells.items()}
    if not grids:
        return False
    plt = pyplot()
    n = len(grids)
    cols = min(n, 4)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(3.0 * cols + 1, 2.4 * rows), squeeze=False, layout="constrained")
    for i, (ax, (name, grid)) in enumerate(zip(axes.flat, grids.items())):
        lengths = sorted({k[0] for k in grid})
        depths = sorted({k[1] for k in grid})
        data = [[grid.get((n_, d), float("nan")) for n_ in lengths] for d in depths]
        im = ax.imshow(data, vmin=0, vmax=1, cmap="viridis", aspect="auto", origin="lower")
        for y, row in enumerate(data):  # the value in each cell: an all-zero grid still reads as data
            for x, value in enumerate(row):
                ax.text(x, y, f"{value:.2f}", ha="center", va="center", fontsize=7,
                        color="white" if value < 0.6 else "black")  # fmt: skip
        ax.set_xticks(range(len(lengths)), [str(x) for x in lengths], fontsize=7)
        ax.set_yticks(range(len(depths)), [f"{d:g}" for d in depths], fontsize=7)
        ax.set_title(name, fontsize=8)
        if i // cols == rows - 1 or i + cols >= n:
            ax.set_xlabel("context length", fontsize=7)
        if i % cols == 0:
            ax.set_ylabel("needle depth", fontsize=7)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.8, label="accuracy (mean over needle types)")
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
