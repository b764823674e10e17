"""The MLflow store and the tracker of one run: key rules, the cross-process lock on SQLite stores, the tags, and
`MlflowTracker`. Part of `atlas_experiments.tracking` (the package docstring has the design); import these names from
the package. Apart from it so that `tracking.parents` builds on it without importing the package that re-exports it.
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

log = logging.getLogger("atlas_experiments.tracking")

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
# an ablation cell's settings, one tag per key of its table row (`atlas.cell.window` = "4"): reports read them here
CELL_TAG_PREFIX = "atlas.cell."


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


def _artifact_root(uri: str) -> Path | None:
    return Path(uri.split("///", 1)[-1]).parent / "mlartifacts" if uri.startswith("sqlite:") else None
