"""`ablations.md`: one table per ablation axis (validation loss per cell) beside the Table 6 row it speaks to.

MLflow keeps every cell an axis ever had; `cells` (axis -> run name -> the row's settings, from the workflow's
current tables) limits the report to the rows of today's tables, so a deleted row disappears and a renamed one is
not listed twice. A cell's settings come from its table row or from the tags its run carries
(`tracking.CELL_TAG_PREFIX`), never from its name.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
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


# axis -> run name -> the cell's settings as its table row writes them ({'window': '4'})
TableCells = dict[str, dict[str, dict[str, str]]]


@dataclass(frozen=True)
class Cell:
    """One row of an axis: its run name, its settings, and its tracked run (None: in the table, not run yet)."""

    name: str
    values: dict[str, str]
    run: dict | None = field(default=None, compare=False)

    @property
    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.values.items()) or self.name


def tagged_values(run: dict) -> dict[str, str]:
    """The settings a cell's run carries as tags (sorted by key: MLflow keeps no tag order)."""
    prefix = tracking.CELL_TAG_PREFIX
    return {k.removeprefix(prefix): v for k, v in sorted(run["tags"].items()) if k.startswith(prefix)}


def order_key(cell: Cell) -> tuple:
    """Numbers compare as numbers (window 1 < 2 < 16), before words; a cell that sets fewer keys comes first."""

    def one(text: str) -> tuple:
        try:
            return (0, float(text), "")
        except ValueError:
            return (1, 0.0, text)

    return tuple(one(v) for v in cell.values.values())


def paper_row(axis: str, cell: dict[str, str]) -> str | None:
    for settings, row in paper.ABLATION_ROWS.get(axis, ()):
        if all(cell.get(k, "").lower() == v.lower() for k, v in settings.items()):
            return row
    return None


def current_cells(runs: list[dict], cells: TableCells | None) -> dict[str, list[Cell]]:
    """axis -> its cells in numeric order: every tracked cell, or (with `cells`) the rows of today's tables, each
    with its tracked run where there is one. A row's settings are the table's; a tracked cell outside the tables
    shows the tags its run carries (none, for runs tracked before cells carried tags: then its name)."""
    tracked: dict[str, dict[str, dict]] = defaultdict(dict)
    for run in runs:
        if is_cell(run):
            tracked[run["experiment"].removeprefix("ablation_")][run["run_name"]] = run
    if cells is None:
        members = {axis: [Cell(n, tagged_values(r), r) for n, r in named.items()] for axis, named in tracked.items()}
    else:
        members = {
            axis: [Cell(n, dict(v), tracked[axis].get(n)) for n, v in rows.items()] for axis, rows in cells.items()
        }
    return {axis: sorted(listed, key=order_key) for axis, listed in sorted(members.items()) if listed}


def ablation_report(runs: list[dict], fig_dir: Path, cells: TableCells | None = None) -> str:
    out = ["# Ablations (Table 6 / Fig. 5)\n"]
    by_axis = current_cells(runs, cells)
    if not by_axis:
        return out[0] + "\nNo ablation runs are tracked yet.\n"
    for axis, members in by_axis.items():
        out.append(f"\n## {axis}\n\n")
        rows = []
        for cell in members:
            m = {} if cell.run is None else cell.run["metrics"]
            row = paper_row(axis, cell.values)
            ref = paper.TABLE6_ABLATIONS.get(row) if row else None
            rows.append(
                [cell.label, m.get("val_loss"), ppl(m.get("val_loss")),
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
