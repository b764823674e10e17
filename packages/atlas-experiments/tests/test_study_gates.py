"""Learning gates of rule v2: baselines computed from the protocols' own data, the gate's pass/fail logic, and the
v1 record judged again under rule v2 (a failed gate is "not resolved (floor)", whatever the numbers)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from atlas_data.synthetic.learnability import LearnabilityConfig, generate_stream, mean_predictor_losses
from atlas_data.synthetic.mqar import MQARConfig, copy_from_context_accuracy, generate_mqar
from atlas_experiments.study import gates
from atlas_experiments.study.claims import Comparison, Metric, load_claims
from atlas_experiments.study.decision import Verdict
from atlas_experiments.study.report_v2 import Baselines, judge_v2

ROOT = Path(__file__).resolve().parents[3]


def test_copy_from_context_is_one_over_pairs_with_distinct_values():
    for t, p in ((24, 3), (40, 5), (64, 8)):
        data = generate_mqar(MQARConfig(48, t, p), 64, seed=1)
        assert copy_from_context_accuracy(data, p) == pytest.approx(1 / p)


def test_copy_from_context_counts_repeated_values():
    data = generate_mqar(MQARConfig(48, 24, 3), 4, seed=0)
    data.inputs[:, 3] = data.inputs[:, 1]  # the second pair now shows the first pair's value
    # the first key's answer appears twice (2/3), the second key's not at all (0), the third once (1/3)
    assert copy_from_context_accuracy(data, 3) == pytest.approx((2 / 3 + 0 + 1 / 3) / 3)


def test_mean_predictor_is_below_one_when_outputs_have_a_mean():
    _, out = generate_stream("mlp", LearnabilityConfig(dim=16, seq_len=256), seed=0)  # GELU: outputs have a mean
    loss = mean_predictor_losses(out)
    assert loss.shape == (256,) and 0 < loss.mean() < 1
    _, low = generate_stream("low_rank", LearnabilityConfig(dim=16, seq_len=256, rank=2), seed=0)
    assert mean_predictor_losses(low).mean() == pytest.approx(1.0, abs=0.05)  # zero-mean outputs: about 1


def _claim(arms, higher=True):
    comparison = Comparison(f"{arms[0]} beats {arms[1]}", ((arms[0], 1.0), (arms[1], -1.0)))
    metric = Metric("mqar", "accuracy", "higher") if higher else Metric("learnability", "final_loss", "lower")
    return SimpleNamespace(metric=metric, comparisons=(comparison,))


def test_mqar_gate_checks_every_setting_and_the_floor():
    gate = gates.Gate("copy_from_context", 0.10, 0.50)
    claim = _claim(("a", "b"))
    values = {"a": {1: 0.9, 2: 0.8}, "b": {1: 0.2, 2: 0.3}}
    base = {"len=24/pairs=3": 1 / 3, "len=40/pairs=5": 0.2}
    good = {"a": {"len=24/pairs=3": {1: 0.95, 2: 0.9}, "len=40/pairs=5": {1: 0.8, 2: 0.7}}}
    assert gates.evaluate(gate, claim, values, base, good)["passed"]
    bad = {"a": {"len=24/pairs=3": {1: 0.95, 2: 0.9}, "len=40/pairs=5": {1: 0.25, 2: 0.3}}}
    finding = gates.evaluate(gate, claim, values, base, bad)
    assert not finding["passed"] and "len=40/pairs=5 0.275 < 0.2 + 0.1" in finding["reason"]
    mean_only = gates.evaluate(gate, claim, values, base, None)  # a record without per-setting values
    assert not mean_only["passed"] and "per-setting accuracies were not recorded" in mean_only["reason"]
    low = gates.evaluate(gate, claim, {"a": {1: 0.4, 2: 0.4}, "b": {1: 0.1, 2: 0.1}}, base, None)
    assert "a mean accuracy 0.4 < 0.5" in low["reason"]


def test_loss_gate_uses_the_best_arm_and_its_own_baseline():
    gate = gates.Gate("mean_predictor", 0.02)
    claim = _claim(("a", "b"), higher=False)
    values = {"a": {1: 0.3, 2: 0.32}, "b": {1: 0.9, 2: float("nan")}}
    assert gates.best_arm(["a", "b"], values, higher_is_better=False) == "a"
    assert gates.evaluate(gate, claim, values, {"a": 0.5, "b": 1.0})["passed"]
    assert not gates.evaluate(gate, claim, values, {"a": 0.32, "b": 1.0})["passed"]


def test_v1_record_under_rule_v2(tmp_path):
    """The committed v1 record: every MQAR claim fails its gate (no arm reached half of the queries), the learnability
    claims pass theirs, and multi-comparison learnability claims cannot hold with five seeds under Holm."""
    registry = load_claims(ROOT / "config" / "study" / "claims.yaml")
    record = json.loads((ROOT / "reports" / "study" / "v1" / "verdicts.json").read_text())

    class Cheap(Baselines):  # the real baselines regenerate full-size streams; these keep the test quick
        def mqar(self, protocol):
            return {"len=24/pairs=3": 1 / 3, "len=40/pairs=5": 0.2}

        def learnability(self, protocol, metric):
            return dict.fromkeys(("low_rank", "mlp", "attention_mlp", "attention_inputs_mlp", "swa_mlp"), 0.8)

        def memory(self, protocol, arm, cell=None):
            return {24: 1, 40: 1}

    out = {r["claim"]: r for r in judge_v2(registry, ["cpu"], record=record, baselines=Cheap(registry))}
    # the v1 MQAR claims (the MQAR v2 claims, registered after rule v2, have no v1 data: "not run")
    v1 = {c for c in out if registry.protocol_of(registry.claim(c)).registered < registry.rule_v2_registered}
    mqar = [c for c in out if registry.claim(c).metric.task == "mqar" and c in v1]
    assert all(out[c]["verdict"] == "not run" for c in out if c.startswith("mqar_v2."))
    assert mqar and all(out[c]["verdict"] == str(Verdict.NOT_RESOLVED) for c in mqar)
    assert out["learnability.four_faster_than_two"]["verdict"] == "holds"
    assert out["learnability.one_easiest"]["verdict"] == "inconclusive"
    assert "smallest exact p is 0.0312" in out["learnability.one_easiest"]["reason"]
    assert "memory_floats" in out["mqar_fig7.atlas_best"]


def test_real_baselines_are_computed_from_the_protocol(monkeypatch):
    args = {"settings": "24x3,40x5", "vocab_size": 48, "test_examples": 16}
    assert gates.mqar_copy_baselines(args, [10, 11]) == pytest.approx({"len=24/pairs=3": 1 / 3, "len=40/pairs=5": 0.2})
    small = {"dim": 8, "seq_len": 64, "rank": 2, "window": 8}
    base = gates.learnability_mean_baselines(small, [1], "final_loss")
    _, out = generate_stream("mlp", LearnabilityConfig(**small), seed=np.random.default_rng([1, 0, 1]))
    assert base["mlp"] == pytest.approx(float(mean_predictor_losses(out)[-6:].mean()))
    # the gate regenerates the streams the runs trained on, with the protocol's generator
    other = gates.learnability_mean_baselines({**small, "generator": "orthogonal"}, [1], "final_loss")
    ortho = LearnabilityConfig(**small, generator="orthogonal")
    _, out = generate_stream("mlp", ortho, seed=np.random.default_rng([1, 0, 1]))
    assert other["mlp"] == pytest.approx(float(mean_predictor_losses(out)[-6:].mean())) and other != base


def test_learnability_baselines_draw_streams_on_one_blas_thread(monkeypatch):
    """The report regenerates every learnability stream; beside busy study workers a second BLAS thread only waits."""
    from threadpoolctl import threadpool_info, threadpool_limits

    seen = []

    def curve(cfg, name, seed):
        seen.extend(pool["num_threads"] for pool in threadpool_info())
        return np.zeros(cfg.seq_len)

    monkeypatch.setattr(gates, "_mean_predictor_curve", curve)
    with threadpool_limits(2):
        gates.learnability_mean_baselines({"dim": 8, "seq_len": 64, "rank": 2, "window": 8}, [1], "final_loss")
    assert seen and set(seen) == {1}


def test_per_seed_tables_show_each_arm_once_per_protocol_and_metric():
    """Two claims on one protocol and metric share one table (an arm shared by both appears once); a missing or
    diverged seed shows as a dash; an unjudged record adds nothing."""
    from atlas_experiments.study.report_v2 import per_seed_tables

    registry = load_claims(ROOT / "config" / "study" / "claims.yaml")
    atlas = {70: 0.2, 71: 0.9}
    records = [
        {"claim": "mqar_v2.muon_vs_gd", "protocol": "mqar_v2_fig7_cpu", "comparisons": {},
         "values": {"atlas_w0": atlas, "omeganet_w0": {70: 0.5, 71: float("nan")}}},
        {"claim": "mqar_v2.fig7_dot_over_deltanet_d64", "protocol": "mqar_v2_fig7_cpu", "comparisons": {},
         "values": {"dot": {70: 0.1}, "deltanet": {70: 1.0, 71: 0.99949}}},
        {"claim": "mqar_v2.muon_vs_gd_matched_eta", "protocol": "mqar_v2_fig7_cpu", "comparisons": {},
         "values": {"atlas_w0": atlas, "omeganet_eta002_w0": {70: 0.3, 71: 0.4}}},
        {"claim": "mqar_v2.poly_features", "protocol": "mqar_v2_cpu", "verdict": "not run"},
    ]  # fmt: skip
    text = per_seed_tables(registry, records)
    assert text.count("**mqar_v2_fig7_cpu**, accuracy (higher is better)") == 1 and "mqar_v2_cpu" not in text
    assert ("judges mqar_v2.muon_vs_gd, mqar_v2.fig7_dot_over_deltanet_d64, mqar_v2.muon_vs_gd_matched_eta"
            in text)  # fmt: skip
    assert text.count("| atlas_w0 |") == 1 and "| atlas_w0 | 0.2 | 0.9 | 0.55 ± 0.49 |" in text
    assert "| omeganet_w0 | 0.5 | – | 0.5 ± 0 |" in text and "| dot | 0.1 | – | 0.1 ± 0 |" in text
    assert "| deltanet | 1 | 0.9995 |" in text  # four digits: 0.99949 is not rounded up to 1
