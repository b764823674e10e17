"""`atlas report --out <dir> [--tracking-uri URI]`: markdown reports and figures from the tracked runs."""

from __future__ import annotations

import argparse
import json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="build markdown reports + figures from MLflow, beside the paper's tables")
    p.add_argument("--out", required=True, help="report directory (e.g. reports/embedded)")
    p.add_argument(
        "--tracking-uri", default=None, help="default: $MLFLOW_TRACKING_URI or sqlite:///<--results>/mlflow.db"
    )
    p.add_argument("--results", default="results/embedded", help="results root of the default SQLite database")
    p.add_argument("--title", default="ATLAS reproduction")
    p.add_argument(
        "--ablation-cells",
        help="JSON {axis: {run name: {key: value}}} of the current ablation tables: only these rows are reported, "
        "with these settings (the workflow passes it, so a deleted row disappears); default: every tracked cell",
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from atlas_experiments import tracking
    from atlas_experiments.reporting.build import build_reports

    uri = tracking.resolve_tracking_uri(args.tracking_uri, args.results)
    cells = _cells(args.ablation_cells) if args.ablation_cells else None
    for path in build_reports(uri, args.out, args.title, cells):
        print(path)
    return 0


def _cells(text: str) -> dict[str, dict[str, dict[str, str]]]:
    from atlas_experiments.schema import ConfigError

    try:
        cells = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"--ablation-cells: not JSON ({exc})") from exc

    def row(values) -> bool:
        return isinstance(values, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in values.items())

    if not isinstance(cells, dict) or not all(
        isinstance(rows, dict) and all(isinstance(n, str) and row(v) for n, v in rows.items())
        for rows in cells.values()
    ):
        raise ConfigError('--ablation-cells: expected {"axis": {"run name": {"key": "value", ...}, ...}}')
    return cells
