"""The decision rule at its boundaries (mean exactly delta, p exactly alpha, a CI end exactly at +-delta, zero
differences), the exact reasons and records a report prints, and a higher-is-better claim judged end to end.

Written against the mutants `make mutants` left alive in study/decision.py (docs/testing.md): every strict or
non-strict inequality of the pre-registered rule is pinned by a case that sits on it.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from atlas_experiments.study import decision, student_t
from atlas_experiments.study.claims import load_claims
from atlas_experiments.study.decision import (
    ALPHA,
    ClaimDecision,
    SeedMismatchError,
    Verdict,
    decide,
    judge_claim,
    paired_differences,
)

NAN, INF = math.nan, math.inf
CLAIMS = Path(__file__).resolve().parents[3] / "config" / "study" / "claims.yaml"


def seeds(*values):
    return {10 + i: v for i, v in enumerate(values)}


def test_verdicts_print_as_the_pre_registration_words():
    assert [str(v) for v in Verdict] == ["holds", "does not hold", "inconclusive", "not resolved (floor)"]


# ----------------------------------------------------------------------------------------- boundaries


def test_mean_exactly_delta_is_enough():
    # d = 0.25, 0.5, 0.75 (exact in binary): mean 0.5 = delta, t = 2 sqrt 3, p = 0.037
    d = decide(seeds(0.25, 0.5, 0.75), 0.5)
    assert d.mean == 0.5 and d.p_value < ALPHA
    assert d.verdict is Verdict.HOLDS
    assert d.reason == "every d_s > 0, mean 0.5 >= delta 0.5, p = 0.0371 < 0.05"


def test_mean_exactly_minus_delta_does_not_hold():
    d = decide(seeds(-0.25, -0.5, -0.75), 0.5)
    assert d.mean == -0.5
    assert d.verdict is Verdict.DOES_NOT_HOLD
    assert d.reason == "every d_s < 0 and mean -0.5 <= -delta -0.5"


def test_mean_exactly_delta_with_a_large_p_names_the_p_value():
    # mean 0.5 = delta, sd 0.375: t = 2.31, p = 0.074 -- the reason is the p-value, not the mean
    d = decide(seeds(0.125, 0.5, 0.875), 0.5)
    assert d.verdict is Verdict.INCONCLUSIVE
    assert d.reason == (
        "every d_s > 0, mean 0.5 >= delta, but p = 0.0736 >= 0.05; CI not inside +-delta (seeds resolve effects "
        ">= 0.632)"
    )


def test_p_exactly_alpha_does_not_hold(monkeypatch):
    # "p < 0.05" is strict: the same all-positive seeds hold at p just below alpha and not at alpha itself
    monkeypatch.setattr(student_t, "sf", lambda t, df: ALPHA)
    assert decide(seeds(0.1, 0.2, 0.3), 0.05).verdict is Verdict.INCONCLUSIVE
    monkeypatch.setattr(student_t, "sf", lambda t, df: math.nextafter(ALPHA, 0.0))
    assert decide(seeds(0.1, 0.2, 0.3), 0.05).verdict is Verdict.HOLDS


@pytest.mark.parametrize(("shift", "ci"), [(0.25, (-0.5, 1.0)), (-0.25, (-1.0, 0.5))])
def test_a_ci_end_exactly_at_delta_is_not_inside(monkeypatch, shift, ci):
    # d = shift + (-1, -1, -1, 3): sd 2, se 1 exactly; a quantile of 0.75 makes the CI shift -+ 0.75, with one end
    # exactly at +-delta = +-1. The interval (-delta, +delta) is open, so the CI is not inside it.
    monkeypatch.setattr(student_t, "ppf", lambda q, df: 0.75)
    d = decide(seeds(*(shift + x for x in (-1.0, -1.0, -1.0, 3.0))), 1.0)
    assert (d.sd, d.ci) == (2.0, ci)
    assert d.verdict is Verdict.INCONCLUSIVE
    monkeypatch.setattr(student_t, "ppf", lambda q, df: math.nextafter(0.75, 0.0))
    assert decide(seeds(*(shift + x for x in (-1.0, -1.0, -1.0, 3.0))), 1.0).verdict is Verdict.DOES_NOT_HOLD


def test_a_zero_difference_blocks_holds():
    # five seeds at +0.3 and one at exactly 0: mean 0.25, p ~ 0.002, but "every d_s > 0" fails
    d = decide(seeds(0.0, 0.3, 0.3, 0.3, 0.3, 0.3), 0.05)
    assert d.p_value < ALPHA and d.mean >= 0.05
    assert d.verdict is Verdict.INCONCLUSIVE
    assert d.reason == "some d_s = 0; CI not inside +-delta (seeds resolve effects >= 0.101)"


def test_a_zero_difference_blocks_does_not_hold_by_sign():
    d = decide(seeds(0.0, -0.3, -0.3, -0.3, -0.3, -0.3), 0.05)
    assert d.verdict is Verdict.INCONCLUSIVE
    assert d.reason == "some d_s = 0; CI not inside +-delta (seeds resolve effects >= 0.101)"


def test_a_positive_seed_blocks_does_not_hold_by_sign():
    # mean -1.17 <= -delta, but one seed favours the claim: mixed signs, wide CI
    d = decide(seeds(0.5, -2.0, -2.0), 0.05)
    assert d.mean <= -0.05
    assert d.verdict is Verdict.INCONCLUSIVE
    assert d.reason == "mixed signs across seeds; CI not inside +-delta (seeds resolve effects >= 2.43)"


# ----------------------------------------------------------------------------------- few finite seeds


def test_one_finite_seed_has_a_mean_and_no_spread():
    d = decide(seeds(0.2, NAN, NAN), 0.05)
    assert d.verdict is Verdict.INCONCLUSIVE
    assert (d.n, d.mean) == (1, 0.2)
    assert all(math.isnan(x) for x in (d.sd, *d.ci, d.t, d.p_value, d.resolvable))
    assert d.reason == "only 1 finite seed(s) of 3; diverged seed(s) 11, 12 left out"
    none = decide(seeds(NAN, INF, NAN), 0.05)
    assert none.n == 0 and math.isnan(none.mean) and none.diverged == (10, 11, 12)


def test_two_finite_seeds_get_full_statistics():
    d = decide(seeds(0.2, NAN, 0.3), 0.05)
    assert d.verdict is Verdict.INCONCLUSIVE
    assert d.mean == pytest.approx(0.25) and d.sd == pytest.approx(math.sqrt(0.005))
    assert d.ci == pytest.approx((0.25 - 6.313752 * 0.05, 0.25 + 6.313752 * 0.05), abs=1e-6)
    assert d.reason == "only 2 finite seed(s) of 3; diverged seed(s) 11 left out"


# ------------------------------------------------------------------------------------- reasons, records


@pytest.mark.parametrize(
    ("values", "verdict", "reason"),
    [
        ((0.1, 0.2, 0.3), Verdict.HOLDS, "every d_s > 0, mean 0.2 >= delta 0.05, p = 0.0371 < 0.05"),
        (
            (-0.2, NAN, -0.25, INF, -0.3, -0.22),
            Verdict.DOES_NOT_HOLD,
            "every d_s < 0 and mean -0.2425 <= -delta -0.05; diverged seed(s) 11, 13 left out",
        ),
        (
            (0.2, NAN, 0.25, NAN, 0.3, 0.22),
            Verdict.INCONCLUSIVE,
            "the finite seeds would hold, but diverged seed(s) 11, 13 are not d_s > 0",
        ),
        (
            (0.01, -0.01, 0.005, 0.0, -0.004),
            Verdict.DOES_NOT_HOLD,
            "90% CI [-0.007197, 0.007597] lies inside (-0.05, +0.05)",
        ),
        (
            (-0.01, -0.02, -0.09),
            Verdict.INCONCLUSIVE,
            "every d_s < 0 but mean -0.04 > -delta -0.05; CI not inside +-delta (seeds resolve effects >= 0.0735)",
        ),
        (
            (0.01, 0.02, 0.09),
            Verdict.INCONCLUSIVE,
            "every d_s > 0 but mean 0.04 < delta 0.05; CI not inside +-delta (seeds resolve effects >= 0.0735)",
        ),
        (
            (0.3, -0.2, 0.1),
            Verdict.INCONCLUSIVE,
            "mixed signs across seeds; CI not inside +-delta (seeds resolve effects >= 0.424)",
        ),
    ],
)
def test_reasons_in_full(values, verdict, reason):
    d = decide(seeds(*values), 0.05)
    assert (d.verdict, d.reason) == (verdict, reason)


def test_decision_record():
    d = decide(seeds(0.1, NAN, 0.2, 0.3), 0.05)
    record = d.to_dict()
    assert list(record) == [
        "verdict", "reason", "delta", "seeds", "differences", "diverged", "n", "mean", "sd", "ci", "t", "p_value",
        "resolvable",
    ]  # fmt: skip
    assert record["verdict"] == "inconclusive" and type(record["verdict"]) is str
    assert record["seeds"] == [10, 11, 12, 13] and record["diverged"] == [11]
    assert record["differences"][0] == 0.1 and math.isnan(record["differences"][1])
    assert record["ci"] == list(d.ci) and isinstance(record["ci"], list)
    with pytest.raises(dataclasses.FrozenInstanceError):
        d.verdict = Verdict.HOLDS  # type: ignore[misc]


def test_seed_mismatch_message_in_full():
    with pytest.raises(SeedMismatchError) as err:
        paired_differences({10: 0.5, 11: 0.6}, {12: 0.4, 13: 0.5}, higher_is_better=True)
    assert str(err.value) == (
        "arms are not paired by seed: 'better' lacks seed(s) 12, 13; 'worse' lacks seed(s) 10, 11"
    )


# --------------------------------------------------------------------------------- a claim end to end


def test_judge_a_higher_is_better_claim():
    claim = load_claims(CLAIMS).claim("omega_window.mqar")  # MQAR accuracy: higher is better
    assert claim.metric.better == "higher"
    values = {"atlas": seeds(0.80, 0.85, 0.90), "atlas_c1": seeds(0.60, 0.62, 0.64)}
    result = judge_claim(claim, values)
    assert result.verdict is Verdict.HOLDS
    ((label, d),) = result.comparisons
    assert d.differences == pytest.approx((0.20, 0.23, 0.26))
    assert result.to_dict() == {"claim": "omega_window.mqar", "verdict": "holds", "comparisons": {label: d.to_dict()}}
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.verdict = Verdict.INCONCLUSIVE  # type: ignore[misc]
    assert isinstance(result, ClaimDecision) and decision.combine([d.verdict]) is Verdict.HOLDS
