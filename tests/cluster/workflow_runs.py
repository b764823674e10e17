"""Snakemake runs of the reduced `.test` config for the cluster tests: through the Slurm executor
(`--profile cluster` with the one-node `profiles/cluster-local` workflow profile) or on this machine, each in its own
working directory, and what their outputs and Slurm jobs were."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]
# the literal cluster command; the workflow profile only adapts resources and status queries to one CPU node
CLUSTER = ["--profile", "cluster", "--workflow-profile", "profiles/cluster-local"]
# the measured parts of a metrics record: throughput and MFU are timings
TIMINGS = {"tokens_per_s", "mfu"}
SUBMITTED = re.compile(r"has been submitted with SLURM jobid (\d+) \(log: \S*/slurm_logs/rule_(\w+)/")


def work_dir(where: Path, windows: list[int], **train_defaults) -> Path:
    """A working directory holding a copy of .test/config whose window ablation has the cells `windows` and whose
    training defaults are updated with `train_defaults`."""
    (where / "config").mkdir(parents=True)
    cfg = yaml.safe_load((ROOT / ".test" / "config" / "config.yaml").read_text())
    table = where / "config" / "window.tsv"
    table.write_text("window\n" + "".join(f"{w}\n" for w in windows))
    cfg["ablations"]["tables"]["window"] = str(table)
    cfg["train"]["defaults"].update(train_defaults)
    (where / "config" / "config.yaml").write_text(yaml.safe_dump(cfg))
    return where


def env(slurm_conf: Path | None, tracking: dict[str, str] | None = None) -> dict[str, str]:
    """The run's environment. Never the user's tracking server or credentials: without `tracking` the run tracks
    into SQLite under its own results/; `tracking` gives the MLFLOW_TRACKING_* variables of a test server."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_TRACKING_")} | {"OMP_NUM_THREADS": "1"}
    env |= {k: v for k, v in (tracking or {}).items() if k.startswith("MLFLOW_TRACKING_")}
    if slurm_conf is not None:
        env |= {"SLURM_CONF": str(slurm_conf), "ATLAS_SLURM_ACCOUNT": "atlas", "ATLAS_SLURM_PARTITION": "atlas"}
    return env


def command(work: Path, *targets: str, cluster: bool) -> list[str]:
    # the command line's config replaces the cluster profile's config/paper.yaml (a profile only sets defaults)
    config = ["--configfile", str(work / "config" / "config.yaml"), "--replace-workflow-config"]
    return [*SNAKEMAKE, *(CLUSTER if cluster else ["--cores", "2"]), *config, "--directory", str(work), *targets]


def start(
    work: Path, *targets: str, slurm_conf: Path | None, tracking: dict[str, str] | None = None
) -> subprocess.Popen:
    """Snakemake on `targets` in `work`, through Slurm when `slurm_conf` is given, tracking to the server that
    `tracking` names (see `env`); its output in work/snakemake.out."""
    out = open(work / "snakemake.out", "w")  # noqa: SIM115  (the child writes it; closed with the process)
    return subprocess.Popen(
        command(work, *targets, cluster=slurm_conf is not None),
        cwd=ROOT, env=env(slurm_conf, tracking), stdout=out, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def finish(work: Path, proc: subprocess.Popen, timeout: int) -> str:
    """Wait for `proc`; its output, with the rule logs' tails when it failed."""
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        rc = "timed out"
    out = (work / "snakemake.out").read_text()
    if rc != 0:
        logs = "".join(f"\n== {p}\n{p.read_text()[-1500:]}" for p in sorted(work.glob("results/logs/**/*.log")))
        raise AssertionError(f"snakemake in {work}: {rc}\n{out[-5000:]}{logs[-5000:]}")
    return out


def slurm_jobs(out: str) -> list[tuple[str, str]]:
    """(rule, Slurm job id) of every job the Slurm executor submitted, in submission order."""
    return [(rule, job) for job, rule in SUBMITTED.findall(out)]


def measured(run: Path) -> list[dict]:
    """A run's metrics records without their timings."""
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k not in TIMINGS} for line in lines]
