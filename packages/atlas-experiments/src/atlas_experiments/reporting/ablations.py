"""`ablations.md`: one table per ablation axis (validation loss per cell) beside the Table 6 row it speaks to.

MLflow keeps every cell an axis ever had; `cells` (axis -> run names, from the workflow's current tables) limits
the report to the rows of today's tables, so a deleted row disappears and a renamed one is not listed twice.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from atlas_experiments import tracking
from atlas_experiments.reporting import figures
from atlas_experiments.reporting import paper_tables as paper
from atlas_experiments.reporting.markdown import ppl
from atlas_experiments.reporting.markdown import table as _table

NOTES = {  # what a cell means where its name alone could mislead
    "poly_degree": "poly_degree=1 keeps the constant feature and a learnable a_1, so it is not the paper's "
    '"w/o polynomial map"; that row is feature_map=identity (phi(x) = x).',
    "window": "use_gamma_gate=false fixes the window gates gamma_i to 1: the paper explains the gain of a larger c "
    "by these gates pruning the context (Fig. 5).",
    "gated_mlp": "memory=linear is Table 6's linear memory (a matrix memory instead of the MLP, same Omega rule).",
}


def is_cell(run: dict) -> bool:
    """An ablation cell (its axis's parent run holds the summary, not a cell)."""
    return run["experiment"].startswith("ablation_") and run["tags"].get(tracking.ROLE_TAG) != "parent"


def cell_values(run_name: str) -> dict[str, str]:
    """'window~4__use_gamma_gate~false' -> {'window': '4', 'use_gamma_gate': 'false'}."""
    return dict(part.split("~", 1) for part in run_name.split("__") if "~" in part)


def order_key(run_name: str) -> tuple:
    """Numbers compare as numbers (window 1 < 2 < 16), before words; a cell that sets fewer keys comes first."""

    def one(text: str) -> tuple:
        try:
            return (0, float(text), "")
        except ValueError:
            return (1, 0.0, text)

    return tuple(one(v) for v in cell_values(run_name).values())


def paper_row(axis: str, cell: dict[str, str]) -> str | None:
    for settings, row in paper.ABLATION_ROWS.get(axis, ()):
        if all(cell.get(k, "").lower() == v.lower() for k, v in settings.items()):
            return row
    return None


def current_cells(runs: list[dict], cells: dict[str, list[str]] | None) -> dict[str, list[dict | str]]:
    """axis -> its cells in numeric order: tracked runs, or (with `cells`) the run names of today's tables, each
    replaced by its tracked run where there is one."""
    tracked: dict[str, dict[str, dict]] = defaultdict(dict)
    for run in runs:
        if is_cell(run):
            tracked[run["experiment"].removeprefix("ablation_")][run["run_name"]] = run
    names = cells if cells is not None else {axis: list(by_name) for axis, by_name in tracked.items()}
    return {
        axis: [tracked[axis].get(n, n) for n in sorted(dict.fromkeys(listed), key=order_key)]
        for axis, listed in sorted(names.items())
        if listed
    }


def ablation_report(runs: list[dict], fig_dir: Path, cells: dict[str, list[str]] | None = None) -> str:
    out = ["# Ablations (Table 6 / Fig. 5)\n"]
    by_axis = current_cells(runs, cells)
    if not by_axis:
        return out[0] + "\nNo ablation runs are tracked yet.\n"
    for axis, members in by_axis.items():
        out.append(f"\n## {axis}\n\n")
        rows = []
        for member in members:
            name = member if isinstance(member, str) else member["run_name"]
            m = {} if isinstance(member, str) else member["metrics"]
            cell = cell_values(name)
            row = paper_row(axis, cell)
            ref = paper.TABLE6_ABLATIONS.get(row) if row else None
            rows.append(
                [", ".join(f"{k}={v}" for k, v in cell.items()), m.get("val_loss"), ppl(m.get("val_loss")),
                 m.get("loss"), row or "–", ref[0] if ref else None, ref[1] if ref else None]
            )  # fmt: skip
        header = ["cell", "val loss", "val ppl", "train loss", "paper row", "paper LM ppl", "paper acc"]
        out.append(_table(header, rows))
        if axis in NOTES:
            out.append(f"\n{NOTES[axis]}\n")
        bars = [(r[0], r[1]) for r in rows if r[1] is not None]
        if figures.ablation_bars(axis, bars, fig_dir / f"ablation_{axis}.png"):
            out.append(f"\n![{axis}](figures/ablation_{axis}.png)\n")
    return "".join(out)
