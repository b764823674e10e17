"""Jobs of two protocols that compute the same numbers run once (docs/study.md, "Shared runs").

Two registered jobs can be one computation under two names: `mqar_v2_cpu/atlas_w0/seed70` (no memory matching) and
`mqar_v2_fig7_cpu/atlas_w0/seed70` (every arm sized to Atlas's memory) train the same model, since sizing Atlas to
its own memory changes nothing. A job's *run fingerprint* hashes what its command computes from, resolved: the
task's protocol but for `match_memory`, which acts only through the model configs, the model config of every
(model, width) after memory sizing, the metrics' labels, the seed, the device and the thread count. When a finished
job has the fingerprint of a job about to run, `atlas study run` writes the second job's result from the first's
instead of training again: the same metrics and details, the second job's own provenance (its config hash, so it
loads as its own), and a `study.shared` block naming the job that computed it. Only MQAR jobs get a fingerprint
(the one task whose registered protocols have such twins); every other job always runs.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from atlas_experiments._io import write_json_atomic
from atlas_experiments.study.claims import Arm, Protocol
from atlas_experiments.study.plan import Job, write_model_files
from atlas_experiments.study.results import ResultError, config_hash, load

# tasks whose jobs get a run fingerprint
SHARED_TASKS = ("mqar",)


def arm_fingerprint(protocol: Protocol, arm: Arm | None) -> str | None:
    """The run fingerprint of every seed of (protocol, arm) but for the seed itself (module docstring); None for a
    task without one."""
    if protocol.task not in SHARED_TASKS or arm is None:
        return None
    key = config_hash(Job(protocol, arm, 0))
    if key not in _FINGERPRINTS:
        _FINGERPRINTS[key] = _fingerprint(protocol, arm)
    return _FINGERPRINTS[key]


# {registered configuration of seed 0: fingerprint}; resolving one builds every candidate memory size's model
_FINGERPRINTS: dict[str, str] = {}


def _fingerprint(protocol: Protocol, arm: Arm) -> str:
    from atlas_experiments.commands.eval import task_parser
    from atlas_experiments.commands.options import options_namespace
    from atlas_experiments.evaluation.mqar import trained_models
    from atlas_experiments.evaluation.synthetic_train import parse_models
    from atlas_experiments.evaluation.tasks.mqar import protocol_from_args

    job = Job(protocol, arm, 0)
    with tempfile.TemporaryDirectory() as root:  # the arm's model file, as a run reads it
        write_model_files([job], root)
        where = f"protocols.{protocol.name}.args"
        args = options_namespace(task_parser(protocol.task), job.options(root), where=where)
        models = parse_models(args.models, args.size)
    task = protocol_from_args(args)
    spec = {
        "task": protocol.task,
        "protocol": {k: v for k, v in asdict(task).items() if k != "match_memory"},
        "models": trained_models(models, task),
        "device": args.device,
        "threads": args.threads,
    }
    return hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()[:16]


def may_be_twins(a: Job, b: Job) -> bool:
    """Whether two jobs can share a run at all, before any fingerprint: other jobs of the same task, seed and arm name
    (the metrics' labels are part of the fingerprint)."""
    same = a.protocol.task == b.protocol.task and a.seed == b.seed and a.arm is not None and b.arm is not None
    return same and a.name != b.name and a.arm.name == b.arm.name


def find_twin(job: Job, jobs: Sequence[Job], root: str | Path) -> Job | None:
    """A finished job of `jobs` (not `job`) whose run computes what `job` would; None if there is none."""
    candidates = [other for other in jobs if may_be_twins(job, other)]
    mine = arm_fingerprint(job.protocol, job.arm) if candidates else None
    if mine is None:
        return None
    for other in candidates:
        if arm_fingerprint(other.protocol, other.arm) != mine:
            continue
        try:
            data = load(other, root)
        except (FileNotFoundError, ResultError):
            continue
        if "skipped" not in data:
            return other
    return None


def share(job: Job, twin: Job, root: str | Path) -> Path:
    """Write `job`'s result from its finished twin's (atomically): its metrics and details, `job`'s provenance, and
    `study.shared` naming the job whose run computed them (the first one, if the twin itself was shared)."""
    data = load(twin, root)
    source = data["study"]
    origin = source.get("shared") or {"job": twin.name, "config_hash": source["config_hash"]}
    out: dict[str, Any] = {k: v for k, v in data.items() if k != "study"}
    out["study"] = {
        "job": job.name,
        "config_hash": config_hash(job),
        "seed": job.seed,
        "commit": source.get("commit"),  # the code that computed the numbers
        "wall_s": 0.0,
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "shared": {**origin, "fingerprint": arm_fingerprint(job.protocol, job.arm)},
    }
    return write_json_atomic(job.result(root), out)


def shared_from(data: dict[str, Any]) -> str | None:
    """The job whose run a result shares, or None for a result its own job computed."""
    block = data.get("study", {}).get("shared")
    return block.get("job") if isinstance(block, dict) else None
