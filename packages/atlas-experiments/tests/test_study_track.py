"""`atlas study track` (study/tracked.py): finished results written without an MLflow run become runs of the
`study` experiment with their provenance tags, learning curves and figures; a rerun adds only what is new, and a
foreign result is refused, never registered."""

from __future__ import annotations

import json
import time
from pathlib import Path

import yaml

from atlas_experiments import tracking
from atlas_experiments.cli import main
from atlas_experiments.study.claims import parse_claims
from atlas_experiments.study.plan import Job, plan_jobs
from atlas_experiments.study.results import finalize, partial_path
from atlas_experiments.study.tracked import curve_history

ROOT = Path(__file__).resolve().parents[3]
MQAR = {"settings": "16x2", "vocab_size": 16, "width": 16, "layers": 1, "steps": 3, "batch_size": 2, "lrs": "3e-3",
        "test_examples": 4, "val_examples": 4, "eval_every": 2, "memory_head_dim": 8, "memory_expansion": 2,
        "threads": 1}  # fmt: skip


def claims() -> dict:
    registered = yaml.safe_load((ROOT / "config" / "study" / "claims.yaml").read_text())
    claim = {"paper": {"source": "Fig. 7", "value": "x"}, "delta": {"value": 0.05, "unit": "accuracy"},
             "outcome_seen": "no: never run", "statement": "x"}  # fmt: skip
    return {
        **{key: registered[key] for key in ("schema", "registered", "rule", "paper", "rule_v2")},
        "amendments": [], "tuning_history": [], "not_registered": [],
        "protocols": {
            "mqar": {"task": "mqar", "scale": "cpu", "size": "tiny", "seeds": [1, 2, 3], "args": MQAR},
            "learn": {"task": "learnability", "scale": "cpu", "seeds": [1, 2, 3],
                      "args": {"dim": 16, "seq_len": 64, "rank": 2, "window": 8, "memories": "2x1", "threads": 1}},
        },
        "arms": {"gdn": {"preset": "gated_deltanet"}, "tpp": {"preset": "transformer_pp"},
                 "low_rank": {"select": {"setting": "low_rank", "memory": "2x1"}},
                 "mlp": {"select": {"setting": "mlp", "memory": "2x1"}}},
        "claims": [
            {**claim, "id": "a.mqar", "arms": ["tpp", "gdn"], "predicted": {"order": ["tpp", "gdn"]},
             "metric": {"task": "mqar", "name": "accuracy", "better": "higher"},
             "test": {"scale": "cpu", "testable": True, "protocol": "mqar", "evidence": "proxy"}},
            {**claim, "id": "b.learn", "arms": ["low_rank", "mlp"], "predicted": {"order": ["low_rank", "mlp"]},
             "metric": {"task": "learnability", "name": "final_loss", "better": "lower"},
             "test": {"scale": "cpu", "testable": True, "protocol": "learn", "evidence": "direct"}},
        ],
    }  # fmt: skip


def hand_made(job: Job, root: Path, data: dict) -> Path:
    partial = partial_path(job, root)
    partial.parent.mkdir(parents=True, exist_ok=True)
    partial.write_text(json.dumps(data))
    return finalize(job, root, 1.0)


def study_runs(uri: str) -> dict[str, dict]:
    return {run["run_name"]: run for run in tracking.load_runs(uri, ["study"])}


def test_finished_results_become_runs_once_with_curves_figures_and_provenance(tmp_path):
    data = claims()
    (tmp_path / "claims.yaml").write_text(yaml.safe_dump(data))
    registry = parse_claims(data)
    jobs = {job.name: job for job in plan_jobs(registry, ["cpu"])}
    root = tmp_path / "study"
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    argv = ["study", "track", "--claims", str(tmp_path / "claims.yaml"), "--root", str(root), "--tracking-uri", uri,
            "--no-progress"]  # fmt: skip
    # one job really run without tracking (its curve recorded every 2 steps), then registered afterwards
    run_argv = ["study", "run", "--claims", str(tmp_path / "claims.yaml"), "--root", str(root), "--no-track"]
    assert main([*run_argv, "--job", "mqar/gdn/seed1"]) == 0
    real = json.loads((root / "mqar" / "gdn" / "seed1.json").read_text())
    assert main(argv) == 0 and set(study_runs(uri)) == {"mqar/gdn/seed1"}
    run = study_runs(uri)["mqar/gdn/seed1"]
    assert run["tags"]["study.config_hash"] == real["study"]["config_hash"]
    assert run["tags"]["study.finished"] == real["study"]["finished"] and run["tags"]["study.seed"] == "1"
    assert run["metrics"]["acc/gdn/d_16"] == real["metrics"]["acc/gdn/d=16"]
    (trained,) = real["details"]["runs"]
    assert tracking.metric_history(uri, run["run_id"], "curve/val_acc/gdn/d_16/lr_0.003") == [
        (int(step), value) for step, value in trained["curve"]
    ]
    artifacts = tmp_path / "mlartifacts"
    names = {p.name for p in artifacts.rglob("*") if p.is_file()}
    assert {"seed1.json", "seed1.png"} <= names

    # hand-made results: a learnability job (arm "all"), a shared run, a foreign file and a job the pilot dropped
    learn = jobs["learn/all/seed1"]
    curves = {"layers=2/exp=1": {"1_low_rank": {"position": [16.5, 48.5], "loss": [0.9, 0.4]}}}
    hand_made(learn, root, {"metrics": {"final_loss/layers=2/exp=1/1_low_rank": 0.4}, "details": {"curves": curves}})
    expected = {"curve/loss/layers=2/exp=1/1_low_rank": [(16, 0.9), (48, 0.4)]}
    assert curve_history({"details": {"curves": curves}}) == expected
    shared = hand_made(jobs["mqar/tpp/seed1"], root, {"metrics": {"acc/tpp/d=16": 0.5}})
    block = json.loads(shared.read_text())
    block["study"]["shared"] = {"job": "other/tpp/seed1"}
    shared.write_text(json.dumps(block))
    foreign = jobs["mqar/tpp/seed2"].result(root)
    foreign.write_text(shared.read_text())  # seed 1's result under seed 2's name
    jobs["mqar/gdn/seed2"].result(root).write_text(json.dumps({"skipped": "dropped by the pilot"}))
    assert main(argv) == 1  # the foreign file is refused: not registered, and the exit code says so
    runs = study_runs(uri)
    assert set(runs) == {"mqar/gdn/seed1", "learn/all/seed1", "mqar/tpp/seed1"}
    assert runs["mqar/tpp/seed1"]["tags"]["study.shared_from"] == "other/tpp/seed1"
    assert runs["learn/all/seed1"]["tags"]["study.arm"] == "all"
    history = tracking.metric_history(uri, runs["learn/all/seed1"]["run_id"], "curve/loss/layers_2/exp_1/1_low_rank")
    assert history == [(16, 0.9), (48, 0.4)]

    # a rerun registers nothing twice; a job whose result was written again gets a run of its own
    foreign.unlink()
    assert main(argv) == 0 and len(tracking.load_runs(uri, ["study"])) == 3
    time.sleep(1.1)  # the finish time has a resolution of one second
    hand_made(learn, root, {"metrics": {"final_loss/layers=2/exp=1/1_low_rank": 0.3}})
    assert main(argv) == 0 and len(tracking.load_runs(uri, ["study"])) == 4


def test_a_live_tracked_job_logs_its_curve_and_counts_as_registered(tmp_path):
    data = claims()
    (tmp_path / "claims.yaml").write_text(yaml.safe_dump(data))
    root = tmp_path / "study"
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    common = ["--claims", str(tmp_path / "claims.yaml"), "--root", str(root), "--tracking-uri", uri]
    assert main(["study", "run", *common, "--job", "mqar/tpp/seed3"]) == 0
    (run,) = tracking.load_runs(uri, ["study"])
    assert run["tags"]["study.job"] == "mqar/tpp/seed3"
    assert len(tracking.metric_history(uri, run["run_id"], "curve/val_acc/tpp/d_16/lr_0.003")) >= 1
    assert main(["study", "track", *common, "--no-progress"]) == 0
    assert len(tracking.load_runs(uri, ["study"])) == 1


def test_an_unreadable_store_is_named_and_nothing_is_registered(tmp_path, capsys):
    (tmp_path / "claims.yaml").write_text(yaml.safe_dump(claims()))
    broken = tmp_path / "broken.db"
    broken.write_text("not a database")
    argv = ["study", "track", "--claims", str(tmp_path / "claims.yaml"), "--root", str(tmp_path / "study"),
            "--tracking-uri", f"sqlite:///{broken}", "--no-progress"]  # fmt: skip
    assert main(argv) == 2
    assert f"cannot read the study runs of the MLflow store at sqlite:///{broken}" in capsys.readouterr().err
