"""MLflow tracking: parallel writers on one SQLite store lose nothing; names are sanitised; sync registers."""

import json
import subprocess
import sys
import textwrap

import pytest

from atlas_experiments import tracking

WRITER = textwrap.dedent(
    """
    import sys
    from atlas_experiments.tracking import MlflowTracker
    uri, name = sys.argv[1], sys.argv[2]
    t = MlflowTracker(uri, "parallel", name, {"writer": name}, flush_every_s=0.0)
    t.log_params({"lr": 0.1, "name": name})
    for step in range(40):
        t.log_metrics({"loss": 1.0 / (step + 1), "acc,none": step}, step)
    t.end("FINISHED")
    print(t.run_id, t.failed)
    """
)


def test_three_parallel_writers_lose_nothing(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, uri, f"w{i}"], stdout=subprocess.PIPE, text=True)
        for i in range(3)
    ]
    outs = [p.communicate(timeout=240)[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert all(failed == "False" for _, failed in outs)

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("parallel")
    runs = client.search_runs([exp.experiment_id])
    assert len(runs) == 3
    for run in runs:
        assert run.info.status == "FINISHED"
        assert len(client.get_metric_history(run.info.run_id, "loss")) == 40
        assert len(client.get_metric_history(run.info.run_id, "acc_none")) == 40  # comma sanitised


def test_sanitize_and_flatten():
    assert tracking.sanitize_key("acc,none") == "acc_none"
    flat = tracking.flatten({"optim": {"lr": 1e-3, "betas": [0.9, 0.95]}, "seed": 1})
    assert flat == {"optim.lr": "0.001", "optim.betas": "[0.9, 0.95]", "seed": "1"}


def test_unreachable_store_does_not_raise(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    t = tracking.open_tracker(True, "http://127.0.0.1:9/", "x", "r", run_dir, {}, resume=False)
    t.log_metrics({"loss": 1.0}, 1)
    t.end("FINISHED")  # no exception: tracking never stops training


def test_sync_run_dir_registers_metrics(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"tracking": {"experiment": "synced"}, "seed": 3}))
    (run / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "loss": 2.0 - s / 10}) + "\n" for s in range(1, 6))
    )
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_id = tracking.sync_run_dir(run, uri)
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    assert [m.step for m in client.get_metric_history(run_id, "loss")] == [1, 2, 3, 4, 5]
    assert client.get_run(run_id).data.params["seed"] == "3"


def test_sync_names_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="metrics.jsonl"):
        (tmp_path / "config.json").write_text("{}")
        tracking.sync_run_dir(tmp_path, f"sqlite:///{tmp_path / 'db.db'}")
