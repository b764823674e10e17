"""`atlas report --out <dir> [--tracking-uri URI]`: markdown reports and figures from the tracked runs."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="build markdown reports + figures from MLflow, beside the paper's tables")
    p.add_argument("--out", required=True, help="report directory (e.g. reports/embedded)")
    p.add_argument(
        "--tracking-uri", default=None, help="default: $MLFLOW_TRACKING_URI or sqlite:///<results>/mlflow.db"
    )
    p.add_argument("--results", default="results/embedded", help="results root of the default SQLite database")
    p.add_argument("--title", default="ATLAS reproduction")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from atlas_experiments import tracking
    from atlas_experiments.reporting.build import build_reports

    uri = tracking.resolve_uri(args.tracking_uri, Path(args.results))
    for path in build_reports(uri, args.out, args.title):
        print(path)
    return 0
