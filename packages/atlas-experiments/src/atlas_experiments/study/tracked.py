"""A study job's MLflow run, and the runs of results that were written without one.

A tracked job is one run in the experiment `study`, named after the job, tagged with its provenance
(`study.protocol`, `study.arm`, `study.seed`, `study.job`, `study.config_hash`, `study.commit`, `study.finished`,
and `study.shared_from` for a shared run), holding the result's metrics, its learning curves as metric histories
(`curve_history`) and the results JSON and figures as artifacts.

Long stretches run with `--no-track` (a results file per job is the record, and one SQLite store shared by
workers is a lock they need not take), and a GPU machine's call returns results files only. `track_finished`
registers every finished result of a study root that has no run in the store yet, so the whole study can be
browsed in MLflow; a result counts as registered when a run carries its job, config hash and finish time, so the
command can be rerun at any time and adds only what is new (a job rerun since gets a run of its own).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from atlas_experiments.study.plan import Job
from atlas_experiments.study.results import ResultError, load

EXPERIMENT = "study"
IDENTITY_TAGS = ("study.job", "study.config_hash", "study.finished")


def run_tags(job: Job, data: dict[str, Any]) -> dict[str, str]:
    """The tags of a finished job's run, from the job and its result's provenance block."""
    provenance = data.get("study", {})
    tags = {
        "study.protocol": job.protocol.name,
        "study.arm": job.arm.name if job.arm else "all",
        "study.seed": str(job.seed),
        "study.job": job.name,
        "study.config_hash": str(provenance.get("config_hash")),
        "study.commit": str(provenance.get("commit")),
        "study.finished": str(provenance.get("finished")),
    }
    if isinstance(provenance.get("shared"), dict):
        tags["study.shared_from"] = str(provenance["shared"]["job"])
    return tags


def curve_history(data: dict[str, Any]) -> dict[str, list[tuple[int, float]]]:
    """A result's learning curves as MLflow metric histories.

    MQAR: `curve/val_acc/<model>/d=<width>/lr=<lr>`, the validation accuracy at each recorded training step of
    every (width, lr) the job trained. Learnability: `curve/loss/<memory>/<stream>`, the online loss of each
    position bin, the bin's centre rounded down as the step. Other tasks record no curve."""
    details = data.get("details", {})
    out: dict[str, list[tuple[int, float]]] = {}
    for run in details.get("runs", []):
        if isinstance(run, dict) and run.get("curve"):
            key = f"curve/val_acc/{run['model']}/d={run['width']}/lr={run['lr']:g}"
            out[key] = [(int(step), float(value)) for step, value in run["curve"]]
    curves = details.get("curves", {})
    if isinstance(curves, dict):
        for memory, streams in curves.items():
            for stream, curve in streams.items():
                points = zip(curve.get("position", []), curve.get("loss", []))
                out[f"curve/loss/{memory}/{stream}"] = [(math.floor(p), float(v)) for p, v in points]
    return out


def figures_of(job: Job, data: dict[str, Any], root: str | Path) -> list[Path]:
    """The result's figures as they lie beside it under `root` (a result records the paths of the machine that
    wrote it; a committed or returned root is elsewhere)."""
    folder = job.result(root).parent
    names = [Path(f).name for f in data.get("details", {}).get("figures", [])]
    return [folder / name for name in names if (folder / name).is_file()]


def track_job(
    job: Job, data: dict[str, Any], root: str | Path, uri: str | None, parent_id: str | None = None
) -> str | None:
    """One MLflow run for a finished job's result `data` (as `load` returns it); its id, None when the store is
    unreachable (the results file stays the record)."""
    from atlas_experiments import tracking
    from atlas_experiments.evaluation.results import EvalResult, track_result

    result = EvalResult(
        task=data.get("task", job.protocol.task),
        model=data.get("model", job.arm.name if job.arm else "all"),
        metrics=data["metrics"],
        protocol=data.get("protocol", {}),
        deviations=data.get("deviations", []),
        details=data.get("details", {}),
    )
    tags = run_tags(job, data)
    if parent_id:
        tags[tracking.PARENT_TAG] = parent_id
    return track_result(result, uri=uri, results_root=Path(root), experiment=EXPERIMENT,
                        run_name=job.name, tags=tags, artifact=job.result(root), history=curve_history(data),
                        figures=figures_of(job, data, root))  # fmt: skip


@dataclass
class TrackSummary:
    tracked: list[str] = field(default_factory=list)
    already: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)  # the pilot dropped the job: no run to register
    refused: list[str] = field(default_factory=list)  # "path: why", never registered
    failed: list[str] = field(default_factory=list)  # the store did not take the run

    def line(self, uri: str) -> str:
        parts = [f"{len(self.tracked)} tracked", f"{len(self.already)} already in the store"]
        more = (("dropped by the pilot", self.dropped), ("refused", self.refused), ("failed", self.failed))
        parts += [f"{len(items)} {name}" for name, items in more if items]
        return f"study track: {', '.join(parts)} ({uri})"


def registered(uri: str) -> set[tuple[str, ...]]:
    """The identities (job, config hash, finish time) of the study runs in the store. A run tracked before runs
    carried `study.finished` matches any finish time of its job and config."""
    from atlas_experiments import tracking

    out = set()
    for run in tracking.load_runs(uri, [EXPERIMENT]):
        tags = run["tags"]
        job = tags.get("study.job", run["run_name"])
        out.add((job, tags.get("study.config_hash", ""), tags.get("study.finished", "*")))
    return out


def track_finished(jobs: Iterable[Job], root: str | Path, uri: str, parent_id: str | None = None,
                   progress: bool = True) -> TrackSummary:  # fmt: skip
    """Register every finished result among `jobs` under `root` that has no run in the store at `uri`."""
    from tqdm.auto import tqdm

    summary = TrackSummary()
    try:
        known = registered(uri)
    except Exception as exc:  # an unreachable server or a broken store: nothing is registered, say where
        raise ValueError(f"cannot read the study runs of the MLflow store at {uri}: {exc}") from exc
    unique = {job.name: job for job in jobs}
    done = [job for job in unique.values() if job.result(root).is_file()]
    for job in tqdm(done, desc="study runs", unit="run", disable=not progress):
        try:
            data = load(job, root)
        except ResultError as exc:
            summary.refused.append(str(exc))
            continue
        if "skipped" in data:
            summary.dropped.append(job.name)
            continue
        ident = tuple(run_tags(job, data)[k] for k in IDENTITY_TAGS)
        if ident in known or (*ident[:2], "*") in known:
            summary.already.append(job.name)
            continue
        if track_job(job, data, root, uri, parent_id) is None:
            summary.failed.append(job.name)
        else:
            summary.tracked.append(job.name)
            known.add(ident)
    return summary
