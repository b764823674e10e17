"""`atlas track`: MLflow utilities.

- `sync --run <dir>`: register a run directory in MLflow (when live tracking was unreachable).
- `parent --experiment E --name N --record R`: create a study's parent run (an ablation axis) whose id the
  children's TrainConfig names through `tracking.parent: R`; reused while R exists.
- `summarize --record R --out S`: log every child's final losses and the best cell on the parent; write S (JSON).

`sync` and `parent` take the store as `--tracking-uri` (the spelling of every `atlas` command; `--uri` is still
accepted but deprecated).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from atlas_experiments._io import write_json_atomic


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("track", help="MLflow tracking utilities")
    inner = p.add_subparsers(dest="track_command", metavar="<subcommand>", required=True)
    s = inner.add_parser("sync", help="register a run directory (config.json + metrics.jsonl) as an MLflow run")
    s.add_argument("--run", required=True, help="run directory written by `atlas train`")
    _add_tracking_uri(s, "default: $MLFLOW_TRACKING_URI or sqlite:///<dir of --run>/mlflow.db")
    s.add_argument("--experiment", default=None)
    s.set_defaults(handler=sync)

    pa = inner.add_parser("parent", help="create (or reuse) the parent run of a study, e.g. one ablation axis")
    _add_tracking_uri(pa, "default: $MLFLOW_TRACKING_URI or sqlite:///<dir of --record>/mlflow.db")
    pa.add_argument("--experiment", required=True, help="the study's experiment, e.g. ablation_window")
    pa.add_argument("--name", required=True, help="parent run name")
    pa.add_argument("--record", required=True, help="JSON file that keeps the parent's run id")
    pa.add_argument("--params", default="{}", help="JSON mapping logged as the parent's params")
    pa.add_argument("--artifact", action="append", default=[], help="file logged on the parent (repeatable)")
    pa.set_defaults(handler=parent)

    su = inner.add_parser("summarize", help="log the children's final losses and the best cell on the parent")
    su.add_argument("--record", required=True, help="the parent record written by `atlas track parent`")
    su.add_argument("--out", required=True, help="summary JSON")
    su.set_defaults(handler=summarize)


class _DeprecatedUri(argparse.Action):
    """`--uri`, the old spelling of `--tracking-uri`: hidden from --help, still works, and says so."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        print(f"atlas: warning: {option_string} is deprecated; use --tracking-uri", file=sys.stderr)
        setattr(namespace, self.dest, values)


def _add_tracking_uri(p: argparse.ArgumentParser, default_help: str) -> None:
    p.add_argument("--tracking-uri", default=None, help=f"MLflow URI ({default_help})")
    p.add_argument("--uri", dest="tracking_uri", action=_DeprecatedUri, help=argparse.SUPPRESS)


def sync(args: argparse.Namespace) -> int:
    from atlas_experiments import tracking

    run = Path(args.run)
    uri = tracking.resolve_tracking_uri(args.tracking_uri, run.parent)
    run_id = tracking.sync_run_dir(run, uri, args.experiment)
    print(f"registered {run} as MLflow run {run_id} at {uri}")
    return 0


def parent(args: argparse.Namespace) -> int:
    from atlas_experiments import tracking

    try:
        params = json.loads(args.params)
    except ValueError as exc:
        raise SystemExit(f"--params is not JSON: {exc}") from exc
    for path in args.artifact:
        if not Path(path).is_file():
            raise SystemExit(f"--artifact {path}: no such file")
    uri = tracking.resolve_tracking_uri(args.tracking_uri, Path(args.record).parent)
    run_id = tracking.open_parent(uri, args.experiment, args.name, args.record, params, args.artifact)
    print(f"parent run {args.experiment}/{args.name}: {run_id} (record {args.record})")
    return 0


def summarize(args: argparse.Namespace) -> int:
    from atlas_experiments import tracking

    parent_id = tracking.read_parent(args.record)
    summary = tracking.summarize_children(json.loads(Path(args.record).read_text())["uri"], parent_id)
    write_json_atomic(args.out, summary)
    print(f"{len(summary['cells'])} cells under {parent_id}; best: {summary['best']}")
    return 0
