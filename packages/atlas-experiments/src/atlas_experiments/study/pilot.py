"""The study's pilot: time every (protocol, arm) on two short runs, project the whole plan, refuse what does not fit.

A job's time is modelled as fixed + per_unit x units, where the unit is the task's cost knob (MQAR: training
steps, as for MAD; learnability: stream positions). Two short runs of the same command (units a < b) give
per_unit = (t_b - t_a) / (b - a) and fixed = t_a - a x per_unit; every seed of the arm costs the same. Each arm
first runs once at size a untimed: the first run in the process (and of an arm) pays one-time costs (imports,
thread pools, first allocations) that once made t_a exceed t_b and projected a 490 s Atlas job at 15 s. Where
t_b <= t_a all the same, the fit is noise; per_unit = t_b / b (fixed 0) then bounds the cost from above. The plan's
wall time on `cores` single-threaded workers is bounded below by both the summed job time / cores and the longest
job: the pilot reports the larger (`projected_wall_s`) and refuses a plan over the budget, naming the costliest
arms. The pilot's own runs write to a scratch folder, never to the study's results.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from atlas_experiments._io import write_text_atomic
from atlas_experiments.study.plan import Job

# the cost knob per task and the two short sizes the pilot runs
KNOBS: dict[str, tuple[str, int, int]] = {
    "mqar": ("steps", 4, 12),
    "mad": ("steps", 4, 12),
    "learnability": ("seq_len", 128, 384),
    "lm": ("steps", 2, 6),  # GPU minutes are the scarce resource of the panel
}
# the options that keep a pilot run short without changing its per-unit cost
SHORT: dict[str, dict[str, Any]] = {
    "mqar": {"test_examples": 16},
    "mad": {"test_examples": 16},
    "learnability": {"repeats": 1},
    "lm": {},
}


class BudgetError(RuntimeError):
    """The projected plan exceeds the budget; the message gives the numbers."""


@dataclass(frozen=True)
class Timing:
    protocol: str
    arm: str
    knob: str
    units: int  # what one real job runs (its knob's value)
    jobs: int  # seeds
    fixed_s: float
    per_unit_s: float

    @property
    def job_s(self) -> float:
        return self.fixed_s + self.per_unit_s * self.units

    @property
    def total_s(self) -> float:
        return self.job_s * self.jobs


Runner = Callable[[Job, Path, dict[str, Any]], Any]


def timed(run: Runner, job: Job, root: Path, overrides: dict[str, Any]) -> float:
    start = time.perf_counter()
    run(job, root, overrides)
    return time.perf_counter() - start


def measure(jobs: Sequence[Job], run: Runner) -> list[Timing]:
    """Time two short runs of each (protocol, arm) of `jobs` with `run(job, scratch root, option overrides)`
    (`study.execute.run_job`)."""
    groups: dict[tuple[str, str], list[Job]] = {}
    for job in jobs:
        groups.setdefault((job.protocol.name, job.arm.name if job.arm else "all"), []).append(job)
    scratch = Path(tempfile.mkdtemp(prefix="atlas-pilot-"))
    try:
        timings = []
        for (protocol, arm), group in groups.items():
            job = group[0]
            task = job.protocol.task
            knob, a, b = KNOBS[task]
            run(job, scratch, {**SHORT[task], knob: a})  # warm-up, not timed
            t_a = timed(run, job, scratch, {**SHORT[task], knob: a})
            t_b = timed(run, job, scratch, {**SHORT[task], knob: b})
            if t_b > t_a:
                per_unit = (t_b - t_a) / (b - a)
                fixed = max(0.0, t_a - a * per_unit)
            else:
                per_unit, fixed = t_b / b, 0.0
            units = int(job.protocol.args.get(knob, 0))
            timings.append(Timing(protocol, arm, knob, units, len(group), fixed, per_unit))
        return timings
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def project(timings: Sequence[Timing], cores: int) -> dict[str, Any]:
    total = sum(t.total_s for t in timings)
    longest = max((t.job_s for t in timings), default=0.0)
    return {
        "cores": cores,
        "jobs": sum(t.jobs for t in timings),
        "total_job_s": round(total, 1),
        "longest_job_s": round(longest, 1),
        "projected_wall_s": round(max(total / max(1, cores), longest), 1),
        "timings": [{**asdict(t), "job_s": round(t.job_s, 2), "total_s": round(t.total_s, 1)} for t in timings],
    }


def check_budget(plan: dict[str, Any], budget_minutes: float) -> None:
    """Raise `BudgetError` when the projected wall time exceeds the budget, naming the costliest arms."""
    wall = plan["projected_wall_s"]
    if wall <= budget_minutes * 60:
        return
    costly = sorted(plan["timings"], key=lambda t: -t["total_s"])[:5]
    rows = "; ".join(
        f"{t['protocol']}/{t['arm']}: {t['jobs']} x {t['job_s']:.0f} s ({t['per_unit_s']:.3f} s per {t['knob']} unit)"
        for t in costly
    )
    raise BudgetError(
        f"the plan needs about {wall / 60:.1f} min on {plan['cores']} cores ({plan['jobs']} jobs, "
        f"{plan['total_job_s'] / 60:.1f} min of job time), over the budget of {budget_minutes:g} min. "
        f"Costliest: {rows}. Cut arms or seeds with a dated amendment of the claims file, or raise the budget."
    )


def write_plan(plan: dict[str, Any], path: str | Path) -> Path:
    return write_text_atomic(path, json.dumps(plan, indent=2, sort_keys=True))


def fit_by_priority(
    timings: Sequence[Timing],
    jobs: Sequence[Job],
    claims: Sequence[tuple[str, int | None, set[str]]],
    budget_minutes: float,
    cores: int,
) -> tuple[list[str], list[str]]:
    """Drop whole claims, the highest `priority` number first (None: never dropped), until the jobs the kept
    claims need fit the budget. Returns (accepted job names, dropped claim ids); a job shared with a kept claim
    stays. Raises `BudgetError` when even the claims without a priority do not fit."""
    per_job = {}
    by_group = {(t.protocol, t.arm): t.job_s for t in timings}
    for job in jobs:
        per_job[job.name] = by_group[(job.protocol.name, job.arm.name if job.arm else "all")]
    kept = sorted(claims, key=lambda c: (c[1] is not None, c[1] or 0))
    dropped: list[str] = []

    def wall(names: set[str]) -> float:
        times = [per_job[n] for n in names]
        return max(sum(times) / max(1, cores), max(times, default=0.0))

    while True:
        names = set().union(*(c[2] for c in kept)) if kept else set()
        if wall(names) <= budget_minutes * 60:
            return sorted(names), dropped
        if not kept or kept[-1][1] is None:
            raise BudgetError(
                f"the claims without a priority alone need about {wall(names) / 60:.1f} min on {cores} cores, over "
                f"the budget of {budget_minutes:g} min"
            )
        dropped.append(kept.pop()[0])
