"""The report's "one more seed" reading aid: the registered rule applied again with one extra seed at mean +- 2 sd."""

from __future__ import annotations

import math

import pytest

from atlas_experiments.study.decision import decide
from atlas_experiments.study.figure import differences_figure
from atlas_experiments.study.stability import claim_stability, perturbed


def _record(verdict: str, **comparisons: dict[int, float]) -> dict:
    return {
        "claim": "x",
        "verdict": verdict,
        "comparisons": {k: decide(d, 0.05).to_dict() for k, d in comparisons.items()},
    }


def test_a_hold_that_one_seed_at_zero_would_break_is_fragile():
    # d = .1, .2, .3: mean .2, sd .1, p = 0.037 -> holds; an extra seed at 0 is not > 0 -> inconclusive;
    # at .4 it still holds (mean .25, p = 0.015)
    d = {1: 0.1, 2: 0.2, 3: 0.3}
    assert decide(d, 0.05).verdict == "holds"
    record = _record("holds", a=d)
    low, high = perturbed(record["comparisons"]["a"])
    assert (str(low), str(high)) == ("inconclusive", "holds")
    stability = claim_stability(record)
    assert stability == {
        "stable": False,
        "moves_to": ["inconclusive"],
        "comparisons": {"a": "fragile: -> inconclusive"},
    }


def test_a_clear_miss_is_stable():
    d = {1: -0.2, 2: -0.21, 3: -0.19}  # extra seeds at -0.22 and -0.18: still every d < 0, mean <= -delta
    stability = claim_stability(_record("does not hold", a=d))
    assert stability == {"stable": True, "moves_to": [], "comparisons": {"a": "stable"}}


def test_a_claim_combines_its_comparisons_under_each_extra_seed():
    # one comparison firmly holds, the other fragile: the claim (holds only if both hold) is fragile too
    record = _record("holds", firm={1: 0.5, 2: 0.52, 3: 0.48}, weak={1: 0.1, 2: 0.2, 3: 0.3})
    stability = claim_stability(record)
    assert stability["comparisons"] == {"firm": "stable", "weak": "fragile: -> inconclusive"}
    assert stability["moves_to"] == ["inconclusive"]


def test_no_spread_and_no_verdict():
    assert claim_stability({"claim": "x", "verdict": "not run"}) is None
    record = _record("inconclusive", a={1: math.nan, 2: math.nan, 3: 0.1})  # one finite seed: no sd
    assert claim_stability(record)["comparisons"] == {"a": "n/a (no spread)"}


def test_the_figure_is_written_for_judged_claims_only(tmp_path):
    assert differences_figure([{"claim": "x", "verdict": "not run"}], tmp_path / "f.png") is None
    path = differences_figure([_record("holds", a={1: 0.1, 2: 0.2, 3: 0.3})], tmp_path / "f.png")
    assert path.is_file() and path.read_bytes()[:4] == b"\x89PNG"
    assert not list(tmp_path.glob("*.tmp*"))


@pytest.mark.parametrize("spread_seed", [0.0, 0.4])
def test_perturbation_uses_the_registered_rule(spread_seed):
    d = {1: 0.1, 2: 0.2, 3: 0.3}
    low, high = perturbed(decide(d, 0.05).to_dict())
    expected = decide({**d, 4: spread_seed}, 0.05).verdict
    assert (low if spread_seed == 0.0 else high) == expected
