"""The MQAR jobs' learning curves in the study report: validation accuracy against training step, one panel per
MQAR protocol, one colour per arm, one thin line per finished seed (`curves_<protocol>.png` beside verdicts.md),
and a table of each arm's seeds done, final validation accuracy and memory size (floats per sequence).

A curve comes from a finished job's result (`details.table`: the validation accuracy the run recorded every
`eval_every` steps, for the lr the protocol ran); unfinished jobs are not drawn. The curves are what a reader checks
before a verdict: did an arm leave the copy-from-context plateau, and when. They judge nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from statistics import mean
from typing import Any

from atlas_experiments.plotting import pyplot, save_figure_atomic
from atlas_experiments.study.plan import Job
from atlas_experiments.study.results import ResultError, load

Curves = dict[str, dict[str, dict[int, dict[str, Any]]]]  # protocol -> arm -> seed -> {curve, memory}


def mqar_curves(jobs: Sequence[Job], root: str | Path) -> Curves:
    """The curves and memory floats of every finished MQAR job among `jobs`."""
    out: Curves = {}
    for job in jobs:
        if job.protocol.task != "mqar" or job.arm is None:
            continue
        try:
            data = load(job, root)
        except (FileNotFoundError, ResultError):
            continue
        rows = [r for r in data.get("details", {}).get("table", []) if r.get("model") == job.arm.name]
        if not rows or not rows[0].get("curve"):
            continue
        row = rows[0]
        out.setdefault(job.protocol.name, {}).setdefault(job.arm.name, {})[job.seed] = {
            "curve": row["curve"],
            "memory": max(row.get("memory_size", {}).values(), default=None),
        }
    return out


def curves_figure(protocol: str, arms: dict[str, dict[int, dict[str, Any]]], path: str | Path) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (arm, seeds) in enumerate(sorted(arms.items())):
        colour = colours[i % len(colours)]
        for j, (_, run) in enumerate(sorted(seeds.items())):
            steps, accs = zip(*run["curve"])
            label = f"{arm} ({len(seeds)} seeds)" if j == 0 else None
            ax.plot(steps, accs, color=colour, lw=1.0, alpha=0.8, label=label)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("training step")
    ax.set_ylabel("validation accuracy (mean over settings)")
    ax.set_title(f"MQAR learning curves, {protocol} (finished jobs)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    return save_figure_atomic(fig, path)


def curves_section(curves: Curves, out_dir: str | Path) -> str:
    """The report's section on the MQAR curves (figures written into `out_dir`); empty without a finished job."""
    if not curves:
        return ""
    out = ["## MQAR learning curves (finished jobs; they judge nothing)\n"]
    for protocol, arms in sorted(curves.items()):
        name = f"curves_{protocol}.png"
        curves_figure(protocol, arms, Path(out_dir) / name)
        out += [f"### {protocol}\n", "| arm | seeds done | final validation accuracy, mean (min - max) | memory |"]
        out.append("|---|---|---|---|")
        for arm, seeds in sorted(arms.items()):
            finals = [run["curve"][-1][1] for run in seeds.values()]
            memory = {run["memory"] for run in seeds.values()}
            out.append(f"| {arm} | {len(seeds)} | {mean(finals):.3f} ({min(finals):.3f} - {max(finals):.3f}) | "
                       f"{', '.join(f'{m:,.0f}' for m in sorted(x for x in memory if x is not None))} |")  # fmt: skip
        out += ["", f"![validation accuracy by step, {protocol}]({name})\n"]
    return "\n".join(out)
