"""Which unfinished job runs next, so that verdicts arrive soonest: `atlas study run --pending --order
verdicts-first` and `atlas study plan --schedule` (docs/study.md, "Long runs, in stretches").

A study that runs in stretches gives a verdict only when every job of a claim is done. Running the plan in its
listed order spreads the CPU over every claim at once; this order finishes claims one at a time, cheapest first:
repeatedly take the claim with the least work left, counting as done what is finished or already scheduled, and
schedule its unfinished jobs (plan order within a claim). A job shared by several claims is scheduled once, so a
claim whose jobs mostly belong to claims before it (an interaction after its two main effects) costs only its own.

A job's price is the mean time of its arm's finished jobs in the same protocol; an arm with none takes the pilot's
projected job time times the pilot pace (the median ratio of finished jobs' time to the pilot's, as the progress
footer reports it); an arm with neither is unpriced, and a claim with unpriced jobs comes after every priced one
(fewest unpriced first); ties go in the registry's order. An unfinished job whose twin run has finished
(study/shared.py) costs nothing. The order is a schedule, not a rule: it changes which result is written first,
never what any job computes or how a claim is judged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import mean, median

from atlas_experiments.study.claims import Claim, Registry
from atlas_experiments.study.plan import Job, claim_jobs
from atlas_experiments.study.progress import arm_group, pilot_pace, run_keys, times_by_group


@dataclass(frozen=True)
class Step:
    """One claim's turn in the schedule: the jobs it adds and their price."""

    claim: str
    jobs: tuple[Job, ...]
    hours: float
    unpriced: int
    cumulative_h: float  # CPU-hours of every step up to and including this one (priced jobs only)


def job_prices(
    jobs: Sequence[Job], seconds: dict[str, float], pilot: dict[tuple[str, str], float] | None = None
) -> dict[str, float]:
    """{job name: projected seconds} of the unfinished jobs that have a price (module docstring)."""
    pilot = pilot or {}
    finished = times_by_group(jobs, seconds)
    pace = pilot_pace(jobs, seconds, pilot)
    scale = median(pace.values()) if pace else 1.0
    out = {}
    for job in jobs:
        if job.name in seconds:
            continue
        group = arm_group(job)
        if group in finished:
            out[job.name] = mean(finished[group])
        elif group in pilot:
            out[job.name] = pilot[group] * scale
    return out


def verdicts_first(
    claims: Sequence[Claim],
    registry: Registry,
    jobs: Sequence[Job],
    seconds: dict[str, float],
    pilot: dict[tuple[str, str], float] | None = None,
) -> list[Step]:
    """The schedule of `claims` (module docstring): one step per claim that has an unfinished job, in the order they
    would complete. `jobs` is the whole plan (prices and twins come from all of it); `seconds` its finished jobs."""
    prices = job_prices(jobs, seconds, pilot)
    keys = run_keys(jobs)
    computed = {keys[n] for n in seconds if n in keys}
    planned = {job.name for job in jobs}
    scheduled: set[str] = set()
    left = {claim.id: [j for j in claim_jobs(claim, registry) if j.name in planned and j.name not in seconds]
            for claim in claims}  # fmt: skip

    def cost(claim_id: str) -> tuple[int, float, list[Job]]:
        todo, hours, unpriced, runs = [], 0.0, 0, set(computed)
        for job in left[claim_id]:
            if job.name in scheduled:
                continue
            todo.append(job)
            if keys.get(job.name) in runs:
                continue  # its twin's run exists or comes earlier in this claim: shared, free
            if job.name in keys:
                runs.add(keys[job.name])
            if job.name in prices:
                hours += prices[job.name] / 3600
            else:
                unpriced += 1
        return unpriced, hours, todo

    steps: list[Step] = []
    total = 0.0
    rank = {claim.id: i for i, claim in enumerate(claims)}  # ties: the registry's order
    waiting = [claim.id for claim in claims if left[claim.id]]
    while waiting:
        costs = {claim_id: cost(claim_id) for claim_id in waiting}
        for claim_id in [c for c in waiting if not costs[c][2]]:  # its jobs all came with the step above
            steps.append(Step(claim_id, (), 0.0, 0, total))
            waiting.remove(claim_id)
        if not waiting:
            break
        best = min(waiting, key=lambda c: (costs[c][0], costs[c][1], rank[c]))
        unpriced, hours, todo = costs[best]
        for job in todo:
            scheduled.add(job.name)
            if job.name in keys:
                computed.add(keys[job.name])
        total += hours
        steps.append(Step(best, tuple(todo), hours, unpriced, total))
        waiting.remove(best)
    return steps


def ordered_jobs(steps: Sequence[Step], jobs: Sequence[Job]) -> list[Job]:
    """The plan's jobs in schedule order: the steps' jobs first, then any job of the plan no step holds (finished
    jobs, which the runner skips, and jobs of claims outside the selection), in plan order."""
    first = [job for step in steps for job in step.jobs]
    seen = {job.name for job in first}
    return first + [job for job in jobs if job.name not in seen]


def format_schedule(steps: Sequence[Step], workers: int = 1) -> str:
    """The schedule as a table: each claim's turn, the jobs it adds, their CPU-hours, the CPU-hours up to its last
    job and that divided by `workers` (when its verdict can come, in wall-clock hours from now, if the jobs pack
    without gaps; priced jobs only). A claim whose jobs all came with earlier claims adds none and completes with
    the claim above it."""
    workers = max(1, workers)
    lines = [f"{'#':>3} {'claim':<48} {'jobs':>4} {'CPU-h':>7} {'by CPU-h':>9} {f'wall-h ({workers} workers)':>20}"
             "  note"]  # fmt: skip
    for i, step in enumerate(steps, 1):
        note = f"{step.unpriced} jobs not priced" if step.unpriced else ""
        note = note if step.jobs else "its jobs all come with the claims above"
        lines.append(f"{i:>3} {step.claim:<48} {len(step.jobs):>4} {step.hours:>7.2f} {step.cumulative_h:>9.2f} "
                     f"{step.cumulative_h / workers:>20.1f}  {note}".rstrip())  # fmt: skip
    if not steps:
        lines.append("    (every selected claim has all its jobs done)")
    return "\n".join(lines)
