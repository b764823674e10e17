"""Running the claims study: the plan of jobs, the pilot's projection and refusal, one real job end to end (MQAR,
MAD), and verdicts from results (the rule itself: test_study_decision.py)."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from atlas_data.synthetic.mad import generate_mad
from atlas_experiments.cli import main
from atlas_experiments.commands.eval import task_parser
from atlas_experiments.commands.options import options_namespace
from atlas_experiments.evaluation.tasks import TASKS
from atlas_experiments.study import gates, pilot
from atlas_experiments.study.claims import ClaimsError, load_claims, parse_claims
from atlas_experiments.study.execute import lm_train_config, resume_folder, run_job
from atlas_experiments.study.plan import Job, metric_key, plan_jobs
from atlas_experiments.study.report import judge_all
from atlas_experiments.study.report_v2 import judge_v2
from atlas_experiments.study.results import ResultError, arm_values, config_hash, finalize, partial_path
from atlas_experiments.study.results import load as load_result

ROOT = Path(__file__).resolve().parents[3]
TINY_MQAR = {"settings": "16x2", "vocab_size": 16, "width": 16, "layers": 1, "steps": 2, "batch_size": 2,
             "lrs": "3e-3", "test_examples": 4, "memory_head_dim": 8, "memory_expansion": 2, "threads": 1}  # fmt: skip


def hand_made(job: Job, root: Path, metrics: dict) -> Path:
    """A result with these metrics, written the way a finished job writes it (partial file, then provenance)."""
    partial = partial_path(job, root)
    partial.parent.mkdir(parents=True, exist_ok=True)
    partial.write_text(json.dumps({"metrics": metrics}))
    return finalize(job, root, 0.0)


def tiny_claims() -> dict:
    """Two arms on a tiny MQAR protocol (one testable claim), a learnability claim, a GPU and a cluster claim."""
    claim = {"paper": {"source": "Table 6", "value": "x"}, "delta": {"value": 0.05, "unit": "accuracy"},
             "metric": {"task": "mqar", "name": "accuracy", "better": "higher"}}  # fmt: skip
    return {
        "schema": 2, "registered": "2026-12-01", "rule": {"alpha": 0.05, "ci_level": 0.90, "min_seeds": 3},
        "paper": {"version": "v1", "note": "x"},
        "rule_v2": {"registered": "2026-12-03", "alpha": 0.05, "ci_level": 0.90, "exact_max_n": 12,
                    "correction": "holm",
                    "power": {"effect": 2.0, "target": 0.8, "min_seeds": 5}},
        "amendments": [], "tuning_history": [], "not_registered": [],
        "protocols": {
            "mqar_tiny": {"task": "mqar", "scale": "cpu", "size": "tiny", "seeds": [1, 2, 3], "args": TINY_MQAR},
            "learn": {"task": "learnability", "scale": "cpu", "seeds": [1, 2, 3],
                      "args": {"dim": 16, "seq_len": 64, "rank": 2, "window": 8, "memories": "2x1", "threads": 1}},
            "lm": {"task": "lm", "scale": "gpu", "size": "tiny", "seeds": [1, 2, 3],
                   "model_overrides": {"hidden_size": 32, "intermediate_size": 64},
                   "args": {"data": "embedded", "seq_len": 32, "global_batch_tokens": 256, "micro_batch": 4,
                            "steps": 2, "optim": {"lr": 1e-3}, "eval_batches": 1, "precision": "fp32",
                            "device": "cpu"}},
        },
        "arms": {"gdn": {"preset": "gated_deltanet"}, "tpp": {"preset": "transformer_pp"},
                 "gdn_small": {"preset": "gated_deltanet", "overrides": {"num_memory_heads": 4}},
                 "low_rank": {"select": {"setting": "low_rank", "memory": "2x1"}},
                 "mlp": {"select": {"setting": "mlp", "memory": "2x1"}}},
        "claims": [
            {**claim, "id": "a.mqar", "statement": "tpp beats gdn", "arms": ["tpp", "gdn"],
             "predicted": {"order": ["tpp", "gdn"]},
             "test": {"scale": "cpu", "testable": True, "protocol": "mqar_tiny", "evidence": "proxy"},
             "outcome_seen": "no: never run"},
            {**claim, "id": "b.learn", "statement": "low rank is easier", "arms": ["low_rank", "mlp"],
             "predicted": {"order": ["low_rank", "mlp"]},
             "metric": {"task": "learnability", "name": "final_loss", "better": "lower"},
             "test": {"scale": "cpu", "testable": True, "protocol": "learn", "evidence": "direct"},
             "outcome_seen": "no: never run"},
            {**claim, "id": "c.lm", "statement": "gdn beats gdn_small", "arms": ["gdn", "gdn_small"],
             "predicted": {"order": ["gdn", "gdn_small"]},
             "metric": {"task": "lm", "name": "val_loss", "better": "lower"},
             "test": {"scale": "gpu", "testable": True, "protocol": "lm", "evidence": "direct"},
             "outcome_seen": "no: never run"},
            {**claim, "id": "d.paper", "statement": "far away", "arms": ["gdn", "tpp"],
             "predicted": {"order": ["gdn", "tpp"]},
             "test": {"scale": "cluster", "testable": False, "evidence": "direct"}, "why": "paper scale only"},
        ],
    }  # fmt: skip


def test_the_registered_plan_at_cpu_scale():
    registry = load_claims(ROOT / "config" / "study" / "claims.yaml")
    jobs = plan_jobs(registry, ["cpu"])
    names = [j.name for j in jobs]
    assert len(names) == len(set(names))  # claims sharing a protocol and arm share its runs
    assert "mqar_cpu/atlas/seed10" in names and "learnability_cpu/all/seed14" in names
    assert not any(n.startswith("lm_gpu") for n in names)  # the GPU panel's, not the CPU plan's
    job = next(j for j in jobs if j.name == "mqar_fig7_cpu/gated_deltanet/seed11")
    options = job.options("r")
    assert options["models"] == "r/arms/gated_deltanet.json" and options["match_memory"] == "atlas"
    assert (options["seed"], options["out"]) == (11, str(job.result("r")))
    argv = job.argv("r")  # the same job as a command line, to rerun by hand
    assert argv[:2] == ["eval", "mqar"] and argv[argv.index("--models") + 1] == "r/arms/gated_deltanet.json"
    assert argv[-4:] == ["--seed", "11", "--out", str(job.result("r"))]
    # the in-process run takes the same options, checked and typed by the command's own parser
    args = options_namespace(task_parser("mqar"), options, where="job")
    assert (args.width, args.steps, args.seed) == ("64", 400, 11)
    assert args.handler is TASKS["mqar"].run


def test_metric_keys_are_where_the_commands_write_them():
    registry = parse_claims(tiny_claims())
    claim, learn = registry.claim("a.mqar"), registry.claim("b.learn")
    assert metric_key(claim, registry.protocol_of(claim), registry.arms["gdn"]) == "acc/gdn/d=16"
    key = metric_key(learn, registry.protocol_of(learn), registry.arms["mlp"])
    assert key == "final_loss/layers=2/exp=1/2_mlp"


def test_the_pilot_projects_and_refuses_with_the_numbers(monkeypatch):
    registry = parse_claims(tiny_claims())
    jobs = [j for j in plan_jobs(registry, ["cpu"]) if j.protocol.task == "mqar"]
    clock = {"t": 0.0}

    def fake_run(job, root, overrides):  # 3 s fixed + 0.5 s per step for tpp, 0.25 s for gdn
        clock["t"] += 3.0 + overrides["steps"] * (0.5 if job.arm.name == "tpp" else 0.25)

    monkeypatch.setattr(pilot.time, "perf_counter", lambda: clock["t"])
    timings = {t.arm: t for t in pilot.measure(jobs, fake_run)}
    assert timings["tpp"].per_unit_s == pytest.approx(0.5) and timings["tpp"].fixed_s == pytest.approx(3.0)
    assert timings["gdn"].job_s == pytest.approx(3.0 + 2 * 0.25) and timings["gdn"].jobs == 3
    plan = pilot.project(list(timings.values()), cores=2)
    assert plan["projected_wall_s"] == pytest.approx(3 * (4.0 + 3.5) / 2, abs=0.1)
    pilot.check_budget(plan, budget_minutes=1)
    with pytest.raises(pilot.BudgetError, match=r"about 0\.2 min on 2 cores \(6 jobs.*over the budget of 0\.1 min"):
        pilot.check_budget(plan, budget_minutes=0.1)


def test_the_pilot_times_only_the_arms_asked_for_or_those_not_started(tmp_path, monkeypatch, capsys):
    """`atlas study pilot --only` / `--unstarted`: what is left of a study is priced without timing what ran."""
    from atlas_experiments.commands import study as study_command

    timed_arms = []

    def fake_measure(jobs, run):
        timed_arms.extend(sorted({f"{j.protocol.name}/{j.arm.name if j.arm else 'all'}" for j in jobs}))
        return [pilot.Timing(j.protocol.name, j.arm.name if j.arm else "all", "steps", 2, 1, 1.0, 0.0) for j in jobs]

    monkeypatch.setattr(pilot, "measure", fake_measure)
    claims, root = _claims_file(tmp_path), tmp_path / "study"
    registry = parse_claims(tiny_claims())
    hand_made(Job(registry.protocols["mqar_tiny"], registry.arms["tpp"], 1), root, {"acc/tpp/d=16": 0.5})
    argv = ["study", "pilot", "--claims", claims, "--root", str(root), "--budget-minutes", "60", "--out"]
    assert main([*argv, str(tmp_path / "a.json"), "--only", "mqar_tiny/gdn,learn"]) == 0
    assert timed_arms == ["learn/all", "mqar_tiny/gdn"]
    timed_arms.clear()
    assert main([*argv, str(tmp_path / "b.json"), "--unstarted"]) == 0
    assert timed_arms == ["learn/all", "mqar_tiny/gdn"]  # tpp has a finished job: its own jobs price it
    with pytest.raises(ValueError, match=r"--only: not a protocol or protocol/arm of the plan: mqar_tiny/nope"):
        study_command._pilot_jobs(plan_jobs(registry, ["cpu"]), _namespace(only="mqar_tiny/nope", root=root))


def _namespace(**kw):
    import argparse

    return argparse.Namespace(**{"only": None, "unstarted": False, **kw})


def test_the_pilot_times_warm_runs_and_bounds_a_fit_without_slope(monkeypatch):
    """2026-12-02: the first arm's short run paid the process's one-time costs, the fit's slope came out <= 0 and the
    pilot projected a 490 s Atlas job at 15 s. The warm-up run absorbs such costs; a fit still without slope falls
    back to t_b / b per unit, an upper bound."""
    registry = parse_claims(tiny_claims())
    jobs = [j for j in plan_jobs(registry, ["cpu"]) if j.protocol.task == "mqar"]
    clock, seen = {"t": 0.0}, set()

    def first_run_is_slow(job, root, overrides):  # 5 s once per arm (timed, a 4-step run: 9 s, slope 0.375), 1 s a step
        clock["t"] += overrides["steps"] * 1.0 + (5.0 if job.arm.name not in seen else 0.0)
        seen.add(job.arm.name)

    monkeypatch.setattr(pilot.time, "perf_counter", lambda: clock["t"])
    timings = pilot.measure(jobs, first_run_is_slow)
    assert all(t.per_unit_s == pytest.approx(1.0) and t.fixed_s == pytest.approx(0.0) for t in timings)

    def noisy(job, root, overrides):  # the longer run happens to come out faster: no slope to fit
        clock["t"] += 9.0 if overrides["steps"] == pilot.KNOBS["mqar"][1] else 6.0

    timings = pilot.measure(jobs, noisy)
    b = pilot.KNOBS["mqar"][2]
    assert all(t.per_unit_s == pytest.approx(6.0 / b) and t.fixed_s == 0.0 for t in timings)


@pytest.mark.usefixtures("one_thread")
def test_jobs_run_and_the_verdicts_follow_the_rule(tmp_path):
    claims = tmp_path / "claims.yaml"
    claims.write_text(yaml.safe_dump(tiny_claims()))
    root = tmp_path / "study"
    common = ["--claims", str(claims), "--root", str(root)]
    assert main(["study", "run", *common, "--job", "mqar_tiny/gdn/seed1", "--no-track"]) == 0
    result = json.loads((root / "mqar_tiny" / "gdn" / "seed1.json").read_text())
    assert "acc/gdn/d=16" in result["metrics"] and result["protocol"]["seed"] == 1
    # the figures take the finished result's name, nothing beside it reads as unfinished
    assert sorted(p.name for p in (root / "mqar_tiny" / "gdn").iterdir()) == ["seed1.json", "seed1.png"]
    assert result["details"]["figures"] == [str(root / "mqar_tiny" / "gdn" / "seed1.png")]
    registry = parse_claims(tiny_claims())
    records = {r["claim"]: r for r in judge_all(registry, root, ["cpu"])}
    assert records["a.mqar"]["verdict"] == "not run" and "mqar_tiny/tpp/seed1" in records["a.mqar"]["why"]
    assert records["c.lm"]["verdict"] == "other scale" and records["d.paper"]["verdict"] == "not testable"
    # hand-made results: tpp beats gdn by 0.2, 0.3, 0.25 (all > 0, mean 0.25 >= 0.05, t = 8.66, p = 0.0065)
    for arm, accs in (("tpp", (0.9, 0.8, 0.85)), ("gdn", (0.7, 0.5, 0.6))):
        for seed, acc in zip((1, 2, 3), accs):
            job = Job(registry.protocols["mqar_tiny"], registry.arms[arm], seed)
            hand_made(job, root, {f"acc/{arm}/d=16": acc})
    values, missing = arm_values(registry.claim("a.mqar"), registry, root)
    assert not missing and values["tpp"] == {1: 0.9, 2: 0.8, 3: 0.85}
    record = {r["claim"]: r for r in judge_all(registry, root, ["cpu"])}["a.mqar"]
    assert record["verdict"] == "holds"
    ((comparison_name, comparison),) = record["comparisons"].items()
    assert comparison["mean"] == pytest.approx(0.25) and comparison["p_value"] == pytest.approx(0.00652, abs=2e-4)
    # extra seeds at 0.15 and 0.35 (mean -+ 2 sd) still hold: the verdict is firm
    assert record["stability"] == {"stable": True, "moves_to": [], "comparisons": {comparison_name: "stable"}}


def test_rule_v2_on_results_with_a_gate(tmp_path):
    """The same hand-made results under rule v2: three seeds cannot establish a direction, the gate reads the
    per-setting accuracies from the results, and `atlas study report` puts the claim in the section its protocol's
    registration date says (new evidence only for protocols registered with or after rule v2)."""
    from atlas_experiments.study.report_v2 import judge_v2

    data = tiny_claims()
    data["protocols"]["mqar_tiny"]["gate"] = {"kind": "copy_from_context", "margin": 0.1, "min_accuracy": 0.5}
    data["protocols"]["mqar_tiny"]["registered"] = "2026-12-03"
    registry = parse_claims(data)
    root = tmp_path / "study"
    label = "len=16/pairs=2"  # copy-from-context: 1/2, so the gate asks >= 0.6 in this setting
    for arm, accs in (("tpp", (0.9, 0.8, 0.85)), ("gdn", (0.7, 0.5, 0.6))):
        for seed, acc in zip((1, 2, 3), accs):
            job = Job(registry.protocols["mqar_tiny"], registry.arms[arm], seed)
            hand_made(job, root, {f"acc/{arm}/d=16": acc, f"acc/{arm}/d=16/{label}": acc})
    (record,) = [r for r in judge_v2(registry, ["cpu"], root=root) if r["claim"] == "a.mqar"]
    assert record["gate"]["passed"] and record["verdict"] == "inconclusive"
    assert "smallest exact p is 0.125" in record["reason"]
    claims = tmp_path / "claims.yaml"
    claims.write_text(yaml.safe_dump(data))
    out = tmp_path / "report"
    assert main(["study", "report", "--claims", str(claims), "--root", str(root), "--out", str(out)]) == 0
    text = (out / "verdicts.md").read_text()
    new_evidence = text.split("## Rule v2 on new evidence")[1].split("## Rule v1")[0]
    assert "| a.mqar | inconclusive |" in new_evidence and "passed" in new_evidence
    per_seed = new_evidence.split("### Per-seed values")[1]
    assert "**mqar_tiny**, accuracy (higher is better); judges a.mqar" in per_seed
    assert "| arm | seed 1 | seed 2 | seed 3 | mean ± sd |" in per_seed
    assert "| tpp | 0.9 | 0.8 | 0.85 | 0.85 ± 0.05 |" in per_seed
    assert "| gdn | 0.7 | 0.5 | 0.6 | 0.6 ± 0.1 |" in per_seed
    saved = json.loads((out / "verdicts.json").read_text())
    assert [r["claim"] for r in saved["rule_v2"] if "comparisons" in r] == ["a.mqar"]
    # the best arm below the floor in its setting: not resolved, whatever the numbers
    for seed in (1, 2, 3):
        job = Job(registry.protocols["mqar_tiny"], registry.arms["tpp"], seed)
        hand_made(job, root, {"acc/tpp/d=16": 0.9, f"acc/tpp/d=16/{label}": 0.55})
    (record,) = [r for r in judge_v2(registry, ["cpu"], root=root) if r["claim"] == "a.mqar"]
    assert record["verdict"] == "not resolved (floor)" and "len=16/pairs=2 0.55 < 0.5 + 0.1" in record["reason"]


def test_an_extrapolation_claim_is_judged_at_its_test_only_cell_and_gated_where_the_arms_trained(tmp_path):
    """A claim on a test-only MQAR setting reads that cell, while the gate asks whether the arms learned where they
    trained: arms that learned and then fail at 4x the length are judged (here: no difference), arms that never
    learned are "not resolved (floor)" whatever their test-only numbers; an unscored cell is refused."""
    from atlas_experiments.study.report_v2 import judge_v2

    data = tiny_claims()
    mqar = data["protocols"]["mqar_tiny"]
    mqar.update(registered="2026-12-03", seeds=[1, 2, 3, 4, 5, 6],
                gate={"kind": "copy_from_context", "margin": 0.1, "min_accuracy": 0.5})  # fmt: skip
    mqar["args"] = {**TINY_MQAR, "test_settings": "64x2"}
    far_cell = {**data["claims"][0]["metric"], "cell": "len=64/pairs=2"}
    extrap = {**data["claims"][0], "id": "x.extrap", "metric": far_cell}
    data["claims"].append(extrap)
    registry = parse_claims(data)
    claim = registry.claim("x.extrap")
    assert metric_key(claim, registry.protocols["mqar_tiny"], registry.arms["tpp"]) == "acc/tpp/d=16/len=64/pairs=2"
    root = tmp_path / "study"

    def write(trained: float, far: dict[str, float]) -> dict:
        for arm in ("tpp", "gdn"):
            for seed in range(1, 7):
                job = Job(registry.protocols["mqar_tiny"], registry.arms[arm], seed)
                hand_made(job, root, {f"acc/{arm}/d=16": trained, f"acc/{arm}/d=16/len=16/pairs=2": trained,
                                      f"acc/{arm}/d=16/len=64/pairs=2": far[arm] + 0.01 * (seed % 2)})  # fmt: skip
        (record,) = [r for r in judge_v2(registry, ["cpu"], root=root) if r["claim"] == "x.extrap"]
        return record

    record = write(0.95, {"tpp": 0.2, "gdn": 0.2})  # learned at T, both fail at 4T
    assert record["gate"]["passed"] and record["verdict"] in ("does not hold", "inconclusive")
    assert record["values"]["tpp"] == pytest.approx({s: 0.2 + 0.01 * (s % 2) for s in range(1, 7)})
    record = write(0.3, {"tpp": 0.9, "gdn": 0.2})  # never learned where trained: no verdict from the 4T cell
    assert record["verdict"] == "not resolved (floor)" and "mean accuracy 0.3 < 0.5" in record["reason"]
    with pytest.raises(ClaimsError, match=r"metric.cell: mqar_tiny scores settings len=16/pairs=2, len=64/pairs=2"):
        parse_claims({**data, "claims": [{**extrap, "metric": {**extrap["metric"], "cell": "len=32/pairs=2"}}]})


@pytest.mark.usefixtures("one_thread")
def test_an_lm_job_trains_the_arm_and_records_its_validation_loss(tmp_path, prepared_data):
    registry = parse_claims(tiny_claims())
    job = Job(registry.protocols["lm"], registry.arms["gdn_small"], 2)
    cfg = lm_train_config(job, prepared_data)
    # the protocol's model overrides, then the arm's own; validation once, at the last step
    overrides = {"hidden_size": 32, "intermediate_size": 64, "num_memory_heads": 4}
    assert cfg["model"] == {"preset": "gated_deltanet", "size": "tiny", "overrides": overrides}
    assert (cfg["seed"], cfg["eval_interval"], cfg["data"]["seq_len"]) == (2, 2, 32)
    out = json.loads(run_job(job, tmp_path, data_dir=prepared_data).read_text())
    assert out["metrics"]["val_loss/gdn_small"] > 0 and out["details"]["steps"] == 2
    assert out["metrics"]["baseline/unigram_loss"] > 0  # the unigram gate's baseline, recorded by every lm job
    claim = registry.claim("c.lm")
    assert metric_key(claim, registry.protocols["lm"], registry.arms["gdn_small"]) == "val_loss/gdn_small"
    with pytest.raises(ValueError, match=r"protocols\.lm\.args: not a key of an lm job: lr"):
        lm_train_config(job, prepared_data, {"lr": 1.0})


def test_the_gpu_panel_script_plans_on_cpu(tmp_path):
    import os
    import subprocess
    import sys

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "manifest.json").write_text("{}")
    env = {**os.environ, "PANEL_DRY_RUN": "1", "PYTHON": sys.executable, "DATA": str(tmp_path / "data"),
           "OUT": str(tmp_path / "out")}  # fmt: skip
    res = subprocess.run(["bash", "benchmarks/gpu/study_panel.sh"], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)  # fmt: skip
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "115 jobs planned" in res.stdout and "lm_gpu_v2/deep_transformer/seed20" in res.stdout
    assert "--drop-by-priority" in res.stdout and (tmp_path / "out" / "panel.log").is_file()


def test_fitting_by_priority_drops_whole_claims_lowest_priority_first():
    registry = parse_claims(tiny_claims())
    jobs = [j for j in plan_jobs(registry, ["cpu"]) if j.protocol.task == "mqar"]
    timings = [pilot.Timing("mqar_tiny", arm, "steps", 2, 3, 10.0, 0.0) for arm in ("tpp", "gdn")]
    tpp = {j.name for j in jobs if j.arm.name == "tpp"}
    needs = [("keep", None, tpp), ("p1", 1, {j.name for j in jobs}), ("p2", 2, set())]
    assert pilot.fit_by_priority(timings, jobs, needs, 1.0, cores=1) == (sorted(j.name for j in jobs), [])
    accepted, dropped = pilot.fit_by_priority(timings, jobs, needs, 0.5, cores=1)  # 30 s of the 60 s fit
    assert (accepted, dropped) == (sorted(tpp), ["p2", "p1"])
    with pytest.raises(pilot.BudgetError, match="without a priority alone need about 0.5 min"):
        pilot.fit_by_priority(timings, jobs, needs, 0.25, cores=1)


def test_result_files_are_refused_unless_they_are_the_jobs_own(tmp_path):
    registry = parse_claims(tiny_claims())
    root = tmp_path / "study"
    tpp = [Job(registry.protocols["mqar_tiny"], registry.arms["tpp"], s) for s in (1, 2, 3)]
    gdn = [Job(registry.protocols["mqar_tiny"], registry.arms["gdn"], s) for s in (1, 2, 3)]
    for job in tpp + gdn:
        hand_made(job, root, {f"acc/{job.arm.name}/d=16": 0.5})
    assert load_result(tpp[0], root)["study"]["config_hash"] == config_hash(tpp[0]) != config_hash(tpp[1])
    gdn[0].result(root).write_text(tpp[0].result(root).read_text())  # a foreign file in gdn/seed1's place
    gdn[1].result(root).write_text('{"metrics": {"acc/gdn/d=16": 0.5}}')  # no provenance
    gdn[2].result(root).write_text('{"metrics": ')  # cut short
    for job, why in ((gdn[0], "a foreign result"), (gdn[1], "no study provenance"), (gdn[2], "not valid JSON")):
        with pytest.raises(ResultError, match=why) as err:
            load_result(job, root)
        assert str(job.result(root)) in str(err.value)
    record = {r["claim"]: r for r in judge_all(registry, root, ["cpu"])}["a.mqar"]
    assert record["verdict"] == "not run" and record["why"].count("refused: ") == 3


def _study_outputs(root: Path) -> dict:
    """Every result's metrics (the numbers a verdict rests on), by job."""
    return {str(p.relative_to(root)): json.loads(p.read_text())["metrics"] for p in sorted(root.rglob("seed*.json"))}


@pytest.mark.usefixtures("one_thread")
def test_a_job_stopped_before_its_result_is_final_runs_again_to_the_same_result(tmp_path, monkeypatch):
    """In-process stand-in for a kill: the job's command finishes but the process dies before the result is moved
    into place. The job is then pending, and running it again gives the result of an uninterrupted run."""
    from atlas_experiments.study import results
    from atlas_experiments.study.pending import pending_jobs

    registry = parse_claims(tiny_claims())
    job = Job(registry.protocols["mqar_tiny"], registry.arms["gdn"], 1)
    killed, clean = tmp_path / "killed", tmp_path / "clean"

    def die(*_args, **_kw):
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(results, "finalize", die)
    with pytest.raises(KeyboardInterrupt):
        run_job(job, killed)
    monkeypatch.undo()
    assert results.partial_path(job, killed).is_file() and not job.result(killed).exists()
    # the command's finished training run waits in the job's snapshot folder: the rerun does not train it again
    assert list(resume_folder(job, killed).glob("*.json"))
    assert pending_jobs([job], killed) == ([job], [])
    run_job(job, killed)
    assert not resume_folder(job, killed).exists(), "a final result keeps no snapshot folder"
    run_job(job, clean)
    assert pending_jobs([job], killed) == ([], [])
    assert not results.partial_path(job, killed).exists()
    assert load_result(job, killed)["metrics"] == load_result(job, clean)["metrics"]


@pytest.mark.slow
@pytest.mark.usefixtures("one_thread")
def test_kill_9_in_the_middle_and_a_rerun_give_the_results_of_an_uninterrupted_run(tmp_path):
    """`atlas study run --pending` killed with SIGKILL (runner and job together) while a job trains, then run
    again: no half-written result ever appears, and the final results equal those of an uninterrupted run. Slow
    (13 processes, 1-5 min); the in-process test above covers the same mechanism in the default run."""
    import os
    import signal
    import subprocess
    import sys
    import time

    data = tiny_claims()
    data["protocols"]["mqar_tiny"]["args"] = {**TINY_MQAR, "steps": 1500}  # seconds of training: a kill lands in it
    data["claims"] = [data["claims"][0]]
    data["arms"] = {k: data["arms"][k] for k in ("tpp", "gdn")}
    data["protocols"] = {"mqar_tiny": data["protocols"]["mqar_tiny"]}
    data["protocols"]["mqar_tiny"]["seeds"] = [1, 2, 3]
    claims = tmp_path / "claims.yaml"
    claims.write_text(yaml.safe_dump(data))

    def pending(root: Path, **kw) -> subprocess.Popen:
        argv = [sys.executable, "-m", "atlas_experiments.cli", "study", "run", "--pending", "--claims", str(claims),
                "--root", str(root), "--no-track"]  # fmt: skip
        return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)

    killed = tmp_path / "killed"
    runner = pending(killed, start_new_session=True)
    first = killed / "logs" / "mqar_tiny" / "tpp" / "seed1.log"
    deadline = time.monotonic() + 120
    # a line past the attempt header: the job itself has started
    while not (first.is_file() and first.read_text().count("\n") > 1) and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(0.5)
    os.killpg(runner.pid, signal.SIGKILL)
    runner.wait()
    assert not (killed / "mqar_tiny" / "tpp" / "seed1.json").exists(), "the kill came after the job ended"
    assert pending(killed).wait(timeout=600) == 0
    clean = tmp_path / "clean"
    assert pending(clean).wait(timeout=600) == 0
    done = _study_outputs(killed)
    assert len(done) == 6 and done == _study_outputs(clean)


def test_plan_prints_cpu_hours_and_seeds_from_power(tmp_path, capsys):
    claims = tmp_path / "claims.yaml"
    claims.write_text(yaml.safe_dump(tiny_claims()))
    costs = tmp_path / "plan.json"
    timings = [{"protocol": "mqar_tiny", "arm": "tpp", "job_s": 360.0}, {"protocol": "mqar_tiny", "arm": "gdn",
               "job_s": 1800.0}, {"protocol": "learn", "arm": "all", "job_s": 36.0}]  # fmt: skip
    costs.write_text(json.dumps({"timings": timings}))
    assert main(["study", "plan", "--claims", str(claims), "--costs", str(costs)]) == 0
    out = capsys.readouterr().out
    assert "a.mqar" in out and " 6      1.80" in out  # 3 x 360 s + 3 x 1800 s
    assert "all jobs (each once)" in out and "1.83" in out  # + 3 x 36 s of learnability
    pilot = tmp_path / "verdicts.json"
    pilot.write_text(json.dumps({"rule_v1": [{"claim": "a.mqar", "comparisons": {"x": {"sd": 0.09}}}]}))
    assert main(["study", "plan", "--claims", str(claims), "--pilot", str(pilot)]) == 0
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()[1:]}
    assert rows["a.mqar"][1:5] == ["1", "0.09", "0.05", "7"]  # one comparison at sd 0.09: 7 seeds (power 0.81)
    assert rows["b.learn"][4] == "5" and "no pilot sd" in " ".join(rows["b.learn"])


def test_the_committed_verdicts_regenerate_from_the_committed_results(tmp_path):
    """`reports/study/verdicts.json` is what `atlas study report` makes of `reports/study/runs` and the v1 record:
    the fresh learnability v2 verdicts under rule v2, and rule v1 / the re-reading only for claims registered before
    rule v2 (a v2 claim never appears under rule v1)."""
    out = tmp_path / "report"
    argv = ["study", "report", "--root", str(ROOT / "reports/study/runs"), "--out", str(out),
            "--v1-record", str(ROOT / "reports/study/v1/verdicts.json")]  # fmt: skip
    assert main(argv) == 0
    made, committed = (json.loads(p.read_text()) for p in (out / "verdicts.json", ROOT / "reports/study/verdicts.json"))
    verdicts = lambda rows: {r["claim"]: r["verdict"] for r in rows}  # noqa: E731
    for key in ("rule_v2", "v1_data_rule_v2", "rule_v1"):
        assert verdicts(made[key]) == verdicts(committed[key]), key
    fresh = verdicts(made["rule_v2"])  # the protocols registered after rule v2
    v2_families = ("learnability_v2", "mqar_v2", "mad_v2", "extrapolation_v2")
    assert len(fresh) >= 10 and all(c.startswith(v2_families) for c in fresh)
    assert not set(fresh) & (set(verdicts(made["rule_v1"])) | set(verdicts(made["v1_data_rule_v2"])))
    # one difference figure per group (recall, learnability, the v1 re-reading), each drawn and shown
    text = (out / "verdicts.md").read_text()
    for name in ("verdicts_recall.png", "verdicts_learnability.png", "verdicts_v1_rule_v2.png"):
        assert (out / name).is_file() and f"]({name})" in text, name
    assert not (out / "verdicts.png").exists() and "](verdicts.png)" not in text


def test_progress_counts_done_jobs_and_prices_the_rest_from_each_arms_finished_ones(tmp_path, capsys):
    """`atlas study plan --progress`: per claim, jobs done of planned, CPU-hours spent (a synthetic job's training
    seconds over every stretch, else its wall time) and left (the mean of the arm's finished jobs); an arm with no
    finished job is counted as unpriced, and a foreign result is not counted."""
    from atlas_experiments.study.progress import measure, pace_note, pilot_pace, pilot_times, study_progress

    registry = parse_claims(tiny_claims())
    jobs = plan_jobs(registry, ["cpu"])
    mqar = {j.name: j for j in jobs if j.protocol.name == "mqar_tiny"}
    for seed, seconds in ((1, 3600.0), (2, 1800.0)):
        path = hand_made(mqar[f"mqar_tiny/tpp/seed{seed}"], tmp_path, {"acc/tpp/d=16": 0.5})
        data = json.loads(path.read_text())
        data["details"] = {"runs": [{"train": {"seconds": seconds / 2}}, {"train": {"seconds": seconds / 2}}]}
        path.write_text(json.dumps(data))
    foreign = mqar["mqar_tiny/gdn/seed1"].result(tmp_path)
    foreign.parent.mkdir(parents=True, exist_ok=True)
    foreign.write_text(json.dumps({"metrics": {}, "study": {"config_hash": "x", "job": "other"}}))
    rows = {r.name: r for r in study_progress(registry, ["cpu"], jobs, tmp_path)}
    a = rows["a.mqar"]
    assert (a.done, a.planned, a.spent_h, a.left_h, a.unpriced) == (2, 6, 1.5, 0.75, 3)
    assert rows["b.learn"].done == 0 and rows["all jobs (each once)"].planned == len(jobs)
    assert main(["study", "plan", "--progress", "--root", str(tmp_path), "--claims", _claims_file(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "a.mqar" in out and "2/6" in out and "3 jobs of arms with no finished job not priced" in out
    # a pilot's projection prices the arms with no finished job; an arm's own finished jobs still price it
    pilot_plan = {"timings": [{"protocol": "mqar_tiny", "arm": "gdn", "job_s": 7200.0},
                              {"protocol": "mqar_tiny", "arm": "tpp", "job_s": 1.0}]}  # fmt: skip
    a = {r.name: r for r in study_progress(registry, ["cpu"], jobs, tmp_path, pilot_times(pilot_plan))}["a.mqar"]
    assert (a.left_h, a.unpriced, a.from_pilot) == (0.75 + 6.0, 0, 3)
    costs = tmp_path / "plan.json"
    costs.write_text(json.dumps(pilot_plan))
    argv = ["study", "plan", "--progress", "--root", str(tmp_path), "--claims", _claims_file(tmp_path)]
    assert main([*argv, "--costs", str(costs)]) == 0
    out = capsys.readouterr().out
    assert "3 jobs priced from the pilot" in out
    # tpp's finished jobs took 2700 s on average against the pilot's 1 s; the three gdn jobs are priced at 6 h
    assert "pilot pace: the finished jobs of 1 arms took 2700.00-2700.00x" in out and "mqar_tiny/tpp 2700.00x" in out
    assert pilot_pace(jobs, measure(jobs, tmp_path), pilot_times(pilot_plan)) == {("mqar_tiny", "tpp"): 2700.0}
    rows = study_progress(registry, ["cpu"], jobs, tmp_path, {("mqar_tiny", "gdn"): 7200.0, ("mqar_tiny", "tpp"): 1800})
    assert rows[0].pilot_h == 6.0 and rows[0].from_pilot == 3
    note = pace_note({("mqar_tiny", "tpp"): 1.5, ("mqar_tiny", "gdn"): 2.5, ("learn", "all"): 1.0}, rows[-1])
    assert "1.00-2.50x" in note and "median 1.50x" in note and "take 9.0 CPU-h, not 6.0" in note
    assert pace_note({}, rows[-1]) == "pilot pace: no arm has both finished jobs and a pilot time yet"


def _claims_file(tmp_path: Path) -> str:
    path = tmp_path / "claims.yaml"
    path.write_text(yaml.safe_dump(tiny_claims()))
    return str(path)


def test_the_report_draws_the_finished_mqar_jobs_learning_curves(tmp_path):
    """`study.curves`: one figure per MQAR protocol from the finished jobs' recorded curves, and a table of seeds
    done, final validation accuracy and memory size; a job without a result or a curve is left out."""
    from atlas_experiments.study.curves import curves_section, mqar_curves

    registry = parse_claims(tiny_claims())
    jobs = [j for j in plan_jobs(registry, ["cpu"]) if j.protocol.name == "mqar_tiny"]
    for job, final in zip(jobs[:3], (0.5, 0.7, 0.9)):
        path = hand_made(job, tmp_path, {f"acc/{job.arm.name}/d=16": final})
        data = json.loads(path.read_text())
        data["details"] = {"table": [{"model": job.arm.name, "curve": [[1, 0.1], [2, final]],
                                      "memory_size": {"16": 256}}]}  # fmt: skip
        path.write_text(json.dumps(data))
    curves = mqar_curves(jobs, tmp_path)
    arms = curves["mqar_tiny"]
    assert sum(len(seeds) for seeds in arms.values()) == 3
    text = curves_section(curves, tmp_path / "out")
    assert (tmp_path / "out" / "curves_mqar_tiny.png").is_file()
    assert "![validation accuracy by step, mqar_tiny](curves_mqar_tiny.png)" in text
    first = jobs[0].arm.name
    finals = [s["curve"][-1][1] for s in arms[first].values()]
    assert f"| {first} | {len(finals)} | {sum(finals) / len(finals):.3f}" in text and "| 256 |" in text
    assert curves_section({}, tmp_path / "none") == ""


def test_the_report_shows_accuracy_by_length_where_a_protocol_scores_test_only_settings(tmp_path):
    """`study.lengths`: for an MQAR protocol with `test_settings`, each arm's mean (min - max) per setting, trained
    and test-only, and its far-query accuracy, from the finished jobs' metrics; a figure beside it; protocols without
    test-only settings and jobs without a result are left out."""
    from atlas_experiments.study.lengths import lengths_section, mqar_lengths

    data = tiny_claims()
    data["protocols"]["mqar_tiny"]["args"] = {**TINY_MQAR, "test_settings": "64x2"}
    registry = parse_claims(data)
    jobs = [j for j in plan_jobs(registry, ["cpu"]) if j.protocol.name == "mqar_tiny"]
    values = {}
    for k, job in enumerate(jobs[:-1]):  # the last job has no result
        a, p = f"{job.arm.name}/d=16", "pairs=2"
        trained, test, far = values[job.name] = (0.9 - 0.1 * k, 0.5 - 0.1 * k, 0.3 - 0.1 * k)
        hand_made(job, tmp_path, {f"acc/{a}/len=16/{p}": trained, f"acc/{a}/len=64/{p}": test,
                                  f"acc_far/{a}/len=64/{p}": far})  # fmt: skip
    lengths = mqar_lengths(plan_jobs(registry, ["cpu"]), tmp_path)
    assert set(lengths) == {"mqar_tiny"}
    entry = lengths["mqar_tiny"]
    assert entry["trained"] == [(16, 2)] and entry["test"] == [(64, 2)]
    assert sum(len(seeds) for seeds in entry["arms"].values()) == len(jobs) - 1
    text = lengths_section(lengths, tmp_path / "out")
    assert (tmp_path / "out" / "lengths_mqar_tiny.png").is_file()
    assert "| arm | seeds | T 16 x 2 (trained) | T 64 x 2 (test only) | far queries at T 64 x 2 |" in text
    arm = jobs[0].arm.name
    mine = [values[j.name] for j in jobs[:-1] if j.arm.name == arm]
    cells = [f"{sum(v) / len(v):.3f} ({min(v):.3f} - {max(v):.3f})" for v in zip(*mine)]
    assert f"| {arm} | {len(mine)} | {' | '.join(cells)} |" in text
    assert lengths_section({}, tmp_path / "none") == ""
    assert mqar_lengths(plan_jobs(parse_claims(tiny_claims()), ["cpu"]), tmp_path) == {}  # no test-only settings


# ------------------------------------------------------------------------------------------------------ MAD jobs
# A claim names its MAD task (`metric.cell`), a job is `atlas eval mad` with a resume folder, and the
# majority-class gate's floor is computed from the protocol's own test sets.

TINY_MAD = {"tasks": "memorization,in_context_recall", "grid": "baseline", "width": "16", "layers": 1, "steps": 2,
            "batch_size": 2, "train_examples": 8, "test_examples": 6, "memory_head_dim": 8, "memory_expansion": 2,
            "threads": 1}  # fmt: skip


def mad_claims(gate: dict | None = None, **args) -> dict:
    data = tiny_claims()
    protocol = {"task": "mad", "scale": "cpu", "size": "tiny", "seeds": [1, 2, 3], "args": {**TINY_MAD, **args},
                "registered": "2026-12-04"}  # fmt: skip
    if gate is not None:
        protocol["gate"] = gate
    data["protocols"]["mad_tiny"] = protocol
    claim = copy.deepcopy(data["claims"][0])
    claim.update(id="e.mad", statement="tpp beats gdn at memorisation",
                 metric={"task": "mad", "name": "accuracy", "better": "higher", "cell": "memorization"},
                 test={"scale": "cpu", "testable": True, "protocol": "mad_tiny", "evidence": "proxy"})  # fmt: skip
    data["claims"].append(claim)
    return data


def test_a_mad_claim_names_a_task_its_protocol_runs():
    registry = parse_claims(mad_claims())
    claim = registry.claim("e.mad")
    assert metric_key(claim, registry.protocols["mad_tiny"], registry.arms["tpp"]) == "acc/tpp/memorization"
    assert {j.name for j in plan_jobs(registry, ["cpu"]) if j.protocol.task == "mad"} == {
        f"mad_tiny/{arm}/seed{s}" for arm in ("tpp", "gdn") for s in (1, 2, 3)
    }
    data = mad_claims()
    data["claims"][-1]["metric"]["cell"] = "memorisation"
    with pytest.raises(ClaimsError, match=r"claims\[e\.mad\]\.metric\.cell: expected one of .*memorization"):
        parse_claims(data)
    data = mad_claims(tasks="in_context_recall")
    with pytest.raises(ClaimsError, match="mad_tiny runs MAD tasks in_context_recall, not memorization"):
        parse_claims(data)
    with pytest.raises(ClaimsError, match="majority_class gates mad protocols, this one runs mqar"):
        data = mad_claims()
        data["protocols"]["mqar_tiny"]["gate"] = {"kind": "majority_class", "margin": 0.1}
        parse_claims(data)


def test_the_majority_floor_is_the_test_sets_most_frequent_answer_averaged_over_settings_and_seeds():
    protocol = gates.mad_protocol({**TINY_MAD})
    floors = gates.mad_majority_baselines(TINY_MAD, [1, 2])
    for task in ("memorization", "in_context_recall"):
        by_hand = []
        for seed in (1, 2):
            for setting in protocol.settings(task):
                scored = generate_mad(setting, "test", seed=seed).targets
                scored = scored[scored >= 0]
                by_hand.append(np.bincount(scored).max() / scored.size)
        assert floors[task] == pytest.approx(sum(by_hand) / len(by_hand), rel=1e-12)
        assert 0 < floors[task] < 1


def test_a_mad_job_runs_resumably_and_the_gate_reads_the_floor(tmp_path):
    data = mad_claims(gate={"kind": "majority_class", "margin": 0.05})
    claims = tmp_path / "claims.yaml"
    claims.write_text(yaml.safe_dump(data))
    root = tmp_path / "study"
    assert main(["study", "run", "--claims", str(claims), "--root", str(root), "--job", "mad_tiny/gdn/seed1",
                 "--no-track"]) == 0  # fmt: skip
    registry = parse_claims(data)
    job = Job(registry.protocols["mad_tiny"], registry.arms["gdn"], 1)
    result = json.loads(job.result(root).read_text())
    assert 0 <= result["metrics"]["acc/gdn/memorization"] <= 1 and result["protocol"]["seed"] == 1
    assert not resume_folder(job, root).exists(), "a finished job keeps no snapshots"

    floor = gates.mad_majority_baselines(TINY_MAD, [1, 2, 3])["memorization"]
    for arm, accs in (("tpp", (0.9, 0.8, 0.85)), ("gdn", (0.7, 0.5, 0.6))):
        for seed, acc in zip((1, 2, 3), accs):
            hand_made(Job(registry.protocols["mad_tiny"], registry.arms[arm], seed), root,
                      {f"acc/{arm}/memorization": acc})  # fmt: skip
    (record,) = [r for r in judge_v2(registry, ["cpu"], root=root) if r["claim"] == "e.mad"]
    finding = record["gate"]["comparisons"]["tpp beats gdn"]
    assert record["gate"]["passed"] and finding["baseline"] == pytest.approx(floor)
    assert finding["threshold"] == pytest.approx(floor + 0.05) and finding["best_arm"] == "tpp"
    # the best arm at the floor: not resolved, whatever the difference
    low = floor + 0.01
    for seed, (a, b) in zip((1, 2, 3), ((low, low - 0.2), (low, low - 0.3), (low, low - 0.25))):
        hand_made(Job(registry.protocols["mad_tiny"], registry.arms["tpp"], seed), root, {"acc/tpp/memorization": a})
        hand_made(Job(registry.protocols["mad_tiny"], registry.arms["gdn"], seed), root, {"acc/gdn/memorization": b})
    (record,) = [r for r in judge_v2(registry, ["cpu"], root=root) if r["claim"] == "e.mad"]
    assert record["verdict"] == "not resolved (floor)" and not record["gate"]["passed"]
    assert math.isclose(record["gate"]["comparisons"]["tpp beats gdn"]["value"], low)


@pytest.mark.parametrize("match", ["gated_deltanet", None])
def test_mad_claims_show_each_arms_floats_at_the_claims_task_with_or_without_equal_memory(tmp_path, match):
    data = mad_claims(**({"match_memory": match} if match else {}))
    registry = parse_claims(data)
    root = tmp_path / "study"
    for arm, accs in (("tpp", (0.9, 0.8, 0.85)), ("gdn", (0.7, 0.5, 0.6))):
        for seed, acc in zip((1, 2, 3), accs):
            hand_made(Job(registry.protocols["mad_tiny"], registry.arms[arm], seed), root,
                      {f"acc/{arm}/memorization": acc})  # fmt: skip
    (record,) = [r for r in judge_v2(registry, ["cpu"], root=root) if r["claim"] == "e.mad"]
    floats = record["memory_floats"]
    seq_len = gates.mad_protocol(data["protocols"]["mad_tiny"]["args"]).settings("memorization")[0].seq_len
    assert set(floats) == {"tpp", "gdn"} and all(set(v) == {seq_len} and v[seq_len] > 0 for v in floats.values())
