"""Slurm runtimes from the cost table (workflow/lib/train_costs.py, docs/costs.md)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow" / "lib"))

from train_costs import HINT, CostTableError, requested_runtime  # noqa: E402

from atlas_experiments.cost import GpuAssumptions, JobSpec, cost_jobs, read_table  # noqa: E402
from atlas_experiments.cost.projection import MIN_RUNTIME_MINUTES as MIN_MINUTES  # noqa: E402

CONFIG = {"model": {"preset": "omeganet", "size": "tiny"}, "data": {"path": "x", "seq_len": 16}, "tokens": 10**13}


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("costs") / "train.json"
    cost_jobs([JobSpec.from_train_config("pretrain/omeganet", CONFIG)], GpuAssumptions(), out, gpus=8, progress=False)
    return out


def test_runtime_is_the_projection_on_the_jobs_gpus_times_the_margin(table):
    hours = read_table(table)["pretrain/omeganet"]["gpu_hours"]
    assert requested_runtime(table, "pretrain/omeganet", CONFIG, gpus=4, margin=2.0) == max(
        MIN_MINUTES, math.ceil(hours / 4 * 60 * 2.0)
    )
    # the tracking and data keys of a job do not change its cost
    moved = {**CONFIG, "data": {"path": "elsewhere", "seq_len": 16}, "tracking": {"run_name": "x"}}
    assert requested_runtime(table, "pretrain/omeganet", moved, 4, 2.0) == requested_runtime(
        table, "pretrain/omeganet", CONFIG, 4, 2.0
    )
    assert requested_runtime(table, "pretrain/omeganet", CONFIG, gpus=4, margin=2.0, max_minutes=MIN_MINUTES) == (
        MIN_MINUTES
    )
    small = {**CONFIG, "tokens": 1000}
    with pytest.raises(CostTableError, match="stale"):
        requested_runtime(table, "pretrain/omeganet", small, 4, 2.0)


def test_missing_or_stale_rows_name_the_job_and_the_fix(table, tmp_path):
    with pytest.raises(CostTableError, match="does not exist") as err:
        requested_runtime(tmp_path / "none.json", "pretrain/omeganet", CONFIG, 8, 1.5)
    assert HINT in str(err.value)
    with pytest.raises(CostTableError, match="no row for job 'pretrain/atlas'"):
        requested_runtime(table, "pretrain/atlas", CONFIG, 8, 1.5)
    wider = {**CONFIG, "model": {"preset": "omeganet", "size": "tiny", "overrides": {"memory": {"window": 2}}}}
    with pytest.raises(CostTableError, match="row of job 'pretrain/omeganet' is stale"):
        requested_runtime(table, "pretrain/omeganet", wider, 8, 1.5)
    foreign = tmp_path / "foreign.json"
    foreign.write_text(json.dumps({"jobs": []}))
    with pytest.raises(ValueError, match="not a cost table"):
        requested_runtime(foreign, "pretrain/omeganet", CONFIG, 8, 1.5)


def test_the_paper_table_matches_the_paper_config():
    """config/costs/paper.json holds a row for every pretraining job of config/paper.yaml (the cluster dry run
    in test_workflow.py reads it); its projection is the counted FLOPs at the stated assumptions."""
    rows = read_table(ROOT / "config" / "costs" / "paper.json")
    assert len(rows) == 13 + 3 + 4 + 6 + 4
    data = json.loads((ROOT / "config" / "costs" / "paper.json").read_text())
    gpu = data["assumptions"]
    for row in rows.values():
        tokens = row["job"]["tokens"]
        per_token = row["per_token"]
        fp64 = per_token["gemm_flops_fp64"]
        fast = per_token["gemm_flops"] + per_token["pointwise_ops"] - fp64
        compute = tokens * (fast / gpu["peak_tflops"] + fp64 / gpu["fp64_tflops"]) / (gpu["mfu"] * 1e12) / 3600
        assert row["compute_hours"] == pytest.approx(compute, rel=1e-9)
        assert row["gpu_hours"] == pytest.approx(max(compute, row["bandwidth_hours"]), rel=1e-9)
