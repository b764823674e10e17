"""MLflow tracking: parallel writers on one SQLite store lose nothing; names are sanitised; sync registers."""

import json
import logging
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


DEAD_URI = "http://127.0.0.1:9/"


def _dead_store(monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")


def test_unreachable_store_does_not_raise(tmp_path, monkeypatch, caplog):
    """Tracking never stops training: a dead store gives a warning and the no-op tracker, and no run record."""
    _dead_store(monkeypatch)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with caplog.at_level(logging.WARNING, logger=tracking.log.name):
        t = tracking.open_tracker(True, DEAD_URI, "x", "r", run_dir, {}, resume=False)
        t.log_metrics({"loss": 1.0}, 1)
        t.end("FINISHED")
    assert type(t) is tracking.Tracker and t.run_id is None
    assert f"cannot open MLflow at {DEAD_URI}" in caplog.text
    assert not (run_dir / tracking.TRACKING_FILE).exists()  # `atlas track sync` must not find a phantom run id


def test_store_failing_mid_run_warns_once_and_goes_quiet(tmp_path, monkeypatch, caplog):
    t = tracking.MlflowTracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "x", "r", flush_every_s=0.0)
    calls = []

    def dead(*args, **kwargs):
        calls.append(kwargs)
        raise OSError("store gone (simulated)")

    monkeypatch.setattr(t.client, "log_batch", dead)
    with caplog.at_level(logging.WARNING, logger=tracking.log.name):
        t.log_metrics({"loss": 1.0}, 1)
        t.log_metrics({"loss": 0.5}, 2)
        t.log_params({"lr": 0.1})
        t.end("FINISHED")
    assert t.failed
    assert len(calls) == 1  # after the first failure nothing more is sent
    assert caplog.text.count("tracking stops") == 1


def test_training_finishes_untracked_when_the_store_is_unreachable(
    tmp_path, monkeypatch, caplog, prepared_data, train_dict
):
    from atlas_experiments.train import TrainConfig, loop
    from atlas_experiments.train.metrics import read_metrics

    _dead_store(monkeypatch)
    cfg = train_dict(prepared_data, steps=2, tracking={"enabled": True, "uri": DEAD_URI, "experiment": "x"})
    run = tmp_path / "run"
    with caplog.at_level(logging.WARNING, logger=tracking.log.name):
        result = loop.train(TrainConfig.from_dict(cfg), run)
    assert result.steps == 2 and result.run_id is None
    assert [r["step"] for r in read_metrics(run / "metrics.jsonl")] == [1, 2]
    assert (run / "checkpoints" / "final" / "COMPLETE").is_file()
    assert f"cannot open MLflow at {DEAD_URI}" in caplog.text
    assert not (run / tracking.TRACKING_FILE).exists()


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


def test_sync_completes_the_run_that_live_tracking_left_unfinished(tmp_path):
    """A store that went away after step 2: sync adds steps 3..5 once, keeps the run (its parent tag) and ends it."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"tracking": {"experiment": "pretrain"}, "seed": 3}))
    (run / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "loss": 2.0 - s / 10}) + "\n" for s in range(1, 6))
    )
    live = tracking.open_tracker(True, uri, "pretrain", "cell", run, {tracking.PARENT_TAG: "p0"}, resume=False)
    live.log_metrics({"loss": 1.9}, 1)
    live.log_metrics({"loss": 1.8}, 2)
    live.flush()  # then the store went away: no end(), the run stays RUNNING

    run_id = tracking.sync_run_dir(run, uri)
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    assert run_id == live.run_id
    got = client.get_run(run_id)
    assert got.info.status == "FINISHED" and got.data.tags[tracking.PARENT_TAG] == "p0"
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "loss")] == [
        (s, pytest.approx(2.0 - s / 10)) for s in range(1, 6)
    ]
    assert [r.info.run_id for r in client.search_runs([got.info.experiment_id])] == [run_id]
    assert tracking.sync_run_dir(run, uri) == run_id  # a second sync adds nothing
    assert len(client.get_metric_history(run_id, "loss")) == 5


def test_sync_names_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="metrics.jsonl"):
        (tmp_path / "config.json").write_text("{}")
        tracking.sync_run_dir(tmp_path, f"sqlite:///{tmp_path / 'db.db'}")


def test_parent_record_is_reused_and_children_are_summarized(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    table = tmp_path / "window.tsv"
    table.write_text("window\n1\n4\n")
    record = tmp_path / "parent.json"
    pid = tracking.open_parent(uri, "ablation_window", "window", record, {"base": {"preset": "atlas"}}, [table])
    assert tracking.open_parent(uri, "ablation_window", "window", record) == pid  # reruns keep one parent
    assert tracking.read_parent(record) == pid
    for name, val in (("window~1", 3.0), ("window~4", 2.5)):
        t = tracking.MlflowTracker(uri, "ablation_window", name, {tracking.PARENT_TAG: pid})
        t.log_metrics({"val_loss": val, "loss": val + 0.1}, step=1)
        t.end("FINISHED")
    summary = tracking.summarize_children(uri, pid)
    assert summary["best"] == "window~4"
    assert summary["cells"]["window~1"]["val_loss"] == 3.0

    runs = {r["run_name"]: r for r in tracking.load_runs(uri, ["ablation_window"])}
    parent = runs["window"]
    assert parent["tags"][tracking.ROLE_TAG] == "parent"
    assert parent["metrics"][tracking.sanitize_key("val_loss/window~4")] == 2.5
    assert parent["metrics"]["best_val_loss"] == 2.5
    assert parent["params"]["base.preset"] == "atlas"
    assert runs["window~1"]["tags"][tracking.PARENT_TAG] == pid
    # the MLflow UI opens the experiment in its training view (runs, metrics), not the GenAI one
    from mlflow.tracking import MlflowClient

    experiment = MlflowClient(uri).get_experiment_by_name("ablation_window")
    assert experiment.tags[tracking.EXPERIMENT_KIND_TAG] == "custom_model_development"


def test_read_parent_names_the_bad_record(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.json"):
        tracking.read_parent(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("[]")
    with pytest.raises(ValueError, match="bad.json"):
        tracking.read_parent(tmp_path / "bad.json")


def test_train_run_nests_under_its_parent(tmp_path, prepared_data, train_dict):
    from atlas_experiments.train import TrainConfig, loop

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    record = tmp_path / "parent.json"
    pid = tracking.open_parent(uri, "ablation_x", "x", record)
    cfg = train_dict(prepared_data, steps=2, tracking={"enabled": True, "uri": uri, "experiment": "ablation_x",
                                                       "run_name": "x~1", "parent": str(record)})  # fmt: skip
    loop.train(TrainConfig.from_dict(cfg), tmp_path / "run")
    child = next(r for r in tracking.load_runs(uri, ["ablation_x"]) if r["run_name"] == "x~1")
    assert child["tags"][tracking.PARENT_TAG] == pid and child["status"] == "FINISHED"
