"""Shared runs (study/shared.py): two registered jobs that compute the same numbers run once, and the second job's
result is written from the first's, loads as its own and costs nothing in the progress table."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import yaml

from atlas_experiments import tracking
from atlas_experiments.cli import main
from atlas_experiments.study.claims import load_claims, parse_claims
from atlas_experiments.study.plan import Job, plan_jobs
from atlas_experiments.study.progress import job_seconds, study_progress
from atlas_experiments.study.results import config_hash, load
from atlas_experiments.study.shared import arm_fingerprint, find_twin, may_be_twins, shared_from

ROOT = Path(__file__).resolve().parents[3]
ARGS = {"settings": "16x2", "vocab_size": 16, "width": 16, "layers": 1, "steps": 3, "batch_size": 2, "lrs": "3e-3",
        "test_examples": 4, "val_examples": 4, "eval_every": 2, "memory_head_dim": 8, "memory_expansion": 2,
        "threads": 1}  # fmt: skip


def _header() -> dict:
    """The registered claims file's rules, for a small claims file of our own."""
    registered = yaml.safe_load((ROOT / "config" / "study" / "claims.yaml").read_text())
    return {key: registered[key] for key in ("schema", "registered", "rule", "paper", "rule_v2")}


def twin_claims() -> dict:
    """Two MQAR protocols that differ only in sizing every memory to Atlas's: Atlas is the same model in both, DeltaNet
    is not; one claim per protocol (the mqar_v2_fig7_cpu / mqar_v2_cpu pair in small)."""
    claim = {"paper": {"source": "Fig. 7", "value": "x"}, "delta": {"value": 0.05, "unit": "accuracy"},
             "metric": {"task": "mqar", "name": "accuracy", "better": "higher"}, "outcome_seen": "no: never run",
             "arms": ["atlas", "deltanet"], "predicted": {"order": ["atlas", "deltanet"]}}  # fmt: skip
    return {
        **_header(),
        "amendments": [], "tuning_history": [], "not_registered": [],
        "protocols": {
            "matched": {"task": "mqar", "scale": "cpu", "size": "tiny", "seeds": [1, 2, 3],
                        "args": {**ARGS, "match_memory": "atlas"}},
            "plain": {"task": "mqar", "scale": "cpu", "size": "tiny", "seeds": [1, 2, 3], "args": ARGS},
        },
        "arms": {"atlas": {"preset": "atlas"}, "deltanet": {"preset": "deltanet"}},
        "claims": [
            {**claim, "id": "a.matched", "statement": "x", "test": {"scale": "cpu", "testable": True,
                                                                    "protocol": "matched", "evidence": "proxy"}},
            {**claim, "id": "b.plain", "statement": "x", "test": {"scale": "cpu", "testable": True,
                                                                  "protocol": "plain", "evidence": "proxy"}},
        ],
    }  # fmt: skip


def _write(tmp_path: Path, data: dict) -> tuple[str, object]:
    path = tmp_path / "claims.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path), parse_claims(data)


def _job(registry, protocol: str, arm: str, seed: int = 1) -> Job:
    return Job(registry.protocols[protocol], registry.arms[arm], seed)


def test_twins_train_the_same_numbers_and_the_second_job_shares_the_first_run(tmp_path):
    claims, registry = _write(tmp_path, twin_claims())
    matched, plain = _job(registry, "matched", "atlas"), _job(registry, "plain", "atlas")
    assert arm_fingerprint(matched.protocol, matched.arm) == arm_fingerprint(plain.protocol, plain.arm)
    # the claim behind sharing, checked by training both: the same metrics, curve and losses, to the last bit
    trained = tmp_path / "trained"
    for job in (matched, plain):
        argv = ["study", "run", "--claims", claims, "--root", str(trained), "--job", job.name, "--no-track"]
        assert main([*argv, "--no-share"]) == 0
    a, b = (load(job, trained) for job in (matched, plain))
    assert a["metrics"] == b["metrics"] and "acc/atlas/d=16" in a["metrics"]
    assert [r["curve"] for r in a["details"]["runs"]] == [r["curve"] for r in b["details"]["runs"]]
    assert [r["train"]["loss_last"] for r in a["details"]["runs"]] == [r["train"]["loss_last"]
                                                                       for r in b["details"]["runs"]]  # fmt: skip
    # by default the second job does not train: its result is the first's, under its own provenance
    shared = tmp_path / "shared"
    (shared / "matched").mkdir(parents=True)
    (shared / "matched" / "atlas").symlink_to(trained / "matched" / "atlas", target_is_directory=True)
    jobs = plan_jobs(registry, ["cpu"])
    assert find_twin(plain, jobs, shared).name == matched.name
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert main(["study", "run", "--claims", claims, "--root", str(shared), "--job", plain.name, "--tracking-uri",
                 uri]) == 0  # fmt: skip
    (run,) = tracking.load_runs(uri, ["study"])  # tracked as its own run, saying whose run it shares
    assert run["run_name"] == plain.name and run["tags"]["study.shared_from"] == matched.name
    assert run["tags"]["study.config_hash"] == config_hash(plain) and any(k.startswith("acc") for k in run["metrics"])
    c = load(plain, shared)  # loads as the job's own result (its config hash)
    assert c["metrics"] == a["metrics"] and c["details"]["runs"] == a["details"]["runs"]
    assert shared_from(c) == matched.name and c["study"]["job"] == plain.name and job_seconds(c) == 0.0
    assert c["study"]["commit"] == a["study"]["commit"] and c["study"]["shared"]["fingerprint"]
    # a share of a share names the job that computed the run
    data = copy.deepcopy(twin_claims())
    data["protocols"]["again"] = copy.deepcopy(data["protocols"]["plain"])
    data["claims"].append({**data["claims"][1], "id": "c.again", "test": {**data["claims"][1]["test"],
                                                                          "protocol": "again"}})  # fmt: skip
    claims, registry = _write(tmp_path, data)
    shared.joinpath("matched", "atlas").unlink()
    assert main(["study", "run", "--claims", claims, "--root", str(shared), "--job", "again/atlas/seed1",
                 "--no-track"]) == 0  # fmt: skip
    assert shared_from(load(_job(registry, "again", "atlas"), shared)) == matched.name
    # the report says which results share a run
    assert main(["study", "report", "--claims", claims, "--root", str(shared), "--out", str(tmp_path / "report")]) == 0
    text = (tmp_path / "report" / "verdicts.md").read_text()
    assert "2 of them share the run of a finished job" in text and "again/atlas/seed1" in text


def test_runs_that_differ_get_different_fingerprints_and_other_tasks_none():
    registry = parse_claims(twin_claims())
    # only jobs of the same task, seed and arm name (the metrics' labels) are fingerprinted at all
    assert may_be_twins(_job(registry, "matched", "atlas"), _job(registry, "plain", "atlas"))
    assert not may_be_twins(_job(registry, "matched", "atlas"), _job(registry, "plain", "deltanet"))
    assert not may_be_twins(_job(registry, "matched", "atlas", 1), _job(registry, "plain", "atlas", 2))
    assert not may_be_twins(_job(registry, "plain", "atlas"), _job(registry, "plain", "atlas"))
    # DeltaNet sized to Atlas's memory is another model than DeltaNet at its preset's size
    assert arm_fingerprint(registry.protocols["matched"], registry.arms["deltanet"]) != arm_fingerprint(
        registry.protocols["plain"], registry.arms["deltanet"]
    )
    for change in ({"settings": "16x4"}, {"threads": 2}, {"lrs": "1e-3"}, {"steps": 4}):
        data = twin_claims()
        data["protocols"]["plain"]["args"] = {**ARGS, **change}
        other = parse_claims(data)
        assert arm_fingerprint(other.protocols["plain"], other.arms["atlas"]) != arm_fingerprint(
            registry.protocols["matched"], registry.arms["atlas"]
        ), change
    data = twin_claims()
    data["protocols"]["learn"] = {"task": "learnability", "scale": "cpu", "seeds": [1, 2, 3],
                                  "args": {"dim": 16, "seq_len": 64, "memories": "2x1", "threads": 1}}  # fmt: skip
    other = parse_claims(data)
    assert arm_fingerprint(other.protocols["learn"], other.arms["atlas"]) is None


def test_the_registered_twins_are_atlas_with_and_without_sizing_to_itself():
    """In the registered study, the Table 6 protocol's Atlas arm is the Fig. 7 protocol's (width 64; sizing Atlas to
    its own memory changes nothing); its ablations, the extrapolation protocol's Atlas and width 128 are not."""
    registry = load_claims(ROOT / "config" / "study" / "claims.yaml")
    p = registry.protocols
    fig7 = arm_fingerprint(p["mqar_v2_fig7_cpu"], registry.arms["atlas_w0"])
    assert arm_fingerprint(p["mqar_v2_cpu"], registry.arms["atlas_w0"]) == fig7
    others = [
        (p["mqar_v2_cpu"], registry.arms["atlas_c1_w0"]),
        (p["mqar_v2_extrap_cpu"], registry.arms["atlas_w0"]),
        (p["mqar_v2_fig7_d128_cpu"], registry.arms["atlas_w0"]),
        (p["mqar_v2_fig7_cpu"], registry.arms["omeganet_w0"]),
    ]
    assert all(arm_fingerprint(protocol, arm) != fig7 for protocol, arm in others)


def test_progress_prices_a_job_whose_twin_finished_at_nothing_and_unfinished_twins_once(tmp_path):
    registry = parse_claims(twin_claims())
    jobs = plan_jobs(registry, ["cpu"])
    root = tmp_path / "study"

    def finish(job: Job, seconds: float) -> None:
        path = job.result(root)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"metrics": {}, "details": {"runs": [{"train": {"seconds": seconds}}]},
                                    "study": {"job": job.name, "config_hash": config_hash(job)}}))  # fmt: skip

    # seed 1 of Atlas finished in the matched protocol (1 h); seeds 2 and 3 of Atlas nowhere; DeltaNet in neither
    finish(_job(registry, "matched", "atlas", 1), 3600.0)
    rows = {r.name: r for r in study_progress(registry, ["cpu"], jobs, root)}
    matched, plain, every = rows["a.matched"], rows["b.plain"], rows["all jobs (each once)"]
    assert (matched.done, matched.left_h, matched.unpriced) == (1, 2.0, 3)  # Atlas seeds 2, 3 at Atlas's hour
    assert (plain.done, plain.left_h, plain.unpriced) == (0, 0.0, 5)  # seed 1 will share; no plain job finished
    # every job once: Atlas seeds 2 and 3 are one run each for both protocols (priced once), plain's seed 1 shares
    assert (every.done, every.left_h, every.unpriced) == (1, 2.0, 6)
