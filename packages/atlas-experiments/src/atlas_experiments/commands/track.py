"""`atlas track sync --run <dir>`: register a run directory in MLflow (when live tracking was unreachable)."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("track", help="MLflow tracking utilities")
    inner = p.add_subparsers(dest="track_command", metavar="<subcommand>", required=True)
    s = inner.add_parser("sync", help="register a run directory (config.json + metrics.jsonl) as an MLflow run")
    s.add_argument("--run", required=True, help="run directory written by `atlas train`")
    s.add_argument("--uri", default=None, help="tracking URI (default: $MLFLOW_TRACKING_URI or <run>/../mlflow.db)")
    s.add_argument("--experiment", default=None)
    s.set_defaults(handler=sync)


def sync(args: argparse.Namespace) -> int:
    from atlas_experiments import tracking

    run = Path(args.run)
    uri = tracking.resolve_uri(args.uri, run.parent)
    run_id = tracking.sync_run_dir(run, uri, args.experiment)
    print(f"registered {run} as MLflow run {run_id} at {uri}")
    return 0
