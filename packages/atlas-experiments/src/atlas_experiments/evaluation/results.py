"""The results file every `atlas eval` subcommand writes, and its MLflow record.

A results JSON is written atomically and holds: the task, the model (checkpoint path or config), the metrics
(flat name -> number; per-length/depth cells as `acc/len=1024/depth=0.5`), the protocol actually run, and the
list of deviations from the paper's protocol (sizes, lengths, sweeps reduced for CPU). The same metrics go to
MLflow (names sanitised) with the deviations as tags, in one run per evaluation under the experiment `eval`
(or the caller's).
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from atlas_experiments._io import write_json_atomic

log = logging.getLogger("atlas.eval")


@dataclass
class EvalResult:
    task: str
    model: str
    metrics: dict[str, float]
    protocol: dict[str, Any] = field(default_factory=dict)
    deviations: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "model": self.model,
            "metrics": self.metrics,
            "protocol": self.protocol,
            "deviations": self.deviations,
            "details": self.details,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }


def model_label(model: str) -> str:
    """A readable name of an evaluated model: `.../runs/<study>/<run>/checkpoints/final` -> `<study>/<run>`;
    anything else (a preset, a config file) by its last path component."""
    parts = Path(model).parts
    if "runs" in parts and len(parts) > parts.index("runs") + 2:
        i = parts.index("runs")
        return "/".join(parts[i + 1 : i + 3])
    return Path(model).name or model


def write_result(result: EvalResult, path: str | Path) -> Path:
    """Write the results JSON atomically (temp file + rename)."""
    return write_json_atomic(path, result.to_dict())


def track_result(
    result: EvalResult,
    *,
    uri: str | None,
    results_root: Path,
    experiment: str = "eval",
    run_name: str | None = None,
    tags: dict[str, str] | None = None,
    artifact: Path | None = None,
    history: dict[str, list[tuple[int, float]]] | None = None,
    figures: Sequence[Path] = (),
) -> str | None:
    """Log one evaluation as an MLflow run; returns its id (None when tracking is unreachable). `history`: metrics
    logged step by step (a learning curve: {key: [(step, value), ...]}); `figures`: more files for the run's
    artifacts, beside the results JSON `artifact`."""
    from atlas_experiments import tracking

    uri = tracking.resolve_tracking_uri(uri, results_root)
    all_tags = {
        "task": result.task,
        "model": result.model,
        "deviations": "; ".join(result.deviations) or "none",
        **{f"protocol.{k}": str(v) for k, v in tracking.flatten(result.protocol).items()},
        **(tags or {}),
    }
    try:
        name = run_name or f"{result.task}:{model_label(result.model)}"
        tracker = tracking.MlflowTracker(uri, experiment, name, all_tags)
    except Exception:  # tracking never fails an evaluation; the JSON is the record
        return None
    tracker.log_metrics(result.metrics, step=0)
    for key, points in (history or {}).items():
        for step, value in points:
            tracker.log_metrics({key: value}, step=step)
    for path in [artifact, *figures]:
        if path is not None and Path(path).is_file():
            tracker.log_artifact(Path(path))
    tracker.end("FINISHED")
    return tracker.run_id


def add_output_options(p: argparse.ArgumentParser, default_out: str | None = None) -> None:
    """The "output" group of every `atlas eval` command: what `finish` reads, and progress bars. Without
    `default_out`, --out is required."""
    o = p.add_argument_group("output")
    if default_out is None:
        o.add_argument("--out", required=True, help="results JSON to write (figures go next to it)")
    else:
        o.add_argument(
            "--out", default=default_out, help=f"results JSON (figures go next to it; default {default_out})"
        )
    o.add_argument("--tracking-uri", help="MLflow URI (default $MLFLOW_TRACKING_URI or sqlite next to --out)")
    o.add_argument("--experiment", default="eval", help="MLflow experiment (default eval)")
    o.add_argument("--no-track", action="store_true", help="write the JSON only, no MLflow run")
    o.add_argument("--no-progress", action="store_true", help="no progress bars")


def finish(
    result: EvalResult,
    args: argparse.Namespace,
    *,
    artifact: Path | None = None,
    figures: Sequence[Path] = (),
    run_name: str | None = None,
) -> int:
    """How every `atlas eval` command ends: write the results JSON (`--out`), log the MLflow run (unless
    `--no-track`; `artifact` is the file it keeps, the JSON by default), print where things went."""
    out = write_result(result, args.out)
    if not args.no_track:
        os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
        run_id = track_result(
            result,
            uri=args.tracking_uri,
            results_root=out.parent,
            experiment=args.experiment,
            run_name=run_name,
            artifact=artifact if artifact is not None else out,
        )
        if run_id is None:
            log.warning("MLflow tracking unavailable; %s is the record", out)
        else:
            print(f"mlflow run: {run_id}")
    for path in figures:
        print(f"figure: {path}")
    print(f"results: {out}")
    return 0
