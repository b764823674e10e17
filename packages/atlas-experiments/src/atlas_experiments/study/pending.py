"""Run every planned job that has no result yet, in stretches: `atlas study run --pending [--workers N]`.

Each job runs as its own `atlas study run --job ...` process with one torch thread and its log under
`<root>/logs/`. A job counts as done only when its result file (written atomically with its provenance,
`study.results`) exists, so the runner can be killed at any moment (kill -9 included) and started again: it skips
what finished and reruns what did not, and every job is deterministic in its seed, so the results are those of an
uninterrupted run. A result file that is not the job's own (corrupt or foreign) is reported and left alone.

`--per-arm` groups the jobs by (protocol, arm) instead: one `atlas study run --arm protocol/arm` process per group
runs that arm's pending seeds in sequence, each seed's result finalized the moment it ends, so a process's start-up
(imports, a GPU context) is paid once per arm rather than once per seed; its log is `<root>/logs/<protocol>/<arm>.log`.

Logs are appended to, one dated header per attempt, so a rerun keeps what the interrupted attempt printed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from datetime import UTC, datetime
from pathlib import Path

from atlas_experiments.study.plan import Job
from atlas_experiments.study.results import ResultError, finished


def pending_jobs(jobs: Sequence[Job], root: str | Path) -> tuple[list[Job], list[str]]:
    """(jobs without a result, refused result files with why)."""
    todo, refused = [], []
    for job in jobs:
        try:
            if not finished(job, root):
                todo.append(job)
        except ResultError as exc:
            refused.append(str(exc))
    return todo, refused


def arm_key(job: Job) -> str:
    """`protocol/arm` of a job (`all` for a select task's shared run): what `atlas study run --arm` takes."""
    return f"{job.protocol.name}/{job.arm.name if job.arm else 'all'}"


def group_by_arm(jobs: Sequence[Job]) -> dict[str, list[Job]]:
    """The jobs by `arm_key`, groups and seeds in plan order."""
    groups: dict[str, list[Job]] = {}
    for job in jobs:
        groups.setdefault(arm_key(job), []).append(job)
    return groups


def _run_logged(argv: Sequence[str], log: Path, env: dict) -> int:
    """Run `argv` with its output appended to `log` under a dated header: a job resumed from its snapshot keeps
    the log of the attempt that was interrupted (where it stopped, what it printed last) above the new one."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as handle:
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        handle.write(f"== {stamp} start: {' '.join(argv[1:])}\n")
        handle.flush()
        return subprocess.run(argv, stdout=handle, stderr=subprocess.STDOUT, env=env, check=False).returncode


def run_pending(
    jobs: Sequence[Job], root: str | Path, child_args: Sequence[str], workers: int = 1, per_arm: bool = False
) -> int:
    """Run the pending jobs `workers` at a time; returns the number that failed. `child_args` are the options each
    `atlas study run --job` receives (claims, scale, root, tracking). `per_arm`: one process per (protocol, arm)
    that runs its seeds in sequence (`atlas study run --arm`), `workers` arms at a time."""
    from tqdm.auto import tqdm

    root = Path(root)
    todo, refused = pending_jobs(jobs, root)
    for why in refused:
        print(f"refused (left alone, remove it to rerun the job): {why}", file=sys.stderr)
    print(f"study: {len(jobs) - len(todo) - len(refused)} of {len(jobs)} jobs done, {len(todo)} to run")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    env.pop("MLFLOW_RUN_ID", None)

    def one(job: Job) -> tuple[Job, int]:
        log = root / "logs" / f"{job.name}.log"
        argv = [sys.executable, "-m", "atlas_experiments.cli", "study", "run", *child_args, "--job", job.name]
        return job, _run_logged(argv, log, env)

    if per_arm:
        return _run_arms(group_by_arm(todo), root, child_args, workers, env) + len(refused)
    failed = 0
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        futures = [pool.submit(one, job) for job in todo]
        for future in tqdm(as_completed(futures), total=len(futures), desc="study jobs", unit="job"):
            job, code = future.result()
            if code:
                failed += 1
                print(f"study job {job.name} failed ({code}): {root / 'logs' / (job.name + '.log')}", file=sys.stderr)
    return failed + len(refused)


def _run_arms(groups: dict[str, list[Job]], root: Path, child_args: Sequence[str], workers: int, env: dict) -> int:
    """One `atlas study run --arm` process per group; a job counts as failed when its result is missing afterwards
    (the process may have died part way through the arm's seeds: the seeds before that point are kept)."""
    from tqdm.auto import tqdm

    def one(key: str) -> tuple[str, int]:
        log = root / "logs" / f"{key}.log"
        argv = [sys.executable, "-m", "atlas_experiments.cli", "study", "run", *child_args, "--arm", key]
        return key, _run_logged(argv, log, env)

    failed = 0
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        futures = [pool.submit(one, key) for key in groups]
        for future in tqdm(as_completed(futures), total=len(futures), desc="study arms", unit="arm"):
            key, code = future.result()
            left, refused = pending_jobs(groups[key], root)
            failed += len(left) + len(refused)
            if code or left:
                print(f"study arm {key} exited with {code}, {len(left)} of {len(groups[key])} seeds without a "
                      f"result: {root / 'logs' / (key + '.log')}", file=sys.stderr)  # fmt: skip
    return failed
