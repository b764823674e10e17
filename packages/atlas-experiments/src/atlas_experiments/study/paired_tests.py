"""One-sided paired tests of a mean difference, for rule v2 of the claims study (docs/study.md, "Rule v2").

Given per-seed differences d_1..d_n (positive = the direction a claim predicts) and a value mu, two one-sided tests:

    greater(d, mu)   H0: E[d] <= mu  against  H1: E[d] > mu   (mu = 0: "the predicted direction is established")
    less(d, mu)      H0: E[d] >= mu  against  H1: E[d] < mu   (mu = delta: "the paper's minimum effect is excluded")

For n <= EXACT_MAX_N the p-value is the exact sign-flip (permutation) p of the sum of x_i = d_i - mu: under H0 with
a distribution symmetric about mu, every sign vector is equally likely, so

    p_greater = #{sign vectors e : sum e_i |x_i| >= sum x_i} / 2^n.

Flipping the signs of a subset A of the x_i changes the sum by -2 sum_A x_i, so that count is the number of subsets
A with sum_A x_i <= 0 (the empty set included), and p_less counts the subsets with sum_A x_i >= 0. Every subset sum
is a decreasing function of mu, so both p-values are monotone in mu and the test inverts into a confidence bound in
closed form: with j = ceil(alpha 2^n) - 2, the one-sided (1 - alpha) upper bound of E[d] is the (j + 1)-th largest
of the 2^n - 1 non-empty subset means, the lower bound the (j + 1)-th smallest; for j < 0 (n <= 4 at alpha 0.05:
even 1 / 2^n is not below alpha) the bounds are infinite. The smallest attainable p is 2^-n: 0.125 at n = 3,
0.031 at n = 5, 0.0078 at n = 7.

For n > EXACT_MAX_N the paired t-test: p from Student's t with n - 1 degrees of freedom, bounds mean -+ t_{1-alpha}
se. Subset sums within TIE_RTOL x sum |x_i| of zero are ties and count on both sides (the conservative choice), so
a difference that rounding alone makes non-zero cannot decide a test.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from atlas_experiments.study import student_t

EXACT_MAX_N = 12
TIE_RTOL = 1e-12


@lru_cache(maxsize=EXACT_MAX_N + 1)
def _subsets(n: int) -> np.ndarray:
    """[2^n, n] 0/1 matrix of every subset of n items (row 0: the empty set)."""
    rows = np.arange(1 << n, dtype=np.int64)[:, None]
    return ((rows >> np.arange(n, dtype=np.int64)) & 1).astype(np.float64)


def _subset_sums(x: np.ndarray) -> tuple[np.ndarray, float]:
    """Sums of x over every subset ([..., 2^n]) and the tie tolerance per row."""
    sums = x @ _subsets(x.shape[-1]).T
    tol = TIE_RTOL * np.abs(x).sum(axis=-1, keepdims=True)
    return sums, tol


def sign_flip_p(d: np.ndarray, mu: float, alternative: str) -> np.ndarray:
    """Exact sign-flip p of H1 "mean > mu" (`greater`) or "mean < mu" (`less`) for each row of d ([..., n])."""
    x = np.asarray(d, dtype=np.float64) - mu
    sums, tol = _subset_sums(x)
    hits = sums <= tol if alternative == "greater" else sums >= -tol
    return hits.mean(axis=-1)


def sign_flip_bounds(d: Sequence[float], alpha: float) -> tuple[float, float]:
    """(lower, upper) one-sided (1 - alpha) bounds of the mean that invert the exact sign-flip tests."""
    x = np.asarray(d, dtype=np.float64)
    n = x.size
    j = math.ceil(alpha * (1 << n)) - 2
    if j < 0:
        return -math.inf, math.inf
    subsets = _subsets(n)[1:]
    means = np.sort((subsets @ x) / subsets.sum(axis=1))
    return float(means[j]), float(means[-1 - j])


@dataclass(frozen=True)
class OneSided:
    """The two one-sided tests of one comparison and the bounds that invert them."""

    test: str  # "exact sign-flip" | "t"
    p_greater: float  # H1: mean > 0
    p_less: float  # H1: mean < delta
    lower: float  # one-sided (1 - alpha) lower bound of the mean
    upper: float  # one-sided (1 - alpha) upper bound of the mean


def one_sided(d: Sequence[float], delta: float, alpha: float) -> OneSided:
    """Both tests of rule v2 on finite differences `d` (at least two): direction (> 0) and effect below delta."""
    n = len(d)
    if n < 2:
        raise ValueError(f"one_sided: need at least two differences, got {n}")
    if n <= EXACT_MAX_N:
        row = np.asarray(d, dtype=np.float64)
        lower, upper = sign_flip_bounds(row, alpha)
        return OneSided(
            "exact sign-flip",
            float(sign_flip_p(row, 0.0, "greater")),
            float(sign_flip_p(row, delta, "less")),
            lower,
            upper,
        )
    mean = math.fsum(d) / n
    sd = 0.0 if min(d) == max(d) else math.sqrt(math.fsum((v - mean) ** 2 for v in d) / (n - 1))
    se = sd / math.sqrt(n)
    half = student_t.ppf(1.0 - alpha, n - 1) * se
    return OneSided(
        "t",
        student_t.sf(_t(mean, se), n - 1),
        student_t.cdf(_t(mean - delta, se), n - 1),
        mean - half,
        mean + half,
    )


def _t(x: float, se: float) -> float:
    if se > 0:
        return x / se
    return math.copysign(math.inf, x) if x != 0 else 0.0


def holm(p_values: Sequence[float], alpha: float) -> list[bool]:
    """Holm's step-down rejections at family-wise level alpha: the i-th smallest p is compared with
    alpha / (K - i + 1), and testing stops at the first that fails."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    rejected = [False] * len(p_values)
    for rank, i in enumerate(order):
        if not p_values[i] < alpha / (len(p_values) - rank):
            break
        rejected[i] = True
    return rejected
