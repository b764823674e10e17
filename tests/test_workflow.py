"""The Snakemake workflow: lint, dry runs of every config and profile, and per-ablation targets."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def _snakemake(*args: str, env: dict | None = None, results: Path | None = None) -> subprocess.CompletedProcess:
    """Run snakemake from the repository root; outputs go to a fresh `results` dir, so the checkout's state never
    changes what a dry run plans."""
    where = []
    if results is not None:
        where = ["--config", f"results={results}/results", f"report_dir={results}/reports"]
    return subprocess.run(
        [*SNAKEMAKE, *args, *where],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, **(env or {})},
    )


def _jobs(out: str) -> dict[str, int]:
    """The 'Job stats' table of a dry run -> {rule: count}."""
    table = out.split("Job stats:", 1)[1].split("\n\n", 1)[0]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M) if m[1] != "total"}


def test_lint_is_clean():
    res = _snakemake("--lint")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "Congratulations, your workflow is in a good condition" in res.stdout + res.stderr


@pytest.mark.parametrize("extra", [[], ["--configfile", "config/paper.yaml"]], ids=["embedded", "paper"])
def test_dry_run_builds_the_whole_dag(extra, tmp_path):
    res = _snakemake("-n", *extra, results=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    jobs = _jobs(res.stdout)
    assert jobs["prepare_data"] == 1 and jobs["train"] >= 8 and jobs["report"] == 1
    assert jobs["evaluate"] >= 4 * 8


def test_cluster_profile_dry_runs_with_slurm_and_the_paper_config(tmp_path):
    env = {"ATLAS_SLURM_ACCOUNT": "acct", "ATLAS_SLURM_PARTITION": "gpu", "MLFLOW_TRACKING_URI": "http://10.0.0.5:5000"}
    res = _snakemake("--profile", "cluster", "-n", env=env, results=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "config/paper.yaml" in res.stdout + res.stderr
    assert "--tracking-uri http://10.0.0.5:5000" in res.stdout  # the shared server reaches every job
    assert "OMP_NUM_THREADS=4 torchrun --standalone --nproc_per_node=8" in res.stdout  # 32 CPUs over 8 ranks
    assert _jobs(res.stdout)["train"] == 13 + 2 + 3 + 5 + 4  # models + the four ablation tables


@pytest.mark.parametrize("axis,cells", [("window", 5), ("gated_mlp", 2), ("poly_degree", 3), ("optimizer", 4)])
def test_each_ablation_has_its_own_target(axis, cells, tmp_path):
    res = _snakemake("-n", f"ablation_{axis}", results=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    jobs = _jobs(res.stdout)
    assert jobs["train"] == cells and jobs["prepare_data"] == 1
    runs = set(re.findall(r"study=(\w+), run=", res.stdout))
    assert runs == {f"ablation_{axis}"}


def test_ablation_cells_resolve_to_memory_overrides(tmp_path):
    res = _snakemake("-n", "-p", "ablation_optimizer", results=tmp_path)
    assert '"expansion": 2, "ns_steps": 3, "optimizer": "muon"}' in res.stdout  # base overrides + cell
    assert '"experiment": "ablation_optimizer"' in res.stdout
