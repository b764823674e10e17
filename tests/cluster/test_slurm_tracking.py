"""Jobs submitted to a real (single-node) Slurm log to a shared MLflow server with basic auth: a 2-process
`torchrun` training job inside its allocation, an unauthenticated client refused, and a server that goes away
mid-run losing nothing (`atlas track sync` completes the run when it is back)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from atlas_experiments.train import golden
from atlas_experiments.train.metrics import read_metrics

from .conftest import RESEARCHER

pytestmark = pytest.mark.cluster
SEARCH = "/api/2.0/mlflow/experiments/search?max_results=1"


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    return golden.prepare_data(tmp_path_factory.mktemp("cluster-data"))


def _train_config(path: Path, data: Path, run_name: str, **over) -> Path:
    cfg = golden.merge(golden.BASE, {"data": {"path": str(data)}, **over})
    cfg["tracking"] = {"enabled": True, "experiment": "pretrain", "run_name": run_name}  # the URI: from the env
    path.write_text(yaml.safe_dump(cfg))
    return path


def _sbatch(slurm, script: str, workdir: Path, env: dict[str, str], cpus: int, wait: bool) -> str:
    (workdir / "job.sh").write_text("#!/bin/bash\nset -euo pipefail\n" + script)
    args = ["sbatch", "--parsable", "-J", "atlas-test", "-c", str(cpus), "--mem=3000", "-D", str(workdir),
            "-o", str(workdir / "slurm-%j.out")] + (["--wait"] if wait else []) + [str(workdir / "job.sh")]  # fmt: skip
    proc = subprocess.run(args, env={**env, "SLURM_CONF": str(slurm.conf)}, capture_output=True, text=True, timeout=600)
    job = proc.stdout.strip().split(";")[0]
    assert proc.returncode == 0, f"sbatch: {proc.stderr}\n{_job_output(workdir)}"
    return job


def _job_output(workdir: Path) -> str:
    return "".join(p.read_text()[-3000:] for p in workdir.glob("slurm-*.out"))


def _same(got: list[tuple[int, float]], want: list[tuple[int, float]]) -> bool:
    """The same steps, and the same losses up to float32 (MLflow keeps doubles, metrics.jsonl the float)."""
    return [s for s, _ in got] == [s for s, _ in want] and [v for _, v in got] == pytest.approx([v for _, v in want])


def test_an_unauthenticated_client_is_refused(auth_server):
    assert auth_server.request(SEARCH, None) == 401
    assert auth_server.request(SEARCH, (RESEARCHER[0], "wrong")) == 401
    assert auth_server.request(SEARCH, RESEARCHER) == 200
    # the project's own client, without credentials, is refused too
    proc = subprocess.run(
        [sys.executable, "-m", "atlas_experiments.cli", "track", "parent", "--experiment", "e", "--name", "n",
         "--record", "/dev/null/none.json"],
        env=auth_server.client_env(user=None), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode != 0 and "401" in proc.stderr + proc.stdout


def test_a_torchrun_job_under_slurm_logs_to_the_shared_server(
    local_slurm, auth_server, prepared, tmp_path, monkeypatch
):
    cfg = _train_config(tmp_path / "train.yaml", prepared, "ddp-under-slurm", steps=4)
    job = _sbatch(
        local_slurm,
        f"OMP_NUM_THREADS=1 exec {sys.executable} -m torch.distributed.run --standalone --nproc_per_node 2 "
        f"-m atlas_experiments.cli train --config {cfg} --out {tmp_path / 'run'}\n",
        tmp_path, auth_server.client_env(), cpus=2, wait=True,
    )  # fmt: skip
    assert local_slurm.job_state(job) == "COMPLETED", _job_output(tmp_path)

    record = json.loads((tmp_path / "run" / "tracking.json").read_text())
    assert record["uri"] == auth_server.uri
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", RESEARCHER[0])
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", RESEARCHER[1])
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=auth_server.uri)
    run = client.get_run(record["run_id"])
    assert run.info.status == "FINISHED" and run.info.run_name == "ddp-under-slurm"
    assert run.data.tags["world_size"] == "2"  # both torchrun processes trained, rank 0 logged
    want = [(r["step"], r["loss"]) for r in read_metrics(tmp_path / "run" / "metrics.jsonl")]
    got = [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "loss")]
    assert len(want) == 4 and _same(got, want)
    assert "config.json" in {a.path for a in client.list_artifacts(run.info.run_id)}


def test_a_server_that_goes_away_mid_run_loses_nothing(local_slurm, auth_server, prepared, tmp_path, monkeypatch):
    cfg = _train_config(tmp_path / "train.yaml", prepared, "outage", steps=300, eval_interval=100)
    run_dir = tmp_path / "run"
    job = _sbatch(
        local_slurm,
        f"OMP_NUM_THREADS=1 exec {sys.executable} -m atlas_experiments.cli train --config {cfg} --out {run_dir}\n",
        tmp_path, auth_server.client_env(), cpus=1, wait=False,
    )  # fmt: skip
    deadline = time.monotonic() + 300
    while not (run_dir / "tracking.json").is_file():  # the run is open on the server: now it goes away
        assert time.monotonic() < deadline, f"the job never opened its run\n{_job_output(tmp_path)}"
        time.sleep(0.05)
    auth_server.stop()
    while local_slurm.job_state_now(job) not in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"):
        assert time.monotonic() < deadline, f"job {job} still running\n{_job_output(tmp_path)}"
        time.sleep(1)
    assert local_slurm.job_state(job) == "COMPLETED", _job_output(tmp_path)
    want = [(r["step"], r["loss"]) for r in read_metrics(run_dir / "metrics.jsonl")]
    assert len(want) == 300

    auth_server.start()
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", RESEARCHER[0])
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", RESEARCHER[1])
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=auth_server.uri)
    run_id = json.loads((run_dir / "tracking.json").read_text())["run_id"]
    before = client.get_run(run_id)
    assert before.info.status == "RUNNING"  # the server went away before the run's end was logged
    assert len(client.get_metric_history(run_id, "loss")) < len(want)

    sync = subprocess.run(
        [sys.executable, "-m", "atlas_experiments.cli", "track", "sync", "--run", str(run_dir)],
        env=auth_server.client_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert sync.returncode == 0, sync.stderr[-3000:]
    after = client.get_run(run_id)
    assert after.info.status == "FINISHED" and after.info.run_name == "outage"
    got = [(m.step, m.value) for m in client.get_metric_history(run_id, "loss")]
    assert _same(sorted(got), want)
    assert {r.info.run_id for r in client.search_runs([after.info.experiment_id]) if r.info.run_name == "outage"} == {
        run_id
    }
