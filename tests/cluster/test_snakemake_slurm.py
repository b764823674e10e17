"""`snakemake --profile cluster` for real: the reduced `.test` config's window ablation (data, a training cell,
the parent run and summary) submitted through the Slurm executor's `sbatch` to the local Slurm completes, every
Slurm job ends COMPLETED, and the outputs equal a run of the same targets on this machine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors.torch import load_file

from . import workflow_runs as wr

pytestmark = pytest.mark.cluster
TARGET = "ablation_window"
CELLS = ("window~1",)


@pytest.fixture(scope="module")
def runs(local_slurm, tmp_path_factory) -> tuple[Path, Path, str]:
    """The same config run through Slurm and locally (at the same time: the Slurm run mostly waits); about 2 min."""
    cluster = wr.work_dir(tmp_path_factory.mktemp("through-slurm"), windows=[1])
    local = wr.work_dir(tmp_path_factory.mktemp("local"), windows=[1])
    local_proc = wr.start(local, TARGET, slurm_conf=None)
    cluster_proc = wr.start(cluster, TARGET, slurm_conf=local_slurm.conf)
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
    assert "5 of 5 steps (100%) done" in out


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
