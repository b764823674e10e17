"""One tracking-URI rule for every command: `--tracking-uri` > $MLFLOW_TRACKING_URI > sqlite:///<results>/mlflow.db,
with a relative SQLite path made absolute when the command runs. Each command is run through `atlas ...` with the
MLflow calls replaced by recorders, so only the URI it resolves is compared."""

from __future__ import annotations

import json

import pytest
import yaml

from atlas_experiments import tracking
from atlas_experiments.cli import main

SERVER = "http://10.0.0.5:5000"


def test_flag_then_environment_then_sqlite_under_the_results(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    here = tmp_path.resolve()
    assert tracking.resolve_tracking_uri(None, "res") == f"sqlite:///{here}/res/mlflow.db"
    assert tracking.resolve_tracking_uri(None) == f"sqlite:///{here}/mlflow.db"
    assert tracking.resolve_tracking_uri("", "res") == f"sqlite:///{here}/res/mlflow.db"  # an empty flag is unset
    monkeypatch.setenv("MLFLOW_TRACKING_URI", SERVER)
    assert tracking.resolve_tracking_uri(None, "res") == SERVER
    assert tracking.resolve_tracking_uri("sqlite:///x/m.db", "res") == f"sqlite:///{here}/x/m.db"


def test_relative_sqlite_paths_stay_relative_only_when_asked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert tracking.resolve_tracking_uri(None, "results/x", absolute=False) == "sqlite:///results/x/mlflow.db"
    assert tracking.resolve_tracking_uri("sqlite:///a.db", absolute=False) == "sqlite:///a.db"
    for uri in (f"sqlite:///{tmp_path}/a.db", "sqlite:///:memory:", "sqlite://", SERVER, "databricks"):
        assert tracking.absolute_sqlite_uri(uri) == uri
    assert tracking.absolute_sqlite_uri("sqlite:///a.db?timeout=5") == f"sqlite:///{tmp_path.resolve()}/a.db?timeout=5"


class _Stop(Exception):
    """Ends `atlas train` once it has named its store: the rest of training is not what is tested."""


@pytest.fixture
def resolved(monkeypatch, tmp_path, prepared_data):
    """`run(name, flag)` runs one command with its results under `tmp_path/results` and returns the URI it
    resolved; `flag` (or None) is its `--tracking-uri`."""
    import atlas_experiments.reporting.build as build

    monkeypatch.chdir(tmp_path)
    seen: list[str] = []

    class Recorder:
        def __init__(self, uri, *args, **kwargs):
            seen.append(uri)
            raise RuntimeError("no store in this test")  # eval results: tracking unreachable, the JSON remains

    def open_tracker(enabled, uri, *args, **kwargs):
        seen.append(uri)
        raise _Stop

    monkeypatch.setattr(tracking, "MlflowTracker", Recorder)
    monkeypatch.setattr(tracking, "open_tracker", open_tracker)
    monkeypatch.setattr(tracking, "sync_run_dir", lambda run, uri, experiment: seen.append(uri) or "id")
    monkeypatch.setattr(tracking, "open_parent", lambda uri, *args: seen.append(uri) or "id")
    monkeypatch.setattr(build, "build_reports", lambda uri, *args: seen.append(uri) or [])

    results = tmp_path / "results"
    config = tmp_path / "train.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "model": {"preset": "transformer_pp", "size": "tiny"},
                "data": {"path": str(prepared_data), "seq_len": 16},
                "global_batch_tokens": 64,
                "micro_batch": 4,
                "steps": 1,
                "device": "cpu",
                "tracking": {"enabled": True, "experiment": "t"},
            }
        )
    )
    tiny_lm = ["--preset", "transformer_pp", "--data", str(prepared_data), "--no-progress"]
    learnability = "eval learnability --dim 4 --seq-len 16 --window 4 --rank 1 --memories 2x1 --bins 4 --threads 1"
    commands = {
        "train": ["train", "--config", str(config), "--out", str(results / "run")],
        "eval ppl": ["eval", "ppl", *tiny_lm, "--lengths", "16", "--max-tokens", "64", "--out", f"{results}/p.json"],
        "eval learnability": [*learnability.split(), "--out", f"{results}/l.json"],
        "report": ["report", "--results", str(results), "--out", str(tmp_path / "reports")],
        "track sync": ["track", "sync", "--run", str(results / "run")],
        "track parent": ["track", "parent", "--experiment", "e", "--name", "n", "--record", f"{results}/parent.json"],
    }

    def run(name: str, flag: str | None) -> str:
        argv = commands[name] + (["--tracking-uri", flag] if flag is not None else [])
        seen.clear()
        if name == "train":
            with pytest.raises(_Stop):
                main(argv)
        else:
            assert main(argv) == 0
        (uri,) = seen
        return uri

    run.names = list(commands)
    return run


def test_every_command_resolves_the_same_uri(resolved, tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    here = tmp_path.resolve()
    default = {name: resolved(name, None) for name in resolved.names}
    assert set(default.values()) == {f"sqlite:///{here}/results/mlflow.db"}, default
    flag = {name: resolved(name, "sqlite:///store/mlflow.db") for name in resolved.names}
    assert set(flag.values()) == {f"sqlite:///{here}/store/mlflow.db"}, flag  # relative: from the working dir

    monkeypatch.setenv("MLFLOW_TRACKING_URI", SERVER)
    env = {name: resolved(name, None) for name in resolved.names}
    assert set(env.values()) == {SERVER}, env
    flag_over_env = {name: resolved(name, "sqlite:///store/mlflow.db") for name in resolved.names}
    assert flag_over_env == flag


def test_train_flag_replaces_the_config_uri(resolved, tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    config = tmp_path / "train.yaml"
    data = yaml.safe_load(config.read_text())
    data["tracking"]["uri"] = "sqlite:///from_config.db"
    config.write_text(yaml.safe_dump(data))
    assert resolved("train", None) == f"sqlite:///{tmp_path.resolve()}/from_config.db"
    assert resolved("train", SERVER) == SERVER
    assert json.loads((tmp_path / "results" / "run" / "config.json").read_text())["tracking"]["uri"] == SERVER


def test_track_keeps_uri_as_a_hidden_deprecated_spelling(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    seen = []
    monkeypatch.setattr(tracking, "sync_run_dir", lambda run, uri, experiment: seen.append(uri) or "id")
    assert main(["track", "sync", "--run", str(tmp_path / "run"), "--uri", SERVER]) == 0
    assert seen == [SERVER]
    assert "--uri is deprecated; use --tracking-uri" in capsys.readouterr().err
    for sub in ("sync", "parent"):
        with pytest.raises(SystemExit):
            main(["track", sub, "--help"])
        text = capsys.readouterr().out
        assert "--tracking-uri" in text and "--uri" not in text.replace("--tracking-uri", "")
