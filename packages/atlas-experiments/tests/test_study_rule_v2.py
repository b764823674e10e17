"""Rule v2 of the claims study: its p-values against scipy, its confidence bounds against the tests they invert,
its edge cases, and its error rates by Monte Carlo (false "holds" at effect 0, false "below delta" at effect delta,
Holm's family-wise rate), plus the power calculation checked by simulating the rule itself."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats as stats  # the independent reference for the p-values (mlflow depends on scipy)

from atlas_experiments.study.decision import Verdict
from atlas_experiments.study.paired_tests import holm, one_sided, sign_flip_bounds, sign_flip_p
from atlas_experiments.study.power import holds_probability, seeds_for_power
from atlas_experiments.study.rule_v2 import ALPHA, combine, compare, smallest_exact_n

DELTA = 0.05


def judge(*rows, delta=DELTA):
    """Rule v2 on comparisons given as per-seed difference lists."""
    return combine("claim", [compare(f"c{i}", dict(enumerate(r)), delta) for i, r in enumerate(rows)])


# ------------------------------------------------------------------------------------------- p-values vs scipy


@pytest.mark.parametrize("n", [3, 5, 7, 8, 12])
def test_sign_flip_p_matches_scipy_permutation_test(n):
    rng = np.random.default_rng(n)
    for _ in range(3):
        d = np.round(rng.normal(0.02, 0.05, n), 3)  # rounded: some ties and exact zeros among subset sums
        for mu, alternative in ((0.0, "greater"), (DELTA, "less")):
            ref = stats.permutation_test(
                (d - mu,), np.mean, permutation_type="samples", alternative=alternative, n_resamples=np.inf
            ).pvalue
            assert sign_flip_p(d, mu, alternative) == pytest.approx(ref, abs=1e-12)


def test_t_branch_matches_scipy_ttest():
    d = np.random.default_rng(0).normal(0.03, 0.05, 15)
    tests = one_sided(list(d), DELTA, ALPHA)
    assert tests.test == "t"
    assert tests.p_greater == pytest.approx(stats.ttest_1samp(d, 0.0, alternative="greater").pvalue, rel=1e-9)
    assert tests.p_less == pytest.approx(stats.ttest_1samp(d, DELTA, alternative="less").pvalue, rel=1e-9)
    half = stats.t.ppf(0.95, 14) * d.std(ddof=1) / math.sqrt(15)
    assert (tests.lower, tests.upper) == pytest.approx((d.mean() - half, d.mean() + half), rel=1e-9)


@pytest.mark.parametrize("n", [5, 6, 9, 11])
def test_sign_flip_bounds_invert_the_tests(n):
    """The upper bound is where the below-test starts to reject: p_less < alpha just above it, not just below."""
    d = np.random.default_rng(100 + n).normal(0.0, 0.1, n)
    lower, upper = sign_flip_bounds(d, ALPHA)
    eps = 1e-9
    assert sign_flip_p(d, upper + eps, "less") < ALPHA <= sign_flip_p(d, upper - eps, "less")
    assert sign_flip_p(d, lower - eps, "greater") < ALPHA <= sign_flip_p(d, lower + eps, "greater")


def test_small_n_has_no_finite_bounds_and_no_significance():
    lower, upper = sign_flip_bounds([0.1, 0.2, 0.3, 0.4], ALPHA)
    assert (lower, upper) == (-math.inf, math.inf)
    assert sign_flip_p(np.array([0.1, 0.2, 0.3]), 0.0, "greater") == 0.125
    assert smallest_exact_n(1) == 5 and smallest_exact_n(4) == 7 and smallest_exact_n(6) == 7


def test_holm_steps_down():
    assert holm([0.01, 0.04, 0.02], 0.05) == [True, True, True]  # 0.01 < .05/3, 0.02 < .05/2, 0.04 < .05
    assert holm([0.01, 0.04, 0.03], 0.05) == [True, False, False]  # 0.03 >= .05/2 stops the steps
    assert holm([0.02, 0.04, 0.03], 0.05) == [False, False, False]  # 0.02 >= .05/3 stops at once
    assert holm([0.001, 0.2, 0.02], 0.05) == [True, False, True]


# ------------------------------------------------------------------------------------------- verdicts and edges


def test_holds_and_does_not_hold():
    assert judge([0.3, 0.31, 0.29, 0.3, 0.32]).verdict is Verdict.HOLDS
    reversed_ = judge([-0.15, -0.14, -0.14, -0.143, -0.126])
    assert reversed_.verdict is Verdict.DOES_NOT_HOLD
    (c,) = reversed_.comparisons
    assert c.p_below == 1 / 32 and c.ci[1] == pytest.approx(-0.126)


def test_a_small_real_effect_holds_and_says_it_is_below_delta():
    claim = judge([0.01, 0.012, 0.011, 0.009, 0.01, 0.011, 0.012])
    assert claim.verdict is Verdict.HOLDS and claim.effect_below_delta
    assert claim.label() == "holds, effect below delta"


def test_three_seeds_never_decide():
    """v1 said "does not hold" from three negative signs; no exact test at n = 3 can."""
    claim = judge([-0.0969, -0.0259, -0.138])
    assert claim.verdict is Verdict.INCONCLUSIVE
    assert "smallest exact p is 0.125" in claim.comparisons[0].reason


def test_edge_cases_give_an_answer():
    assert judge([0.2, 0.2, 0.2, 0.2, 0.2]).verdict is Verdict.HOLDS  # zero spread, exact p = 1/32
    equal = judge([0.0] * 5)  # equal arms: the effect is excluded from delta, the direction is not established
    assert equal.verdict is Verdict.DOES_NOT_HOLD and equal.comparisons[0].p_direction == 1.0
    at_delta = judge([DELTA] * 5)  # exactly delta: the direction holds; every below-test subset sum is a tie
    assert at_delta.verdict is Verdict.HOLDS and at_delta.comparisons[0].p_below == 1.0
    assert judge([0.3, 0.4]).verdict is Verdict.INCONCLUSIVE  # n = 2: smallest p 0.25
    assert judge([0.3]).verdict is Verdict.INCONCLUSIVE and math.isnan(judge([0.3]).comparisons[0].sd)
    assert judge([]).verdict is Verdict.INCONCLUSIVE
    nan = judge([0.3, 0.31, float("nan"), 0.3, 0.32, 0.3, 0.31])
    assert nan.verdict is Verdict.INCONCLUSIVE and nan.comparisons[0].diverged == (2,)
    assert "diverged seed(s) 2" in nan.comparisons[0].reason
    ties = judge([0.1, 0.0, 0.1, 0.0, 0.1, 0.0, 0.1])  # zeros tie with their flips
    assert ties.comparisons[0].p_direction == pytest.approx(sign_flip_p(np.array([0.1] * 4), 0.0, "greater"))
    with pytest.raises(ValueError, match="delta"):
        compare("x", {1: 0.1}, 0.0)


def test_a_failed_gate_is_not_resolved_whatever_the_numbers():
    gate = {"passed": False, "reason": "best arm below copy-from-context"}
    claim = combine("c", [compare("a", dict(enumerate([0.3] * 6)), DELTA)], gate)
    assert claim.verdict is Verdict.NOT_RESOLVED and "copy-from-context" in claim.reason
    assert claim.comparisons[0].direction_holds  # the numbers are still shown


# ------------------------------------------------------------------------------------------- error rates

REPS = 1500
TOL = 3 * math.sqrt(ALPHA * (1 - ALPHA) / REPS)  # three Monte Carlo standard errors above alpha


def draw(kind: str, rng: np.random.Generator, n: int, mean: float) -> np.ndarray:
    if kind == "normal":
        return rng.normal(mean, 0.05, (REPS, n))
    # bimodal: a seed lands in one of two modes (e.g. learns the task early or late), symmetric about the mean
    return mean + rng.choice([-0.08, 0.08], (REPS, n)) + rng.normal(0.0, 0.01, (REPS, n))


@pytest.mark.parametrize("kind", ["normal", "bimodal"])
@pytest.mark.parametrize("n", [3, 5, 8, 16])
def test_error_rates(kind, n):
    rng = np.random.default_rng([n, len(kind)])
    false_holds = np.mean([judge(row).comparisons[0].direction_holds for row in draw(kind, rng, n, 0.0)])
    false_below = np.mean([judge(row).comparisons[0].below_delta for row in draw(kind, rng, n, DELTA)])
    assert false_holds <= ALPHA + TOL, f"false holds {false_holds:.4f} at effect 0"
    assert false_below <= ALPHA + TOL, f"false 'below delta' {false_below:.4f} at effect = delta"


@pytest.mark.parametrize("n", [5, 8, 16])
def test_holm_family_wise_rate(n):
    """Three comparisons sharing one arm (correlated), all at effect 0: P(any direction established) <= alpha;
    all at effect delta: P(the claim does not hold) <= alpha."""
    rng = np.random.default_rng(n)
    shared = rng.normal(0.0, 0.05, (REPS, n))
    rows = [shared - rng.normal(0.0, 0.05, (REPS, n)) for _ in range(3)]
    any_holds = np.mean([any(c.direction_holds for c in judge(*(r[i] for r in rows)).comparisons)
                         for i in range(REPS)])  # fmt: skip
    dnh = np.mean([judge(*(r[i] + DELTA for r in rows)).verdict is Verdict.DOES_NOT_HOLD for i in range(REPS)])
    assert any_holds <= ALPHA + TOL and dnh <= ALPHA + TOL


# ------------------------------------------------------------------------------------------- seeds from power


def test_seeds_from_power_reach_the_target_when_the_rule_is_simulated():
    plan = seeds_for_power(0.09, DELTA, 2)
    assert plan.n >= 5 and plan.power >= 0.8
    assert holds_probability(plan.n - 1, 2 * DELTA, 0.09, 2) < 0.8 or plan.n == 6  # the fewest that reach it
    rng = np.random.default_rng(7)
    reps = 600
    hits = sum(judge(*rng.normal(2 * DELTA, 0.09, (2, plan.n))).verdict is Verdict.HOLDS for _ in range(reps))
    assert hits / reps >= 0.8 - 3 * math.sqrt(0.16 / reps)


def test_seeds_from_power_floors_and_edges():
    assert seeds_for_power(0.0, DELTA, 1).n == 5
    assert seeds_for_power(0.0, DELTA, 6).n == 7  # Holm's strictest step needs 2^-n < 0.05 / 6
    assert seeds_for_power(float("nan"), DELTA, 1).note.startswith("no pilot sd")
    assert seeds_for_power(0.045, DELTA, 1).n == 5
    assert seeds_for_power(0.09, DELTA, 1).n > seeds_for_power(0.045, DELTA, 1).n
