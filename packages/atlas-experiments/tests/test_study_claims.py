"""The pre-registered claims file: the repo's claims.yaml loads, its arms are real model configs, and malformed files
fail with errors that name the claim and the key."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest
import yaml

from atlas_experiments.study.arm_configs import check_arm_configs
from atlas_experiments.study.claims import ClaimsError, Registry, load_claims, parse_claims
from atlas_experiments.study.decision import DecisionError, SeedMismatchError, Verdict, judge_claim

CLAIMS = Path(__file__).resolve().parents[3] / "config" / "study" / "claims.yaml"

# The paper's directional claims (twelve, plus Fig. 7's MQAR ordering): each has at least one registered claim.
FAMILIES = (
    "omega_window",
    "poly_features",
    "deep_memory",
    "muon_vs_gd",
    "gated_memory",
    "hybrid",
    "deep_transformer",
    "dot",
    "hebbian_ranking",
    "extrapolation",
    "mad",
    "recall",
    "learnability",
    "mqar_fig7",
)


@pytest.fixture(scope="module")
def registry() -> Registry:
    return load_claims(CLAIMS)


def test_repo_claims_load(registry):
    ids = [c.id for c in registry.claims]
    assert len(ids) == len(set(ids))
    assert {i.split(".")[0] for i in ids} >= set(FAMILIES)
    assert registry.registered == "2026-12-01"
    for claim in registry.claims:
        assert claim.comparisons and claim.delta > 0 and claim.delta_unit
        assert claim.source and claim.paper_value and claim.statement
        if claim.testable:
            protocol = registry.protocol_of(claim)
            assert protocol.task == claim.metric.task and protocol.scale == claim.scale
            assert len(protocol.seeds) >= 3
        else:
            assert claim.why and claim.protocol is None
        assert (claim.scale == "cluster") <= (not claim.testable)


def test_docs_list_every_claim(registry):
    docs = (Path(__file__).resolve().parents[1] / "docs" / "study.md").read_text(encoding="utf-8")
    missing = [c.id for c in registry.claims if f"`{c.id}`" not in docs]
    assert not missing, f"docs/study.md does not list {missing}"


def test_every_arm_is_a_real_model_config(registry):
    import atlas_model

    for claim in registry.claims:
        for arm in claim.arms:
            if arm.preset is None:
                assert claim.metric.task == "learnability"
                continue
            assert arm.preset in atlas_model.PRESETS, (claim.id, arm.name)
            atlas_model.AtlasConfig.from_preset(arm.preset, size="tiny", **arm.config_overrides())
    check_arm_configs(registry)  # also at each protocol's size and model overrides


def test_arm_overrides_reach_the_config(registry):
    import atlas_model

    arm = registry.arms["atlas_c1_identity"]
    cfg = atlas_model.AtlasConfig.from_preset(arm.preset, size="tiny", **arm.config_overrides())
    assert (cfg.memory.window, cfg.memory.feature_map, cfg.memory.optimizer) == (1, "identity", "muon")


def test_loaded_objects_are_frozen(registry):
    claim = registry.claim("omega_window.mqar")
    with pytest.raises(dataclasses.FrozenInstanceError):
        claim.delta = 1.0
    with pytest.raises(TypeError):
        registry.arms["atlas_c1"].overrides["memory"]["window"] = 8
    with pytest.raises(KeyError, match="no claim"):
        registry.claim("nope")


# ------------------------------------------------------------------------------------------- judging a claim


def test_judge_a_registered_claim(registry):
    claim = registry.claim("learnability.three_beats_five")  # final loss, lower is better
    seeds = registry.protocol_of(claim).seeds
    values = {
        "attention_mlp": {s: 0.30 + 0.01 * i for i, s in enumerate(seeds)},
        "swa_mlp": {s: 0.50 + 0.02 * i for i, s in enumerate(seeds)},
    }
    result = judge_claim(claim, values, seeds)
    assert result.verdict is Verdict.HOLDS
    ((label, decision),) = result.comparisons
    assert label == "attention_mlp beats swa_mlp"
    assert decision.mean == pytest.approx(0.22)  # d_s = 0.20 + 0.01 i over five seeds
    assert result.to_dict()["verdict"] == "holds"


def test_judge_an_ordering_needs_every_step(registry):
    claim = registry.claim("hebbian_ranking.lm")  # omeganet < swdt < dla in validation loss
    seeds = (10, 11, 12)
    values = {
        "omeganet": dict(zip(seeds, (3.00, 3.01, 2.99))),
        "swdt": dict(zip(seeds, (3.20, 3.22, 3.21))),
        "dla": dict(zip(seeds, (3.205, 3.215, 3.215))),  # swdt vs dla: CI [-0.008, 0.011] inside +-0.02
    }
    result = judge_claim(claim, values, seeds)
    verdicts = [d.verdict for _, d in result.comparisons]
    assert verdicts == [Verdict.HOLDS, Verdict.DOES_NOT_HOLD]
    assert result.verdict is Verdict.DOES_NOT_HOLD


def test_judge_checks_registered_seeds_and_testability(registry):
    claim = registry.claim("omega_window.mqar")
    values = {"atlas": {10: 0.6, 11: 0.7, 12: 0.65}, "atlas_c1": {10: 0.5, 11: 0.5, 13: 0.5}}
    with pytest.raises(SeedMismatchError, match=r"omega_window.mqar.*'atlas_c1' lacks registered seed\(s\) \[12\]"):
        judge_claim(claim, values, seeds=(10, 11, 12))
    with pytest.raises(SeedMismatchError, match=r"\[atlas beats atlas_c1\].*'atlas_c1' lacks seed\(s\) 12"):
        judge_claim(claim, values)
    with pytest.raises(DecisionError, match="gated_memory.lm: registered as not testable"):
        judge_claim(registry.claim("gated_memory.lm"), {})


# ------------------------------------------------------------------------------------------- malformed files


def minimal() -> dict:
    """A small valid claims file (`data/claims_minimal.yaml`): one protocol, three arms, a testable and an untestable
    claim; a fresh copy per call, for the tests to mutate."""
    return yaml.safe_load((Path(__file__).parent / "data" / "claims_minimal.yaml").read_text(encoding="utf-8"))


def write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "claims.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def test_minimal_file_loads(tmp_path):
    reg = load_claims(write(tmp_path, minimal()))
    assert [c.id for c in reg.claims] == ["omega.mqar", "gated.lm"]
    assert reg.tuning_history[0]["default"] == "eta 0.02"


def _set(path: str, value):
    """A mutation of `minimal()`: set (or, with value ..., delete) the key at a dotted path; ints index lists."""

    def apply(data: dict) -> dict:
        *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
        node = data
        for p in parents:
            node = node[p]
        if value is ...:
            del node[last]
        else:
            node[last] = value
        return data

    return apply


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (_set("claims.0.metric.better", "lower"), "claims[omega.mqar].metric.better: expected 'higher'"),
        (_set("claims.1.metric.better", "higher"), "claims[gated.lm].metric.better: expected 'lower'"),
        (_set("claims.0.colour", "red"), "claims[omega.mqar].colour: unknown key"),
        (_set("claims.0.delta", ...), "claims[omega.mqar].delta: required"),
        (_set("claims.0.delta.value", -0.05), "claims[omega.mqar].delta.value: expected a positive number"),
        (_set("claims.0.delta.unit", ""), "claims[omega.mqar].delta.unit: expected a non-empty string"),
        (_set("claims.0.arms", ["atlas", "atlas_c9"]), "claims[omega.mqar].arms: unknown arm 'atlas_c9'"),
        (_set("claims.0.predicted.order", ["atlas", "atlas_pp"]), "claims[omega.mqar].predicted.order: 'atlas_pp'"),
        (_set("claims.0.predicted", {"order": ["atlas"], "pairs": []}), "claims[omega.mqar].predicted: expected"),
        (_set("claims.0.metric.name", "acc"), "claims[omega.mqar].metric.name: expected one of accuracy"),
        (_set("claims.0.test.protocol", "lm_gpu"), "claims[omega.mqar].test.protocol: expected one of mqar_cpu"),
        (_set("claims.0.test.scale", "cluster"), "claims[omega.mqar].test.scale: 'cluster' is not a scale we run"),
        (_set("claims.0.test.scale", "gpu"), "claims[omega.mqar].test.protocol: mqar_cpu runs mqar at cpu"),
        (_set("claims.1.why", ...), "claims[gated.lm].why: expected a non-empty string"),
        (_set("claims.0.why", "because"), "claims[omega.mqar].why: only for claims with testable: false"),
        (_set("claims.0.test.testable", "yes"), "claims[omega.mqar].test.testable: expected true or false"),
        (_set("claims.0.test.priority", 0), "claims[omega.mqar].test.priority: expected an int >= 1"),
        (_set("claims.1.id", "omega.mqar"), "claims[omega.mqar].id: duplicate claim id"),
        (_set("claims.1.id", "Gated LM"), "claims[1].id: expected lower-case words"),
        (_set("claims.0.id", ...), "claims[0].id: required"),
        (_set("rule.alpha", 0.1), "rule: "),
        (_set("schema", 1), "schema: expected 2"),
        (_set("rule_v2.alpha", 0.1), "rule_v2: "),
        (_set("rule_v2.registered", "2026-11-30"), "rule_v2.registered: 2026-11-30 is before"),
        (_set("claims.0.outcome_seen", ...), "claims[omega.mqar].outcome_seen: expected a non-empty string"),
        (_set("claims.0.outcome_seen", "maybe"), "claims[omega.mqar].outcome_seen: expected '<yes|partly|no>: why'"),
        (_set("claims.1.outcome_seen", "no: x"), "claims[gated.lm].outcome_seen: only for testable claims"),
        (_set("protocols.mqar_cpu.gate.kind", "unigram"), "protocols.mqar_cpu.gate.kind: unigram gates lm protocols"),
        (_set("protocols.mqar_cpu.gate.margin", -1), "protocols.mqar_cpu.gate.margin: expected a number >= 0"),
        (_set("protocols.mqar_cpu.gate.min_accuracy", ...), "protocols.mqar_cpu.gate.min_accuracy: required"),
        (_set("paper", ...), "paper: required"),
        (_set("protocols.mqar_cpu.seeds", [10, 11]), "protocols.mqar_cpu.seeds: expected 3 or more"),
        (_set("arms.atlas_c1.select", {"setting": "mlp", "memory": "2x4"}), "arms.atlas_c1: expected exactly one"),
        (_set("arms.unused", {"preset": "dla"}), "arms: defined but used by no claim: unused"),
        (_set("amendments", [{"date": "2026-11-30", "note": "x", "results_seen": False}]), "amendments[0].date"),
        (_set("registered", "yesterday"), "registered: expected a date"),
    ],
)
def test_bad_files_name_the_claim_and_key(tmp_path, mutate, message):
    with pytest.raises(ClaimsError) as err:
        load_claims(write(tmp_path, mutate(minimal())))
    assert message in str(err.value)


def test_task_cells_and_presets_do_not_mix(tmp_path):
    data = minimal()
    data["arms"]["stream"] = {"select": {"setting": "swa_mlp", "memory": "2x4"}}
    data["claims"][0]["arms"] = ["atlas", "stream"]
    data["claims"][0]["predicted"] = {"order": ["atlas", "stream"]}
    with pytest.raises(ClaimsError, match=r"claims\[omega.mqar\].arms: arm 'stream' must be a model preset"):
        parse_claims(data)
    data["arms"]["stream"] = {"select": {"setting": "swa", "memory": "2x4"}}
    with pytest.raises(ClaimsError, match=r"arms.stream.select.setting: expected one of low_rank"):
        parse_claims(data)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"colour": 3}, "claims[omega.mqar].arms.atlas_c1.overrides (size tiny): overrides.colour: not an AtlasConfig"),
        ({"memory": {"windw": 2}}, "overrides.memory.windw: not a MemoryConfig field (did you mean 'window'?)"),
        ({"memory": {"window": 0}}, "window: expected an int >= 1"),
    ],
)
def test_bad_override_keys_name_the_claim_and_arm(overrides, message):
    data = minimal()
    data["arms"]["atlas_c1"]["overrides"] = overrides
    with pytest.raises(ClaimsError) as err:
        check_arm_configs(parse_claims(data))
    assert message in str(err.value)


def test_unknown_preset_and_unreadable_file(tmp_path):
    data = copy.deepcopy(minimal())
    data["arms"]["atlas_pp"]["preset"] = "atlas_ppp"
    with pytest.raises(ClaimsError, match=r"claims\[gated.lm\].arms.atlas_pp.preset: unknown 'atlas_ppp'"):
        check_arm_configs(parse_claims(data))
    bad = tmp_path / "bad.yaml"
    bad.write_text("claims: [\n", encoding="utf-8")
    with pytest.raises(ClaimsError, match="cannot parse config file"):
        load_claims(bad)
    with pytest.raises(ClaimsError, match="config file not found"):
        load_claims(tmp_path / "missing.yaml")
