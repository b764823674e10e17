"""Artifacts logged to a SQLite store land next to the database (`<db dir>/mlartifacts/<experiment>/...`), never in
MLflow's default `./mlruns` under the working directory: an evaluation's run (`track_result`, the path every
`atlas eval` takes) and a bare tracker alike."""

from __future__ import annotations

import json

from atlas_experiments import tracking
from atlas_experiments.evaluation.results import EvalResult, track_result


def test_artifacts_go_next_to_the_store_not_into_mlruns_under_the_working_directory(tmp_path, monkeypatch):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    results = tmp_path / "results"
    out = results / "eval" / "niah.json"
    out.parent.mkdir(parents=True)
    out.write_text(json.dumps({"metrics": {"acc": 1.0}}))
    uri = f"sqlite:///{results / 'mlflow.db'}"

    result = EvalResult(task="niah", model="tiny", metrics={"acc": 1.0})
    run_id = track_result(result, uri=uri, results_root=results, experiment="eval_niah", artifact=out)
    assert run_id is not None
    tracker = tracking.MlflowTracker(uri, "bare", "r", flush_every_s=0.0)
    tracker.log_artifact(out)
    tracker.end("FINISHED")

    assert not tracker.failed
    assert not (cwd / "mlruns").exists()
    assert sorted(p.name for p in (results / "mlartifacts").rglob("niah.json")) == ["niah.json", "niah.json"]
    assert {p.relative_to(results / "mlartifacts").parts[0] for p in (results / "mlartifacts").rglob("*.json")} == {
        "eval_niah",
        "bare",
    }
