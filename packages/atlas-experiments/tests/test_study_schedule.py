"""The verdicts-first schedule of a study's unfinished jobs (study/schedule.py) and the `--claim` selection:
`atlas study plan --schedule`, `atlas study run --pending --order verdicts-first --claim ...`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from atlas_experiments.cli import main
from atlas_experiments.study import pending
from atlas_experiments.study.claims import parse_claims
from atlas_experiments.study.plan import plan_jobs, planned_claims, select_claims
from atlas_experiments.study.progress import measure
from atlas_experiments.study.results import finalize, partial_path
from atlas_experiments.study.schedule import format_schedule, job_prices, ordered_jobs, verdicts_first

MQAR = {"settings": "16x2", "vocab_size": 16, "width": 16, "layers": 1, "steps": 2, "batch_size": 2, "lrs": "3e-3",
        "test_examples": 4, "memory_head_dim": 8, "memory_expansion": 2, "threads": 1}  # fmt: skip


def claims_data(header: dict) -> dict:
    """Four claims on one protocol, four arms: `base` has finished every seed, `slow` one seed (an hour), `fresh`
    none (priced by a pilot), `odd` none and no pilot time."""
    common = {"paper": {"source": "Table 6", "value": "x"}, "delta": {"value": 0.05, "unit": "accuracy"},
              "metric": {"task": "mqar", "name": "accuracy", "better": "higher"},
              "test": {"scale": "cpu", "testable": True, "protocol": "p", "evidence": "proxy"},
              "outcome_seen": "no: never run"}  # fmt: skip

    def claim(cid: str, *arms: str) -> dict:
        return {**common, "id": cid, "statement": cid, "arms": list(arms), "predicted": {"order": list(arms)}}

    return {
        **header,
        "protocols": {"p": {"task": "mqar", "scale": "cpu", "size": "tiny", "seeds": [1, 2, 3], "args": MQAR}},
        "arms": {"base": {"preset": "transformer_pp"}, "slow": {"preset": "gated_deltanet"},
                 "fresh": {"preset": "gated_deltanet", "overrides": {"num_memory_heads": 4}},
                 "odd": {"preset": "transformer_pp", "overrides": {"num_attention_heads": 4}}},
        "claims": [claim("k.slow", "base", "slow"),
                   claim("k.both", "base", "slow", "fresh"), claim("k.fresh", "base", "fresh"),
                   claim("k.odd", "base", "odd")],
    }  # fmt: skip


def finish(job, root: Path, seconds: float) -> None:
    partial = partial_path(job, root)
    partial.parent.mkdir(parents=True, exist_ok=True)
    partial.write_text(json.dumps({"metrics": {}, "details": {"runs": [{"train": {"seconds": seconds}}]}}))
    finalize(job, root, seconds)


@pytest.fixture()
def study(tmp_path, claims_header):
    registry = parse_claims(claims_data(claims_header))
    jobs = plan_jobs(registry, ["cpu"])
    by_name = {j.name: j for j in jobs}
    for seed in (1, 2, 3):
        finish(by_name[f"p/base/seed{seed}"], tmp_path, 100.0)
    finish(by_name["p/slow/seed1"], tmp_path, 3600.0)
    pilot = {("p", "slow"): 1800.0, ("p", "fresh"): 900.0}  # slow ran 2x the pilot: fresh is priced 1,800 s a job
    claims_file = tmp_path / "claims.yaml"
    claims_file.write_text(yaml.safe_dump(claims_data(claims_header)))
    costs = tmp_path / "pilot.json"
    costs.write_text(json.dumps({"timings": [{"protocol": p, "arm": a, "job_s": s} for (p, a), s in pilot.items()]}))
    return registry, jobs, tmp_path, pilot, str(claims_file), str(costs)


def test_claims_finish_cheapest_first_and_a_claim_of_scheduled_jobs_completes_with_them(study):
    registry, jobs, root, pilot, _, _ = study
    prices = job_prices(jobs, measure(jobs, root), pilot)
    assert prices["p/slow/seed2"] == 3600.0 and prices["p/fresh/seed1"] == 1800.0 and "p/odd/seed1" not in prices
    steps = verdicts_first(planned_claims(registry, ["cpu"]), registry, jobs, measure(jobs, root), pilot)
    order = [(s.claim, [j.name for j in s.jobs], round(s.hours, 3), s.unpriced, round(s.cumulative_h, 3))
             for s in steps]  # fmt: skip
    assert order == [
        ("k.fresh", ["p/fresh/seed1", "p/fresh/seed2", "p/fresh/seed3"], 1.5, 0, 1.5),
        ("k.slow", ["p/slow/seed2", "p/slow/seed3"], 2.0, 0, 3.5),
        ("k.both", [], 0.0, 0, 3.5),  # its jobs all came with the two claims above
        ("k.odd", ["p/odd/seed1", "p/odd/seed2", "p/odd/seed3"], 0.0, 3, 3.5),  # unpriced: last
    ]
    ordered = [j.name for j in ordered_jobs(steps, jobs)]
    assert ordered[:8] == [n for s in order for n in s[1]] and sorted(ordered) == sorted(j.name for j in jobs)
    table = format_schedule(steps, workers=2)
    assert "1.8  3 jobs not priced" in table  # 3.5 CPU-h on 2 workers
    assert "k.both" in table and "its jobs all come with the claims above" in table
    # without the pilot, fresh is unpriced too: slow first (fewest unpriced), then the tie in registry order
    steps = verdicts_first(planned_claims(registry, ["cpu"]), registry, jobs, measure(jobs, root))
    assert [(s.claim, len(s.jobs)) for s in steps] == [("k.slow", 2), ("k.both", 3), ("k.fresh", 0), ("k.odd", 3)]


def test_claim_selection_names_a_pattern_that_matches_nothing(study):
    registry = study[0]
    claims = planned_claims(registry, ["cpu"])
    assert [c.id for c in select_claims(claims, "k.s*, k.odd")] == ["k.slow", "k.odd"]
    assert select_claims(claims, None) == claims
    with pytest.raises(ValueError, match="'k.nothing'"):
        select_claims(claims, "k.slow,k.nothing")


def test_the_cli_schedules_selects_and_runs_pending_jobs_in_that_order(study, capsys, monkeypatch):
    _, _, root, _, claims_file, costs = study
    base = ["--root", str(root), "--claims", claims_file]
    assert main(["study", "plan", "--schedule", "--costs", costs, *base]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[1] for line in lines[1:]] == ["k.fresh", "k.slow", "k.both", "k.odd"]
    assert main(["study", "plan", "--claim", "k.slow", *base]) == 0
    assert capsys.readouterr().out.split() == [f"p/{arm}/seed{s}" for arm in ("base", "slow") for s in (1, 2, 3)]
    started = []
    monkeypatch.setattr(pending, "run_pending", lambda todo, *a, **k: started.extend(j.name for j in todo) or 0)
    argv = ["study", "run", "--pending", "--no-track", *base]
    assert main([*argv, "--order", "verdicts-first", "--costs", costs, "--claim", "k.slow,k.fresh"]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[1] == "k.fresh"  # the schedule, printed first
    assert [n for n in started if not n.startswith("p/base")] == [
        "p/fresh/seed1", "p/fresh/seed2", "p/fresh/seed3", "p/slow/seed2", "p/slow/seed3", "p/slow/seed1"]  # fmt: skip
    started.clear()
    assert main(argv) == 0  # plan order, every claim
    assert started[:3] == ["p/base/seed1", "p/base/seed2", "p/base/seed3"] and len(started) == 12
    assert main(["study", "run", "--job", "p/base/seed1", "--order", "verdicts-first", *base]) == 2
    assert "only with --pending" in capsys.readouterr().err


@pytest.mark.parametrize("per_arm", [False, True])
def test_a_rerun_appends_to_the_log_of_the_interrupted_attempt(study, monkeypatch, per_arm):
    """A job resumed from its snapshot keeps the interrupted attempt's output above the new one's."""
    _, jobs, root, _, _, _ = study
    job = next(j for j in jobs if j.name == "p/slow/seed2")
    attempts = iter(["step 250 ... killed\n", "step 5000 mean acc 0.9\n"])

    def fake_run(argv, stdout, **kw):
        stdout.write(next(attempts))
        return pending.subprocess.CompletedProcess(argv, 1)

    monkeypatch.setattr(pending.subprocess, "run", fake_run)
    for _ in range(2):
        assert pending.run_pending([job], root, ["--no-track"], per_arm=per_arm) == 1
    log = (root / "logs" / ("p/slow.log" if per_arm else "p/slow/seed2.log")).read_text().splitlines()
    assert [line.split()[2] for line in log[::2]] == ["start:", "start:"]
    assert log[0].endswith("--arm p/slow" if per_arm else "--job p/slow/seed2")
    assert log[1::2] == ["step 250 ... killed", "step 5000 mean acc 0.9"]
