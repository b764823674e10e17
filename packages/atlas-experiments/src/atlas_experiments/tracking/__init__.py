"""MLflow tracking: the only package of the project that imports mlflow (this module and `tracking.parents`).

Design for parallel jobs on one machine: the embedded default tracks into a local
SQLite database, which is not safe for concurrent writers (locked database, racing schema migrations and
experiment creation). Every MLflow call against a `sqlite:` URI therefore runs under an exclusive cross-process
file lock (`<db>.lock`, fcntl), and metrics are buffered and written in batches. Against an HTTP tracking server
no lock is needed. Tracking never stops training: if the store is unreachable the tracker warns, goes quiet, and
the run directory (metrics.jsonl, config, artifacts) stays the source of truth; `atlas track sync` registers it
later (`sync_run_dir`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from atlas_experiments._io import write_json_atomic

# The run tags used to live here; callers still find them under `tracking`.
from atlas_experiments.provenance import PACKAGES as PACKAGES
from atlas_experiments.provenance import config_sha256 as config_sha256
from atlas_experiments.provenance import git_state as git_state
from atlas_experiments.provenance import standard_tags

log = logging.getLogger(__name__)

_BAD_KEY_CHARS = re.compile(r"[^0-9A-Za-z_\-./ ]")
TRACKING_FILE = "tracking.json"
DB_FILE = "mlflow.db"  # the default store: SQLite under the results directory


def sanitize_key(name: str) -> str:
    """MLflow metric/param names: no commas or other characters outside [A-Za-z0-9_-./ ] (lm-eval's 'acc,none')."""
    return _BAD_KEY_CHARS.sub("_", name)


def resolve_tracking_uri(cli_value: str | None, results_dir: str | Path | None = None, *, absolute: bool = True) -> str:
    """The tracking URI, the same rule for `atlas train`, every `atlas eval`, `atlas report`, `atlas track` and the
    workflow: `cli_value` (the `--tracking-uri` flag, or a TrainConfig's `tracking.uri`), else
    $MLFLOW_TRACKING_URI, else `sqlite:///<results_dir>/mlflow.db` (`results_dir` None: the working directory).

    A relative SQLite path counts from the working directory and is made absolute here, when the job runs, so the
    run records (`tracking.json`, parent records) name one database wherever they are read from. The workflow
    resolves with `absolute=False`: its rule parameters keep the relative path, and a moved checkout (or a
    `--directory` elsewhere) reruns nothing."""
    uri = cli_value or os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path(results_dir or '.') / DB_FILE}"
    return absolute_sqlite_uri(uri) if absolute else uri


def absolute_sqlite_uri(uri: str) -> str:
    """`sqlite:///relative/path` -> `sqlite:////abs/path` (against the working directory); any other URI as is."""
    if not uri.startswith("sqlite:///"):
        return uri
    path, sep, query = uri.removeprefix("sqlite:///").partition("?")
    if not path or path.startswith("/") or path == ":memory:":
        return uri
    return f"sqlite:///{Path(path).resolve()}{sep}{query}"


def flatten(d: Any, prefix: str = "") -> dict[str, str]:
    """Nested config -> {'optim.lr': '0.0004', ...} (strings, as MLflow params are)."""
    out: dict[str, str] = {}
    if isinstance(d, dict):
        for k, v in d.items():
            out.update(flatten(v, f"{prefix}{k}."))
    else:
        out[prefix[:-1]] = json.dumps(d) if isinstance(d, list | tuple) else str(d)
    return out


@contextlib.contextmanager
def _store_lock(uri: str) -> Iterator[None]:
    if not uri.startswith("sqlite:"):
        yield
        return
    db = Path(uri.split("///", 1)[-1])
    db.parent.mkdir(parents=True, exist_ok=True)
    with open(db.with_name(db.name + ".lock"), "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


# Run tags: a nested run's parent, the experiment kind, and our role tag (a study's parent run is "parent").
PARENT_TAG = "mlflow.parentRunId"
# MLflow 3's UI opens an experiment without this tag in its GenAI (traces) view; these are training runs
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
TRAINING_KIND = "custom_model_development"
ROLE_TAG = "atlas.role"


class Tracker:
    """No-op tracker (tracking disabled, or a non-zero rank)."""

    run_id: str | None = None

    def log_params(self, params: dict[str, Any]) -> None: ...

    def log_metrics(self, metrics: dict[str, float], step: int) -> None: ...

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None: ...

    def set_tags(self, tags: dict[str, str]) -> None: ...

    def flush(self) -> None: ...

    def end(self, status: str = "FINISHED") -> None: ...


class MlflowTracker(Tracker):
    """One MLflow run, driven through `MlflowClient` with an explicit run id (no global active run, so nothing
    leaks to child processes through MLFLOW_RUN_ID).

    An experiment it creates in a SQLite store keeps its artifacts next to the database (`artifact_root`, by
    default `<db dir>/mlartifacts`), never in MLflow's default `./mlruns` under whatever the working directory
    happens to be."""

    def __init__(
        self,
        uri: str,
        experiment: str,
        run_name: str,
        tags: dict[str, str] | None = None,
        run_id: str | None = None,
        artifact_root: Path | None = None,
        flush_every_s: float = 10.0,
    ) -> None:
        os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
        # MLflow's defaults retry a dead server for minutes; a training job should find out fast and go on.
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "3")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
        from mlflow.tracking import MlflowClient

        self.uri = uri
        self.flush_every_s = flush_every_s
        self._buffer: list[Any] = []
        self._last_flush = time.monotonic()
        self.failed = False
        if artifact_root is None:
            artifact_root = _artifact_root(uri)
        with _store_lock(uri):
            self.client = MlflowClient(tracking_uri=uri)
            exp = self.client.get_experiment_by_name(experiment)
            if exp is None:
                location = None
                if artifact_root is not None and uri.startswith("sqlite:"):
                    location = (Path(artifact_root).resolve() / experiment).as_uri()
                exp_id = self.client.create_experiment(
                    experiment, artifact_location=location, tags={EXPERIMENT_KIND_TAG: TRAINING_KIND}
                )
            else:
                exp_id = exp.experiment_id
            if run_id is not None:
                self.client.update_run(run_id, status="RUNNING")
                self.run_id = run_id
            else:
                self.run_id = self.client.create_run(exp_id, run_name=run_name, tags=tags or {}).info.run_id

    def _guard(self, what: str, fn, *args, **kwargs) -> None:
        if self.failed:
            return
        try:
            with _store_lock(self.uri):
                fn(*args, **kwargs)
        except Exception as exc:  # tracking must never stop training
            self.failed = True
            log.warning("MLflow %s failed (%s); tracking stops, metrics.jsonl keeps the record", what, exc)

    def log_params(self, params: dict[str, Any]) -> None:
        from mlflow.entities import Param

        items = [Param(sanitize_key(k), str(v)[:6000]) for k, v in sorted(params.items())]
        for i in range(0, len(items), 100):
            self._guard("log_params", self.client.log_batch, self.run_id, params=items[i : i + 100])

    def set_tags(self, tags: dict[str, str]) -> None:
        from mlflow.entities import RunTag

        self._guard("set_tags", self.client.log_batch, self.run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        for k, v in metrics.items():
            if v is not None:
                self._buffer.append(Metric(sanitize_key(k), float(v), now, int(step)))
        if time.monotonic() - self._last_flush >= self.flush_every_s:
            self.flush()

    def flush(self) -> None:
        while self._buffer:
            chunk, self._buffer = self._buffer[:1000], self._buffer[1000:]
            self._guard("log_metrics", self.client.log_batch, self.run_id, metrics=chunk)
        self._last_flush = time.monotonic()

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        path = Path(path)
        fn = self.client.log_artifacts if path.is_dir() else self.client.log_artifact
        self._guard("log_artifact", fn, self.run_id, str(path), artifact_path)

    def end(self, status: str = "FINISHED") -> None:
        self.flush()
        self._guard("end", self.client.set_terminated, self.run_id, status)


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


def _artifact_root(uri: str) -> Path | None:
    return Path(uri.split("///", 1)[-1]).parent / "mlartifacts" if uri.startswith("sqlite:") else None


# Parent runs live in their own module (it uses the tracker above); import them from here.
from atlas_experiments.tracking.parents import open_parent, read_parent, summarize_children  # noqa: E402, F401
