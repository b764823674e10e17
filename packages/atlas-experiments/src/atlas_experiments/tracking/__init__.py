"""MLflow tracking: the only package of the project that imports mlflow (this module, `tracking.store` and
`tracking.parents`).

Design for parallel jobs on one machine: the embedded default tracks into a local
SQLite database, which is not safe for concurrent writers (locked database, racing schema migrations and
experiment creation). Every MLflow call against a `sqlite:` URI therefore runs under an exclusive cross-process
file lock (`<db>.lock`, fcntl), and metrics are buffered and written in batches. Against an HTTP tracking server
no lock is needed. Tracking never stops training: if the store is unreachable the tracker warns, goes quiet, and
the run directory (metrics.jsonl, config, artifacts) stays the source of truth; `atlas track sync` registers it
later (`sync_run_dir`).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from atlas_experiments._io import write_json_atomic

# The run tags used to live here; callers still find them under `tracking`.
from atlas_experiments.provenance import PACKAGES as PACKAGES
from atlas_experiments.provenance import config_sha256 as config_sha256
from atlas_experiments.provenance import git_state as git_state
from atlas_experiments.provenance import standard_tags

# The store, its key rules and the tracker live in `tracking.store`; callers find them here.
from atlas_experiments.tracking.store import CELL_TAG_PREFIX as CELL_TAG_PREFIX
from atlas_experiments.tracking.store import DB_FILE as DB_FILE
from atlas_experiments.tracking.store import EXPERIMENT_KIND_TAG as EXPERIMENT_KIND_TAG
from atlas_experiments.tracking.store import PARENT_TAG as PARENT_TAG
from atlas_experiments.tracking.store import ROLE_TAG as ROLE_TAG
from atlas_experiments.tracking.store import TRACKING_FILE as TRACKING_FILE
from atlas_experiments.tracking.store import TRAINING_KIND as TRAINING_KIND
from atlas_experiments.tracking.store import MlflowTracker as MlflowTracker
from atlas_experiments.tracking.store import Tracker as Tracker
from atlas_experiments.tracking.store import _artifact_root as _artifact_root
from atlas_experiments.tracking.store import _store_lock as _store_lock
from atlas_experiments.tracking.store import absolute_sqlite_uri as absolute_sqlite_uri
from atlas_experiments.tracking.store import flatten as flatten
from atlas_experiments.tracking.store import resolve_tracking_uri as resolve_tracking_uri
from atlas_experiments.tracking.store import sanitize_key as sanitize_key

log = logging.getLogger(__name__)


def open_tracker(
    enabled: bool,
    uri: str,
    experiment: str,
    run_name: str,
    run_dir: Path,
    tags: dict[str, str],
    resume: bool,
) -> Tracker:
    """Start (or, on resume, re-open) the run of `run_dir`; its id is kept in `run_dir/tracking.json`."""
    if not enabled:
        return Tracker()
    record = Path(run_dir) / TRACKING_FILE
    run_id = None
    if resume and record.is_file():
        saved = json.loads(record.read_text())
        if saved.get("uri") == uri:
            run_id = saved.get("run_id")
    try:
        tracker = MlflowTracker(uri, experiment, run_name, tags, run_id=run_id, artifact_root=_artifact_root(uri))
    except Exception as exc:
        log.warning("cannot open MLflow at %s (%s); training continues untracked (atlas track sync later)", uri, exc)
        return Tracker()
    write_json_atomic(record, {"uri": uri, "run_id": tracker.run_id, "experiment": experiment}, indent=None)
    return tracker


def sync_run_dir(run_dir: Path, uri: str, experiment: str | None = None, run_name: str | None = None) -> str:
    """Bring the MLflow record of a finished run directory (config.json, metrics.jsonl, artifacts) up to date.

    When live tracking opened the run at this store (`tracking.json`) and the run still exists, that run is
    completed: the metric steps it lacks are logged (a server that went away mid-run kept only the steps before),
    the artifacts uploaded, and the run marked FINISHED; its parent tag and name stay. Otherwise a new run is
    registered from the directory. Either way the run id is returned and kept in `tracking.json`."""
    from atlas_experiments.train.metrics import read_metrics

    run_dir = Path(run_dir)
    config_path = run_dir / "config.json"
    metrics_path = run_dir / "metrics.jsonl"
    for p in (config_path, metrics_path):
        if not p.is_file():
            raise FileNotFoundError(f"cannot sync {run_dir}: missing {p.name}")
    config = json.loads(config_path.read_text())
    experiment = experiment or config.get("tracking", {}).get("experiment", "pretrain")
    live_id = _live_run_id(run_dir, uri)
    if live_id is not None:
        tracker = MlflowTracker(uri, experiment, run_name or "", run_id=live_id, artifact_root=_artifact_root(uri))
        have = _logged_steps(tracker.client, live_id, uri)
    else:
        tracker = MlflowTracker(
            uri,
            experiment,
            run_name or config.get("tracking", {}).get("run_name") or run_dir.name,
            {**standard_tags(config), "synced_from": str(run_dir.resolve())},
            artifact_root=_artifact_root(uri),
        )
        tracker.log_params(flatten(config))
        have = set()
    for record in read_metrics(metrics_path):
        step = record.get("step", 0)
        values = {
            k: v
            for k, v in record.items()
            if isinstance(v, int | float) and k != "step" and (sanitize_key(k), int(step)) not in have
        }
        tracker.log_metrics(values, step)
    for name in ("config.json", "loss_curve.png", "train.log"):
        if (run_dir / name).is_file():
            tracker.log_artifact(run_dir / name)
    tracker.end("FINISHED")
    if tracker.failed:
        raise RuntimeError(f"could not sync {run_dir} to {uri} (see the warning above)")
    write_json_atomic(
        run_dir / TRACKING_FILE, {"uri": uri, "run_id": tracker.run_id, "experiment": experiment}, indent=None
    )
    return tracker.run_id


def _live_run_id(run_dir: Path, uri: str) -> str | None:
    """The run live tracking opened for `run_dir` at `uri`, if the store still has it."""
    record = run_dir / TRACKING_FILE
    if not record.is_file():
        return None
    saved = json.loads(record.read_text())
    if saved.get("uri") != uri or not saved.get("run_id"):
        return None
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    try:
        with _store_lock(uri):
            MlflowClient(tracking_uri=uri).get_run(saved["run_id"])
    except MlflowException:
        return None  # deleted, or a store recreated since: register the directory afresh
    return str(saved["run_id"])


def _logged_steps(client: Any, run_id: str, uri: str) -> set[tuple[str, int]]:
    """(metric key, step) pairs a run already holds."""
    with _store_lock(uri):
        keys = list(client.get_run(run_id).data.metrics)
        return {(key, m.step) for key in keys for m in client.get_metric_history(run_id, key)}


def load_runs(uri: str, experiments: list[str] | None = None) -> list[dict[str, Any]]:
    """Every run of the given experiments (all when None) as plain dicts: experiment, run_id, run_name, status,
    params, tags, metrics (latest values), start_time. Used by reports, which must not import mlflow."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    from mlflow.tracking import MlflowClient

    with _store_lock(uri):
        client = MlflowClient(tracking_uri=uri)
        exps = client.search_experiments()
        wanted = [e for e in exps if experiments is None or e.name in experiments]
        out = []
        for exp in wanted:
            for run in client.search_runs([exp.experiment_id], max_results=50_000):
                out.append(
                    {
                        "experiment": exp.name,
                        "run_id": run.info.run_id,
                        "run_name": run.info.run_name,
                        "status": run.info.status,
                        "params": dict(run.data.params),
                        "tags": dict(run.data.tags),
                        "metrics": dict(run.data.metrics),
                        "start_time": run.info.start_time,
                    }
                )
    return out


def metric_history(uri: str, run_id: str, key: str) -> list[tuple[int, float]]:
    """(step, value) pairs of one metric of one run, in step order."""
    from mlflow.tracking import MlflowClient

    with _store_lock(uri):
        history = MlflowClient(tracking_uri=uri).get_metric_history(run_id, key)
    return sorted((m.step, m.value) for m in history)


# Parent runs live in their own module (it uses the tracker above); import them from here.
from atlas_experiments.tracking.parents import open_parent, read_parent, summarize_children  # noqa: E402, F401
