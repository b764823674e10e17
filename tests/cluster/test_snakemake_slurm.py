"""`snakemake --profile cluster` for real: the reduced `.test` config's window ablation (data, a training cell,
the parent run and summary) submitted through the Slurm executor's `sbatch` to the local Slurm completes, every
Slurm job ends COMPLETED, every job logs to a shared MLflow server with basic auth (credentials from the
environment, as the README tells researchers to set them) and every run there is FINISHED under its parent, and the
outputs equal a run of the same targets on this machine (which tracks into its own SQLite)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors.torch import load_file

from . import workflow_runs as wr
from .conftest import RESEARCHER

pytestmark = pytest.mark.cluster
TARGET = "ablation_window"
CELLS = ("window~1",)


@pytest.fixture(scope="module")
def runs(local_slurm, auth_server, tmp_path_factory) -> tuple[Path, Path, str]:
    """The same config run through Slurm and locally (at the same time: the Slurm run mostly waits); about 2 min."""
    cluster = wr.work_dir(tmp_path_factory.mktemp("through-slurm"), windows=[1])
    local = wr.work_dir(tmp_path_factory.mktemp("local"), windows=[1])
    local_proc = wr.start(local, TARGET, slurm_conf=None)
    tracking = auth_server.client_env()
    cluster_proc = wr.start(cluster, TARGET, slurm_conf=local_slurm.conf, tracking=tracking)
    out = wr.finish(cluster, cluster_proc, timeout=900)
    wr.finish(local, local_proc, timeout=900)
    return cluster, local, out


def test_every_job_went_through_sbatch_and_completed(runs, local_slurm):
    _, _, out = runs
    assert "Using profiles cluster and workflow specific profile profiles/cluster-local" in out
    jobs = wr.slurm_jobs(out)
    # the parent run and the summary are local rules (they only talk to the tracking store)
    assert sorted(rule for rule, _ in jobs) == ["prepare_data", "train"], out[-3000:]
    for rule, job in jobs:
        assert local_slurm.job_state(job) == "COMPLETED", f"{rule}: Slurm job {job}"
    # data, the run's config file (local), the parent run, the cell, the summary and the target
    assert "6 of 6 steps (100%) done" in out


def test_the_outputs_equal_a_local_run(runs):
    cluster, local, _ = runs
    data = "results/data/embedded/manifest.json"
    assert json.loads((cluster / data).read_text()) == json.loads((local / data).read_text())
    for cell in CELLS:
        a, b = (w / "results" / "runs" / "ablation_window" / cell for w in (cluster, local))
        assert wr.measured(a) == wr.measured(b) and len(wr.measured(a)) == 2, cell
        # the configs the jobs trained (train.json, written by the rule) and the weights they ended with
        assert (a / "train.json").read_text() == (b / "train.json").read_text()
        wa, wb = (load_file(r / "checkpoints" / "final" / "model.safetensors") for r in (a, b))
        assert wa.keys() == wb.keys() and all(wa[k].equal(wb[k]) for k in wa), cell
    summaries = [json.loads((w / "results/runs/ablation_window/summary.json").read_text()) for w in (cluster, local)]
    assert summaries[0]["cells"] == summaries[1]["cells"] and summaries[0]["best"] == summaries[1]["best"]


def test_every_run_is_on_the_shared_server_finished_under_its_parent(runs, auth_server, monkeypatch):
    from atlas_experiments import tracking

    cluster, _, _ = runs
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", RESEARCHER[0])
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", RESEARCHER[1])
    found = [r for r in tracking.load_runs(auth_server.uri) if r["experiment"] == TARGET]
    parent_id = json.loads((cluster / "results/runs" / TARGET / "parent.json").read_text())["run_id"]
    parent = next(r for r in found if r["run_id"] == parent_id)
    assert parent["tags"][tracking.ROLE_TAG] == "parent" and parent["run_name"] == "window"
    children = {r["run_name"] for r in found if r["tags"].get(tracking.PARENT_TAG) == parent_id}
    assert children == set(CELLS) and len(found) == 1 + len(CELLS), [r["run_name"] for r in found]
    assert all(r["status"] == "FINISHED" for r in found), [(r["run_name"], r["status"]) for r in found]
    # the summary rule read the cells back from the server: its best cell is the parent's best
    summary = json.loads((cluster / "results/runs" / TARGET / "summary.json").read_text())
    assert summary["best"] in CELLS and "best_val_loss" in parent["metrics"]
    for cell in CELLS:
        record = json.loads((cluster / "results/runs" / TARGET / cell / "tracking.json").read_text())
        assert record["uri"] == auth_server.uri, cell
