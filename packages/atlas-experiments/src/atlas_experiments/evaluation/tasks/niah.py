"""`atlas eval niah`: S-NIAH (RULER's niah_single_1/2/3) on a pretrained model, accuracy per context length x
needle depth (protocol: `evaluation.long_context`); its report section is the paper's Table 3 layout and a
heatmap per model."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from atlas_experiments.evaluation.long_context import DEFAULT_DEPTHS, PAPER_NIAH_LENGTHS
from atlas_experiments.evaluation.tasks.spec import CHECKPOINT, EvalTask, ReportContext, RunsByModel

NIAH_SHORT = {"niah_single_1": "PK", "niah_single_2": "N", "niah_single_3": "W"}


def add_options(p: argparse.ArgumentParser) -> None:
    from atlas_experiments.evaluation.long_context import add_long_context_options
    from atlas_experiments.evaluation.model_io import add_model_args

    add_model_args(p)
    add_long_context_options(p, lengths=PAPER_NIAH_LENGTHS, samples=100, max_new=None)
    p.add_argument("--tasks", default="niah_single_1,niah_single_2,niah_single_3", help="niah_single_1/2/3 (pk,n,w)")
    p.add_argument("--depths", default=",".join(f"{d:g}" for d in DEFAULT_DEPTHS), help="needle depths in [0, 1]")


def run(args: argparse.Namespace) -> int:
    from atlas_data.synthetic import niah
    from atlas_experiments.evaluation.long_context import long_context_run, run_niah_protocol
    from atlas_experiments.evaluation.model_io import model_from_args, parse_floats, parse_ints
    from atlas_experiments.evaluation.results import finish

    specs = [niah.resolve_task(t.strip()) for t in args.tasks.split(",") if t.strip()]
    lengths = parse_ints(args.lengths, "--lengths")
    depths = parse_floats(args.depths, "--depths")
    if any(not 0 <= d <= 1 for d in depths):
        raise ValueError(f"--depths {args.depths!r}: depths are fractions in [0, 1]")
    settings = long_context_run(args)
    loaded = model_from_args(args)
    result, figure = run_niah_protocol(
        loaded, specs, lengths=lengths, depths=depths, samples_per_cell=args.samples, run=settings
    )
    return finish(result, args, artifact=figure)


def niah_section(by_model: RunsByModel) -> str:
    """Table 3 layout: accuracy (x 100) per needle type and context length; the paper's table below."""
    from atlas_experiments.reporting import paper_tables as paper
    from atlas_experiments.reporting.markdown import table

    cells = sorted(
        {(m.group(1), int(m.group(2))) for runs in by_model.values()
         for k in runs.get("niah", {}).get("metrics", {}) if (m := re.fullmatch(r"acc/(\w+)/len_(\d+)", k))},
    )  # fmt: skip
    if not cells:
        return ""
    header = ["model", *[f"{NIAH_SHORT.get(t, t)}-{n}" for t, n in cells], "mean"]
    rows = []
    for name, runs in sorted(by_model.items()):
        m = runs.get("niah", {}).get("metrics")
        if m:
            vals = [m.get(f"acc/{t}/len_{n}") for t, n in cells]
            rows.append([name, *[None if v is None else 100 * v for v in vals], 100 * m["acc"] if "acc" in m else None])
    out = "\n## S-NIAH (Table 3 layout, accuracy %)\n\n" + table(header, rows)
    out += "\nPaper (Table 3, S-NIAH accuracy %, contexts 2K-16K):\n\n"
    out += table(["model", *paper.NIAH_COLUMNS], [[k, *v] for k, v in paper.TABLE3_NIAH.items()])
    return out


def niah_heatmaps(by_model: RunsByModel, path: Path) -> bool:
    """One panel per model: accuracy over (context length x needle depth), averaged over needle types."""
    from atlas_experiments.plotting import pyplot, save_figure_atomic

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


def report(by_model: RunsByModel, ctx: ReportContext) -> str:
    out = niah_section(by_model)
    if niah_heatmaps(by_model, ctx.fig_dir / "niah.png"):
        out += "\n![S-NIAH accuracy by context length and needle depth](figures/niah.png)\n"
    return out


TASK = EvalTask(
    name="niah",
    command="niah",
    kind=CHECKPOINT,
    help="S-NIAH (RULER niah_single_1/2/3): accuracy per length x depth + heatmap",
    add_options=add_options,
    run=run,
    report=report,
)
