"""The study's jobs: which (protocol, arm, seed) runs the registered claims need at a scale, the `atlas eval`
command of each, and where its metric value sits in the result (docs/study.md, "Running the study").

A job is one command of the product (`atlas eval mqar | mad | learnability`, run in-process from its options), so the
study measures exactly what a user runs; an arm that is a model (a preset plus overrides) becomes a model file for
`--models`, an arm that selects a cell of a task (a learnability stream) shares its seed's run with the other cells.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from atlas_experiments._io import write_text_atomic
from atlas_experiments.study._fields import thaw
from atlas_experiments.study.claims import Arm, Claim, Protocol, Registry

# the tasks a job can run (`lm`: pretraining on a prepared corpus, the GPU panel's task; study/execute.py)
JOB_TASKS = ("mqar", "mad", "learnability", "lm")


@dataclass(frozen=True)
class Job:
    """One run of the study: `protocol` for `arm` (None: every cell of a select task) with `seed`."""

    protocol: Protocol
    arm: Arm | None
    seed: int

    @property
    def name(self) -> str:
        return f"{self.protocol.name}/{self.arm.name if self.arm else 'all'}/seed{self.seed}"

    def result(self, root: str | Path) -> Path:
        return Path(root) / f"{self.name}.json"

    def model_file(self, root: str | Path) -> Path | None:
        return None if self.arm is None else Path(root) / "arms" / f"{self.arm.name}.json"

    def options(
        self, root: str | Path, *, overrides: Mapping[str, Any] | None = None, out: str | Path | None = None
    ) -> dict[str, Any]:
        """The options of `atlas eval <task>` for this job, writing to `out` (default: the result path);
        `overrides` replace protocol options (the pilot's short runs)."""
        options = {**thaw(self.protocol.args), **(overrides or {})}
        if self.arm is not None:
            options["models"] = str(self.model_file(root))
            if self.protocol.size:
                options["size"] = self.protocol.size
        return {**options, "seed": self.seed, "out": str(out or self.result(root))}

    def argv(self, root: str | Path, **kwargs: Any) -> list[str]:
        """The job as a command line, `atlas eval <task> ...` (to rerun it by hand)."""
        from atlas_experiments.commands.options import option_argv

        return ["eval", self.protocol.task, *option_argv(self.options(root, **kwargs))]


def model_spec(arm: Arm) -> dict[str, Any]:
    """The `--models` file of a model arm: its preset and overrides under its own name (the metrics' label)."""
    return {"name": arm.name, "preset": arm.preset, "overrides": arm.config_overrides()}


def write_model_files(jobs: Iterable[Job], root: str | Path) -> None:
    for job in jobs:
        path = job.model_file(root)
        if path is not None:
            write_text_atomic(path, json.dumps(model_spec(job.arm), indent=2, sort_keys=True))


def planned_claims(registry: Registry, scales: Iterable[str]) -> list[Claim]:
    """The testable claims whose protocol runs at one of `scales` on a task a job can run."""
    scales = set(scales)
    out = []
    for claim in registry.claims:
        protocol = registry.protocol_of(claim)
        if claim.testable and protocol is not None and protocol.scale in scales and protocol.task in JOB_TASKS:
            out.append(claim)
    return out


def plan_jobs(registry: Registry, scales: Iterable[str]) -> list[Job]:
    """Every job the planned claims need, once each (claims that share a protocol and arm share its runs)."""
    jobs: dict[str, Job] = {}
    for claim in planned_claims(registry, scales):
        protocol = registry.protocol_of(claim)
        for arm in claim.arms:
            for seed in protocol.seeds:
                job = Job(protocol, None if arm.select else arm, seed)
                jobs.setdefault(job.name, job)
    return list(jobs.values())


def select_claims(claims: Sequence[Claim], patterns: str | None) -> list[Claim]:
    """The claims whose id matches one of the comma-separated glob `patterns` (`mqar_v2.*`, `mqar_v2.deep_memory`);
    all of them when `patterns` is empty. A pattern that matches no claim is an error naming it."""
    wanted = [p.strip() for p in (patterns or "").split(",") if p.strip()]
    if not wanted:
        return list(claims)
    unmatched = [p for p in wanted if not any(fnmatchcase(c.id, p) for c in claims)]
    if unmatched:
        raise ValueError(f"--claim: no planned claim matches {', '.join(repr(p) for p in unmatched)} "
                         "(see `atlas study plan --progress`)")  # fmt: skip
    return [c for c in claims if any(fnmatchcase(c.id, p) for p in wanted)]


def jobs_of_claims(claims: Iterable[Claim], registry: Registry, jobs: Sequence[Job]) -> list[Job]:
    """The jobs of `jobs` (the plan) that `claims` need, in plan order."""
    needed = {job.name for claim in claims for job in claim_jobs(claim, registry)}
    return [job for job in jobs if job.name in needed]


def claim_jobs(claim: Claim, registry: Registry) -> list[Job]:
    """The jobs a claim's verdict needs (shared cells of a select task count once)."""
    protocol = registry.protocol_of(claim)
    jobs = {}
    for arm in claim.arms:
        for seed in protocol.seeds:
            job = Job(protocol, None if arm.select else arm, seed)
            jobs.setdefault(job.name, job)
    return list(jobs.values())


def progress(claim: Claim, registry: Registry, missing: list[str]) -> str:
    """'k of n jobs done; missing: ...' for a claim that cannot be judged yet."""
    total = len(claim_jobs(claim, registry))
    gaps = list(dict.fromkeys(missing))
    return f"{total - len(gaps)} of {total} jobs done; missing: {', '.join(gaps)}"


def metric_key(claim: Claim, protocol: Protocol, arm: Arm) -> str:
    """Where a claim's metric for `arm` sits in its job's results (`metrics` of the results JSON)."""
    if protocol.task == "mqar":
        if claim.metric.name != "accuracy":
            raise ValueError(f"{claim.id}: mqar jobs report accuracy, not {claim.metric.name!r}")
        key = f"acc/{arm.name}/d={protocol.args['width']}"
        # no cell: the mean over the trained settings; a cell: one scored setting (a test-only one for extrapolation)
        return f"{key}/{claim.metric.cell}" if claim.metric.cell else key
    if protocol.task == "mad":
        if claim.metric.name != "accuracy":
            raise ValueError(f"{claim.id}: mad jobs report accuracy, not {claim.metric.name!r}")
        return f"acc/{arm.name}/{claim.metric.cell}"  # the task's score: the mean over its settings
    if protocol.task == "lm":
        return f"{claim.metric.name}/{arm.name}"
    if protocol.task == "learnability":
        from atlas_experiments.evaluation.learnability import memory_label, setting_label

        layers, expansion = (int(v) for v in str(arm.select["memory"]).split("x"))
        return f"{claim.metric.name}/{memory_label(layers, expansion)}/{setting_label(arm.select['setting'])}"
    raise ValueError(f"{claim.id}: no job runs task {protocol.task!r}")
