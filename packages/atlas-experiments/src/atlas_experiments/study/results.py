"""A study job's result file: written once, atomically, with its provenance; read back only if it is the job's own.

A job's command writes its results to a partial file next to the final one; `finalize` adds the provenance block

    "study": {"job", "config_hash", "seed", "commit", "wall_s", "finished"}

and renames the complete file into place, so a result file exists only for a job that ran to the end. A kill -9 at
any moment leaves either nothing or the partial file, and the job simply runs again (every job is deterministic in
its seed). `load` refuses a file that is not valid JSON, has no provenance, or whose `config_hash` differs from the
job's registered configuration (a result of another protocol, arm, seed or argument set): `ResultError` names the
path and why, and the report lists the file instead of judging it.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

from atlas_experiments._io import write_json_atomic
from atlas_experiments.study._fields import thaw
from atlas_experiments.study.claims import Claim, Registry
from atlas_experiments.study.plan import Job, metric_key

PARTIAL_SUFFIX = ".partial.json"


class ResultError(ValueError):
    """A result file that must not be judged: unreadable, without provenance, or another job's."""


def config_hash(job: Job) -> str:
    """sha256 (first 16 hex digits) of everything that determines the job's result: its protocol's task, size,
    model overrides and arguments, the arm's preset, overrides or selected cell, and the seed."""
    spec = {
        "protocol": job.protocol.name,
        "task": job.protocol.task,
        "size": job.protocol.size,
        "model_overrides": thaw(job.protocol.model_overrides),
        "args": thaw(job.protocol.args),
        "arm": None if job.arm is None else {"name": job.arm.name, "preset": job.arm.preset,
                                             "overrides": thaw(job.arm.overrides), "select": thaw(job.arm.select)},
        "seed": job.seed,
    }  # fmt: skip
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def partial_path(job: Job, root: str | Path) -> Path:
    return job.result(root).with_suffix(PARTIAL_SUFFIX)


def finalize(job: Job, root: str | Path, wall_s: float) -> Path:
    """Add the provenance block to the job's partial results and move them into place (atomically)."""
    from atlas_experiments.provenance import commit_label

    partial = partial_path(job, root)
    data = json.loads(partial.read_text())
    data["study"] = {
        "job": job.name,
        "config_hash": config_hash(job),
        "seed": job.seed,
        "commit": commit_label(),
        "wall_s": round(wall_s, 1),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    data.setdefault("details", {})["figures"] = _final_figures(
        data.get("details", {}).get("figures", []), partial, job.result(root)
    )
    out = write_json_atomic(job.result(root), data)
    partial.unlink(missing_ok=True)
    return out


def _final_figures(figures: list[str], partial: Path, final: Path) -> list[str]:
    """The command named its figures after the partial file (`seed3.partial.png`): give them the result's name
    (`seed3.png`), so that what sits beside a finished result does not read as unfinished."""
    stem, renamed = partial.name.removesuffix(".json"), []
    for figure in map(Path, figures):
        if figure.parent == partial.parent and figure.name.startswith(stem) and figure.is_file():
            target = figure.with_name(final.stem + figure.name[len(stem) :])
            figure.replace(target)
            figure = target
        renamed.append(str(figure))
    return renamed


def load(job: Job, root: str | Path) -> dict[str, Any]:
    """The job's results, or `ResultError` (with the path) for a file that is not this job's complete result.
    `FileNotFoundError` when the job has not finished."""
    path = job.result(root)
    text = path.read_text()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResultError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from exc
    if not isinstance(data, dict):
        raise ResultError(f"{path}: expected a JSON object, got {type(data).__name__}")
    if "skipped" in data:
        return data
    block = data.get("study")
    if not isinstance(block, dict) or "config_hash" not in block:
        raise ResultError(f"{path}: no study provenance block (not written by `atlas study run`)")
    want = config_hash(job)
    if block["config_hash"] != want or block.get("job") != job.name:
        raise ResultError(f"{path}: written for {block.get('job')!r} with config {block['config_hash']}, but "
                          f"{job.name} is registered with config {want}: a foreign result")  # fmt: skip
    if not isinstance(data.get("metrics"), dict):
        raise ResultError(f"{path}: no metrics")
    return data


def finished(job: Job, root: str | Path) -> bool:
    """True when the job has a complete result of its own, False when it has none. A file that is not its own
    raises `ResultError`: the job does not run over it (that could destroy another job's result) until someone
    removes it."""
    try:
        load(job, root)
    except FileNotFoundError:
        return False
    return True


def arm_values(claim: Claim, registry: Registry, root: str | Path) -> tuple[dict[str, dict[int, float]], list[str]]:
    """{arm: {seed: metric value}} of a claim from its jobs' results, and the jobs whose results are missing (or
    refused: `study.results.load`)."""
    protocol = registry.protocol_of(claim)
    values: dict[str, dict[int, float]] = {}
    missing = []
    for arm in claim.arms:
        for seed in protocol.seeds:
            job = Job(protocol, None if arm.select else arm, seed)
            try:
                data = load(job, root)
            except FileNotFoundError:
                missing.append(job.name)
                continue
            except ResultError as exc:  # never judged: listed with its path and why
                missing.append(f"{job.name} (refused: {exc})")
                continue
            if "skipped" in data:
                missing.append(f"{job.name} ({data['skipped']})")
                continue
            metrics = data["metrics"]
            key = metric_key(claim, protocol, arm)
            # a diverged run leaves its metric out of the results: NaN, which the rule treats as a failed seed
            values.setdefault(arm.name, {})[seed] = float(metrics.get(key, float("nan")))
    return values, missing
