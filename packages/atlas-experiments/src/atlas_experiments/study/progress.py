"""Where a study that runs in stretches stands: `atlas study plan --progress --root R`.

Per claim: its jobs done of planned, the CPU time they took, and an estimate of what is left, from the finished
jobs themselves (the mean time of an arm's finished jobs in the same protocol stands for its unfinished ones; an arm
with no finished job has no estimate, and the row says how many jobs that leaves unpriced). A job's time is the
training seconds of every stretch it ran in (`details.runs[].train.seconds` of a synthetic job, which a resumed
job accumulates) where the result has them, else its provenance `wall_s`. A result that is not the job's own is
not counted (the report lists it).

With a pilot's projection (`--costs`, `study/pilot.py`), an arm with no finished job takes the pilot's projected job
time instead (the row counts those jobs as priced from the pilot); finished jobs still price their own arm. Where an
arm has both, the ratio of its finished jobs' mean time to the pilot's time says how the pilot's pace compares with
the stretches' (`pilot_pace`: a pilot times a few steps on an idle core, a stretch runs beside other work), and the
footer gives what the pilot-priced jobs would take at the median ratio.

Shared runs (study/shared.py): a result written from a twin's run cost nothing, an unfinished job whose twin has
finished costs nothing (it will share that run), and in the row of every job counted once, unfinished twins are
priced once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import mean, median
from typing import Any

from atlas_experiments.study.claims import Claim, Registry
from atlas_experiments.study.plan import Job, claim_jobs, jobs_of_claims, planned_claims
from atlas_experiments.study.results import ResultError, load
from atlas_experiments.study.shared import arm_fingerprint, may_be_twins, shared_from


@dataclass(frozen=True)
class Progress:
    name: str
    done: int
    planned: int
    spent_h: float
    left_h: float
    unpriced: int  # unfinished jobs of arms with no finished job and no pilot time: not in left_h
    from_pilot: int = 0  # unfinished jobs priced from the pilot's projection (in left_h)
    pilot_h: float = 0.0  # the part of left_h priced from the pilot


def job_seconds(data: dict[str, Any]) -> float:
    """The CPU seconds a finished job took (module docstring)."""
    if shared_from(data):
        return 0.0
    runs = data.get("details", {}).get("runs")
    if isinstance(runs, list) and runs and all(isinstance(r.get("train"), dict) for r in runs):
        return float(sum(r["train"].get("seconds", 0.0) for r in runs))
    return float(data.get("study", {}).get("wall_s", 0.0))


def arm_group(job: Job) -> tuple[str, str]:
    """(protocol, arm) of a job: the unit a price or a pilot time belongs to."""
    return job.protocol.name, job.arm.name if job.arm else "all"


def times_by_group(jobs: Sequence[Job], seconds: Mapping[str, float]) -> dict[tuple[str, str], list[float]]:
    """{(protocol, arm): wall seconds of each of its finished jobs}: what an unfinished job of the arm is priced at."""
    out: dict[tuple[str, str], list[float]] = {}
    for job in jobs:
        if job.name in seconds:
            out.setdefault(arm_group(job), []).append(seconds[job.name])
    return out


def measure(jobs: Iterable[Job], root: str | Path) -> dict[str, float]:
    """{job name: seconds} of the finished jobs among `jobs`."""
    out = {}
    for job in jobs:
        try:
            out[job.name] = job_seconds(load(job, root))
        except (FileNotFoundError, ResultError):
            continue
    return out


def run_keys(jobs: Sequence[Job]) -> dict[str, tuple[str, int]]:
    """{job name: (run fingerprint, seed)} of the jobs that have one and may have a twin: equal keys, one
    computation."""
    out = {}
    for job in jobs:
        if not any(may_be_twins(job, other) for other in jobs):
            continue
        fingerprint = arm_fingerprint(job.protocol, job.arm)
        if fingerprint is not None:
            out[job.name] = (fingerprint, job.seed)
    return out


def summarise(
    name: str,
    jobs: Sequence[Job],
    seconds: dict[str, float],
    keys: dict[str, tuple[str, int]] | None = None,
    *,
    once: bool = False,
    pilot: dict[tuple[str, str], float] | None = None,
) -> Progress:
    """A claim's row; `seconds` holds every finished job of the plan, so that an unfinished job whose twin finished
    elsewhere costs nothing. `once`: the row of every job, where unfinished twins are priced once. `pilot`: {(protocol,
    arm): projected job seconds} for arms with no finished job."""
    keys, pilot = keys or {}, pilot or {}
    by_group = times_by_group(jobs, seconds)
    computed = {keys[n] for n in seconds if n in keys}  # runs that exist: a twin of one of them shares it
    left, unpriced, from_pilot, pilot_s = 0.0, 0, 0, 0.0
    for job in jobs:
        if job.name in seconds or keys.get(job.name) in computed:
            continue
        if once and job.name in keys:
            computed.add(keys[job.name])
        group = arm_group(job)
        if group in by_group:
            left += mean(by_group[group])
        elif group in pilot:
            left += pilot[group]
            pilot_s += pilot[group]
            from_pilot += 1
        else:
            unpriced += 1
    done = [job for job in jobs if job.name in seconds]
    spent = sum(seconds[j.name] for j in done) / 3600
    return Progress(name, len(done), len(jobs), spent, left / 3600, unpriced, from_pilot, pilot_s / 3600)


def study_progress(
    registry: Registry,
    scales: Iterable[str],
    jobs: Sequence[Job],
    root: str | Path,
    pilot: dict[tuple[str, str], float] | None = None,
    seconds: dict[str, float] | None = None,
    claims: Sequence[Claim] | None = None,
) -> list[Progress]:
    """One row per planned claim (or per claim of `claims`), then one for every job they need counted once; `pilot`
    as for `summarise`; `seconds`: `measure(jobs, root)` when the caller has it already."""
    scales = list(scales)
    seconds = measure(jobs, root) if seconds is None else seconds
    keys = run_keys(jobs)
    claims = planned_claims(registry, scales) if claims is None else claims
    rows = [summarise(c.id, claim_jobs(c, registry), seconds, keys, pilot=pilot) for c in claims]
    mine = jobs_of_claims(claims, registry, jobs)
    return rows + [summarise("all jobs (each once)", mine, seconds, keys, once=True, pilot=pilot)]


def pilot_times(plan: dict[str, Any]) -> dict[tuple[str, str], float]:
    """{(protocol, arm): projected seconds of one job} from a pilot's projection (`atlas study pilot --out`)."""
    return {(t["protocol"], t["arm"]): float(t["job_s"]) for t in plan["timings"]}


def pilot_pace(
    jobs: Sequence[Job], seconds: dict[str, float], pilot: dict[tuple[str, str], float]
) -> dict[tuple[str, str], float]:
    """{(protocol, arm): mean seconds of its finished jobs / the pilot's projected seconds of one job}, for the arms
    that have both; `seconds` as `measure` gives it (results shared from a twin's run cost nothing and are left
    out)."""
    out = {}
    for group, times in sorted(times_by_group(jobs, seconds).items()):
        spent = [t for t in times if t > 0]
        if spent and pilot.get(group, 0) > 0:
            out[group] = mean(spent) / pilot[group]
    return out


def pace_note(pace: dict[tuple[str, str], float], total: Progress) -> str:
    """The footer of `--progress --costs`: how the finished jobs' times compare with the pilot's, and what the
    pilot-priced jobs would take at the median ratio."""
    if not pace:
        return "pilot pace: no arm has both finished jobs and a pilot time yet"
    middle = median(pace.values())
    arms = ", ".join(f"{protocol}/{arm} {r:.2f}x" for (protocol, arm), r in pace.items())
    line = (f"pilot pace: the finished jobs of {len(pace)} arms took {min(pace.values()):.2f}-"
            f"{max(pace.values()):.2f}x the pilot's time per job (median {middle:.2f}x: {arms})")  # fmt: skip
    if total.from_pilot:
        line += (f"; at the median, the {total.from_pilot} jobs priced from the pilot take {total.pilot_h * middle:.1f}"
                 f" CPU-h, not {total.pilot_h:.1f}")  # fmt: skip
    return line


def format_progress(rows: Sequence[Progress]) -> str:
    lines = [f"{'claim':<48} {'done':>9} {'CPU-h spent':>11} {'CPU-h left':>10}  note"]
    for r in rows:
        notes = [f"{r.from_pilot} jobs priced from the pilot"] if r.from_pilot else []
        notes += [f"{r.unpriced} jobs of arms with no finished job not priced"] if r.unpriced else []
        note = "; ".join(notes)
        lines.append(f"{r.name:<48} {r.done:>4}/{r.planned:<4} {r.spent_h:>11.2f} {r.left_h:>10.2f}  {note}")
    return "\n".join(lines)
