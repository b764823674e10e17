"""Parent runs: one per study (an ablation axis, the claims study), its cells nested under it in the MLflow UI.

Part of `atlas_experiments.tracking`, the one module that imports mlflow; import these names from there.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from atlas_experiments._io import write_json_atomic
from atlas_experiments.tracking.store import (
    PARENT_TAG,
    ROLE_TAG,
    MlflowTracker,
    _artifact_root,
    _store_lock,
    flatten,
    sanitize_key,
)


def read_parent(record: str | Path) -> str:
    """The run id kept in a parent record (JSON written by `open_parent`)."""
    path = Path(record)
    try:
        run_id = json.loads(path.read_text())["run_id"]
    except FileNotFoundError as exc:
        raise FileNotFoundError(f"parent-run record {path} does not exist (`atlas track parent` writes it)") from exc
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"parent-run record {path} is not a JSON object with a 'run_id' ({exc})") from exc
    return str(run_id)


def open_parent(
    uri: str,
    experiment: str,
    name: str,
    record: str | Path,
    params: dict[str, Any] | None = None,
    artifacts: list[Path] | None = None,
) -> str:
    """Create the parent run of a study and keep its id in `record`; an existing record for the same store is
    reused, so reruns of a study keep one parent. Children carry `mlflow.parentRunId` (see TrackingConfig.parent).
    Created by one job before its children start, so parallel children never race to create it."""
    record = Path(record)
    if record.is_file():
        saved = json.loads(record.read_text())
        if saved.get("uri") == uri and saved.get("experiment") == experiment:
            return str(saved["run_id"])
    tracker = MlflowTracker(uri, experiment, name, {ROLE_TAG: "parent"}, artifact_root=_artifact_root(uri))
    tracker.log_params(flatten(params or {}))
    for path in artifacts or []:
        tracker.log_artifact(Path(path))
    tracker.end("FINISHED")
    if tracker.failed:
        raise RuntimeError(f"could not write the parent run {experiment}/{name} to {uri}")
    write_json_atomic(
        record, {"uri": uri, "experiment": experiment, "run_name": name, "run_id": tracker.run_id}, indent=None
    )
    return tracker.run_id


def summarize_children(uri: str, parent_id: str, metrics: tuple[str, ...] = ("val_loss", "loss")) -> dict[str, Any]:
    """Log each child's final `metrics` on the parent (as `<metric>/<child run name>`) plus the best child by the
    first metric; returns the summary. Reruns of a child count once (its latest finished record)."""
    from mlflow.entities import Metric, RunTag
    from mlflow.tracking import MlflowClient

    with _store_lock(uri):
        client = MlflowClient(tracking_uri=uri)
        parent = client.get_run(parent_id)
        children = client.search_runs(
            [parent.info.experiment_id], filter_string=f"tags.`{PARENT_TAG}` = '{parent_id}'", max_results=50_000
        )
    latest: dict[str, Any] = {}
    for run in sorted(children, key=lambda r: (r.info.status == "FINISHED", r.info.start_time or 0)):
        latest[run.info.run_name] = run
    cells = {
        name: {m: run.data.metrics.get(m) for m in metrics} | {"status": run.info.status}
        for name, run in sorted(latest.items())
    }
    key = metrics[0]
    ranked = [(c[key], n) for n, c in cells.items() if c[key] is not None and c["status"] == "FINISHED"]
    summary = {"parent": parent_id, "cells": cells, "best": min(ranked)[1] if ranked else None, "metric": key}
    now = int(time.time() * 1000)
    batch = [
        Metric(sanitize_key(f"{m}/{name}"), float(v), now, 0)
        for name, c in cells.items()
        for m, v in c.items()
        if m != "status" and v is not None
    ]
    if ranked:
        batch.append(Metric(f"best_{key}", float(min(ranked)[0]), now, 0))
    tags = [RunTag("best_cell", summary["best"] or "none"), RunTag("cells", str(len(cells)))]
    with _store_lock(uri):
        for i in range(0, len(batch), 1000):
            client.log_batch(parent_id, metrics=batch[i : i + 1000], tags=tags if i == 0 else [])
        if not batch:
            client.log_batch(parent_id, tags=tags)
    return summary
