"""The claims study's decision rule and its Student t functions, on synthetic numbers with hand-computed results."""

from __future__ import annotations

import math

import pytest

from atlas_experiments.study import student_t
from atlas_experiments.study.decision import (
    ALPHA,
    CI_LEVEL,
    MIN_SEEDS,
    DecisionError,
    SeedMismatchError,
    Verdict,
    combine,
    contrast_differences,
    decide,
    paired_differences,
)

NAN = math.nan

# ----------------------------------------------------------------------------------------------- Student t


# Upper quantiles t_{q, df} from a standard table (printed to three decimals).
@pytest.mark.parametrize(
    ("q", "df", "table"),
    [
        (0.95, 1, 6.314),
        (0.975, 1, 12.706),
        (0.95, 2, 2.920),
        (0.975, 2, 4.303),
        (0.95, 3, 2.353),
        (0.95, 4, 2.132),
        (0.975, 4, 2.776),
        (0.975, 9, 2.262),
        (0.995, 10, 3.169),
        (0.95, 30, 1.697),
        (0.975, 120, 1.980),
    ],
)
def test_quantiles_match_the_t_table(q, df, table):
    assert student_t.ppf(q, df) == pytest.approx(table, abs=6e-4)
    assert student_t.cdf(student_t.ppf(q, df), df) == pytest.approx(q, abs=1e-12)


@pytest.mark.parametrize("t", [-30.0, -2.5, -0.3, 0.0, 0.7, 1.0, 3.0, 12.0, 400.0])
def test_closed_forms_for_one_and_two_degrees_of_freedom(t):
    cauchy = 0.5 + math.atan(t) / math.pi
    assert student_t.cdf(t, 1) == pytest.approx(cauchy, rel=1e-12, abs=1e-15)
    two = 0.5 + t / (2.0 * math.sqrt(2.0 + t * t))
    assert student_t.cdf(t, 2) == pytest.approx(two, rel=1e-12, abs=1e-15)


def test_small_tail_keeps_relative_precision():
    # df = 2: P(T > t) = 1/2 - t / (2 sqrt(2 + t^2)) = 1 / (sqrt(2 + t^2) (sqrt(2 + t^2) + t)), no cancellation
    t = 1e4
    exact = 1.0 / (math.sqrt(2.0 + t * t) * (math.sqrt(2.0 + t * t) + t))
    assert student_t.sf(t, 2) == pytest.approx(exact, rel=1e-10)
    assert student_t.sf(math.inf, 3) == 0.0 and student_t.sf(-math.inf, 3) == 1.0


def test_incomplete_beta_closed_forms():
    for x in (0.0, 0.1, 0.5, 0.93, 1.0):
        assert student_t.betainc(1.0, 1.0, x) == pytest.approx(x, abs=1e-15)
        assert student_t.betainc(3.0, 1.0, x) == pytest.approx(x**3, abs=1e-14)
        assert student_t.betainc(1.0, 2.5, x) == pytest.approx(1.0 - (1.0 - x) ** 2.5, abs=1e-14)
    with pytest.raises(ValueError, match="a, b > 0"):
        student_t.betainc(0.0, 1.0, 0.5)
    with pytest.raises(ValueError, match="0 < q < 1"):
        student_t.ppf(1.0, 3)


def test_agrees_with_scipy_where_installed():
    # scipy is no dependency of the package; where it is installed it is an independent reference
    stats = pytest.importorskip("scipy.stats", reason="scipy not installed (optional cross-check)")
    for df in (1, 2, 3, 4, 7, 19, 60, 2.5):
        for t in (-12.0, -1.3, 0.2, 1.7, 2.9, 8.0, 50.0):
            assert student_t.sf(t, df) == pytest.approx(stats.t.sf(t, df), rel=1e-11)
        for q in (0.6, 0.9, 0.95, 0.975, 0.999):
            assert student_t.ppf(q, df) == pytest.approx(stats.t.ppf(q, df), rel=1e-11)


# ------------------------------------------------------------------------------------------------- verdicts


def seeds(*values):
    return {10 + i: v for i, v in enumerate(values)}


def test_hand_computed_case_holds():
    # d = 0.1, 0.2, 0.3: mean 0.2, sd 0.1, se 0.1 / sqrt 3, t = 2 sqrt 3 = 3.4641, df 2;
    # p = 1/2 - t / (2 sqrt(2 + t^2)) = 1/2 - 3.4641 / (2 sqrt 14) = 0.037090;
    # 90 % CI: 0.2 -+ 2.919986 x 0.057735 = [0.03141, 0.36859]
    d = decide(seeds(0.1, 0.2, 0.3), 0.05)
    assert d.verdict is Verdict.HOLDS
    assert (d.n, d.seeds, d.diverged) == (3, (10, 11, 12), ())
    assert d.mean == pytest.approx(0.2)
    assert d.sd == pytest.approx(0.1)
    assert d.t == pytest.approx(2.0 * math.sqrt(3.0))
    assert d.p_value == pytest.approx(0.5 - 2.0 * math.sqrt(3.0) / (2.0 * math.sqrt(14.0)), rel=1e-12)
    assert d.p_value == pytest.approx(0.037090, abs=1e-6)
    assert d.ci == pytest.approx((0.031415, 0.368585), abs=1e-6)
    assert d.resolvable == pytest.approx(2.919986 * 0.1 / math.sqrt(3.0), rel=1e-6)
    assert d.to_dict()["verdict"] == "holds"


def test_lower_is_better_metric_is_signed_toward_the_prediction():
    # a loss: the predicted-better arm is lower on every seed by 0.1-0.3 nats
    better = seeds(2.0, 2.1, 2.2)
    worse = seeds(2.1, 2.3, 2.5)
    d = paired_differences(better, worse, higher_is_better=False)
    assert d == pytest.approx(seeds(0.1, 0.2, 0.3))
    assert decide(d, 0.05).verdict is Verdict.HOLDS


def test_clear_does_not_hold_all_negative():
    d = decide(seeds(-0.2, -0.25, -0.3), 0.05)
    assert d.verdict is Verdict.DOES_NOT_HOLD
    assert "every d_s < 0" in d.reason
    assert d.p_value > 0.95


def test_does_not_hold_by_equivalence():
    # mean 0, sd 0.00791, n 5: 90 % CI +-2.1318 x 0.00354 = +-0.0075, inside (-0.05, 0.05)
    d = decide(seeds(0.01, -0.01, 0.005, 0.0, -0.005), 0.05)
    assert d.verdict is Verdict.DOES_NOT_HOLD
    assert d.ci[0] > -0.05 and d.ci[1] < 0.05
    assert "inside" in d.reason


def test_consistent_effect_below_delta_does_not_hold():
    # every seed favours the claim, but by 0.01-0.03 with a tight CI [0.003, 0.037]: smaller than what counts
    d = decide(seeds(0.01, 0.02, 0.03), 0.05)
    assert d.verdict is Verdict.DOES_NOT_HOLD


@pytest.mark.parametrize(
    ("values", "reason"),
    [
        ((0.3, -0.2, 0.1), "mixed signs"),
        ((0.01, 0.02, 0.09), "mean 0.04 < delta"),  # all positive, mean below delta, CI [-0.034, 0.114]
        ((0.1, 0.2, 0.6), "p = 0.0942"),  # all positive, mean 0.3 >= delta, t = 1.964, p = 0.094
        ((-0.01, -0.02, -0.09), "every d_s < 0 but mean"),
    ],
)
def test_inconclusive_cases(values, reason):
    d = decide(seeds(*values), 0.05)
    assert d.verdict is Verdict.INCONCLUSIVE
    assert reason in d.reason


def test_one_negative_seed_blocks_holds_despite_a_small_p_value():
    # mean 0.432 >= delta and p = 0.009 < 0.05, but seed 14 went the other way
    d = decide(seeds(0.5, 0.6, 0.55, 0.52, -0.01), 0.05)
    assert d.p_value < ALPHA and d.mean >= 0.05
    assert d.verdict is Verdict.INCONCLUSIVE
    assert "mixed signs" in d.reason


def test_all_positive_p_value_at_the_boundary():
    # n = 3 needs t > t_{0.95, 2} = 2.92 to hold: t just below misses, just above holds
    for t_target, verdict in ((2.9, Verdict.INCONCLUSIVE), (2.95, Verdict.HOLDS)):
        # d = m + s * (-1, 0, 1): sd = s, t = m sqrt(3) / s
        s = 0.1
        m = t_target * s / math.sqrt(3.0)
        d = decide(seeds(m - s, m, m + s), 0.05)
        assert d.t == pytest.approx(t_target)
        assert d.verdict is verdict
        assert (d.p_value < ALPHA) == (verdict is Verdict.HOLDS)


def test_zero_variance():
    d = decide(seeds(0.2, 0.2, 0.2), 0.05)
    assert (d.verdict, d.sd, d.t, d.p_value, d.resolvable) == (Verdict.HOLDS, 0.0, math.inf, 0.0, 0.0)
    same = decide(seeds(0.0, 0.0, 0.0), 0.05)  # identical arms: no effect, and the CI [0, 0] says so
    assert (same.verdict, same.t, same.p_value) == (Verdict.DOES_NOT_HOLD, 0.0, 0.5)
    worse = decide(seeds(-0.2, -0.2, -0.2), 0.05)
    assert (worse.verdict, worse.t, worse.p_value) == (Verdict.DOES_NOT_HOLD, -math.inf, 1.0)


def test_diverged_seed_blocks_holds_but_not_does_not_hold():
    up = decide(seeds(0.2, NAN, 0.25, 0.3, 0.22), 0.05)  # the four finite seeds alone would hold
    assert up.verdict is Verdict.INCONCLUSIVE
    assert up.diverged == (11,) and up.n == 4
    assert math.isnan(up.differences[1])
    assert "diverged seed(s) 11" in up.reason
    down = decide(seeds(-0.2, math.inf, -0.25, -0.3), 0.05)
    assert down.verdict is Verdict.DOES_NOT_HOLD and down.diverged == (11,)
    few = decide(seeds(0.2, NAN, 0.3), 0.05)
    assert few.verdict is Verdict.INCONCLUSIVE and "only 2 finite" in few.reason


def test_a_nan_in_either_arm_marks_the_seed_diverged():
    d = paired_differences(seeds(0.8, 0.7, NAN, 0.9), seeds(0.5, NAN, 0.4, 0.6), higher_is_better=True)
    assert [math.isnan(v) for v in d.values()] == [False, True, True, False]


def test_too_few_seeds_and_bad_delta_are_errors():
    with pytest.raises(DecisionError, match=f"at least {MIN_SEEDS}"):
        decide(seeds(0.1, 0.2), 0.05)
    for delta in (0.0, -0.1, NAN, math.inf):
        with pytest.raises(DecisionError, match="delta"):
            decide(seeds(0.1, 0.2, 0.3), delta)


def test_mismatched_seeds_name_the_missing_ones():
    with pytest.raises(SeedMismatchError) as err:
        paired_differences({10: 0.5, 11: 0.6, 12: 0.7}, {10: 0.4, 12: 0.5, 13: 0.6}, higher_is_better=True)
    message = str(err.value)
    assert "'better' lacks seed(s) 13" in message
    assert "'worse' lacks seed(s) 11" in message


def test_contrasts_interaction_and_threshold():
    values = {
        "a": seeds(0.9, 0.8, 0.85),
        "b": seeds(0.5, 0.5, 0.55),
        "c": seeds(0.6, 0.6, 0.6),
        "d": seeds(0.5, 0.55, 0.5),
    }
    # (a - b) - (c - d) = 0.4 - 0.1, 0.3 - 0.05, 0.3 - 0.1
    inter = contrast_differences(values, (("a", 1), ("b", -1), ("c", -1), ("d", 1)), higher_is_better=True)
    assert inter == pytest.approx(seeds(0.3, 0.25, 0.2))
    # "loss below 1": d = 1 - loss for a lower-is-better metric
    loss = {"s": seeds(0.4, 0.5, 1.2)}
    below = contrast_differences(loss, (("s", 1),), higher_is_better=False, constant=1.0)
    assert below == pytest.approx(seeds(0.6, 0.5, -0.2))
    with pytest.raises(DecisionError, match="no values for arm"):
        contrast_differences(loss, (("s", 1), ("t", -1)), higher_is_better=True)


def test_combine():
    H, N, I = Verdict.HOLDS, Verdict.DOES_NOT_HOLD, Verdict.INCONCLUSIVE
    assert combine([H, H]) is H
    assert combine([H, I]) is I
    assert combine([H, N, I]) is N
    with pytest.raises(DecisionError):
        combine([])


def test_rule_constants():
    # the CI level is tied to alpha: "CI inside +-delta" is the two one-sided tests at ALPHA
    assert math.isclose(CI_LEVEL, 1.0 - 2.0 * ALPHA)
    assert MIN_SEEDS == 3
