"""A training job cancelled mid-run under `snakemake --profile cluster`: Slurm reports it CANCELLED, the profile's
retries resubmit it, the new job resumes from the last checkpoint and the run's losses equal an uninterrupted run's;
the cancelled job's partial run directory is never taken as a finished output. Slow (about 3 min): the exact resume
itself is covered by packages/atlas-experiments/tests/test_train.py (SIGKILL, no Slurm) and the Slurm path by
test_snakemake_slurm.py."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from . import workflow_runs as wr

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
STEPS, EVERY = 40, 10


def _wait_for(what: str, ok, proc: subprocess.Popen, work: Path, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"never {what}:\n{(work / 'snakemake.out').read_text()[-4000:]}")
        time.sleep(0.05)


def test_a_cancelled_training_job_is_retried_and_resumes_exactly(local_slurm, tmp_path):
    work = wr.work_dir(tmp_path / "work", windows=[1], steps=STEPS, checkpoint_interval=EVERY, eval_interval=STEPS)
    run = work / "results" / "runs" / "ablation_window" / "window~1"
    proc = wr.start(work, "ablation_window", slurm_conf=local_slurm.conf)

    def past_a_checkpoint() -> bool:
        steps = len((run / "metrics.jsonl").read_text().splitlines()) if (run / "metrics.jsonl").is_file() else 0
        return steps >= EVERY + 3 and any((run / "checkpoints").glob("step_*"))

    _wait_for("trained past a checkpoint", past_a_checkpoint, proc, work)
    [(_, first)] = [j for j in wr.slurm_jobs((work / "snakemake.out").read_text()) if j[0] == "train"]
    local_slurm.run("scancel", first)
    assert not (run / "checkpoints" / "final" / "COMPLETE").exists()
    out = wr.finish(work, proc, timeout=900)

    trains = [job for rule, job in wr.slurm_jobs(out) if rule == "train"]
    assert trains[0] == first and len(trains) == 2, out[-3000:]
    assert local_slurm.job_state(first) == "CANCELLED"
    assert local_slurm.job_state(trains[1]) == "COMPLETED"
    assert "Trying to restart job" in out

    log = (run / "train.log").read_text()
    resumed = [line for line in log.splitlines() if "resumed from" in line]
    # from a step checkpoint of the cancelled job (keep_checkpoints=1 leaves its newest), not from scratch
    assert len(resumed) == 1 and any(f"at step {k}" in resumed[0] for k in range(EVERY, STEPS, EVERY)), log[-2000:]

    # the uninterrupted run: the same train.json trained in one go, outside Slurm and Snakemake
    ref = tmp_path / "uninterrupted"
    one_go = subprocess.run(
        [sys.executable, "-m", "atlas_experiments.cli", "train", "--config", str(run / "train.json"), "--out", str(ref),
         "--tracking-uri", f"sqlite:///{tmp_path / 'ref-mlflow.db'}"],
        cwd=work, capture_output=True, text=True, timeout=600, env=wr.env(None),
    )  # fmt: skip
    assert one_go.returncode == 0, one_go.stderr[-3000:]
    got, want = wr.measured(run), wr.measured(ref)
    assert [r["step"] for r in got] == list(range(1, STEPS + 1))
    assert got == want
