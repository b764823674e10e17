"""Seeds from power (rule v2, docs/study.md): how many paired seeds a claim needs so that rule v2 says "holds" with
probability >= POWER_TARGET when every comparison's true effect is POWER_EFFECT x delta.

The probability is estimated by simulating the rule itself: per-seed differences ~ Normal(effect, sd) for each of
the claim's K comparisons (independent), the exact sign-flip or t p-values of `paired_tests`, and Holm's all-pass
condition across K. `sd` comes from a pilot (for instance an earlier run's seed sd of the differences): pilot data
choose the number of seeds and never judge a claim. The simulation is seeded, so the plan is reproducible.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from atlas_experiments.study import student_t
from atlas_experiments.study.paired_tests import EXACT_MAX_N, sign_flip_p
from atlas_experiments.study.rule_v2 import ALPHA, POWER_EFFECT, POWER_MIN_SEEDS, POWER_TARGET, smallest_exact_n

SIMULATIONS = 4000
MAX_SEEDS = 40


@dataclass(frozen=True)
class SeedPlan:
    """The planned seed count of one claim and the power it reaches (NaN: no pilot sd, the minimum applies)."""

    n: int
    power: float
    sd: float
    delta: float
    comparisons: int
    note: str


def holds_probability(n: int, effect: float, sd: float, k: int, *, simulations: int = SIMULATIONS,
                      seed: int = 0) -> float:  # fmt: skip
    """P(rule v2 finds every one of k comparisons' direction after Holm) with n seeds, differences ~ N(effect, sd)."""
    if sd == 0.0:
        return 1.0 if effect > 0 and 2.0**-n < ALPHA / k else 0.0
    rng = np.random.default_rng(seed)
    d = rng.normal(effect, sd, size=(k, simulations, n))
    levels = ALPHA / (k - np.arange(k))  # Holm: the i-th smallest p is compared with alpha / (k - i)
    if n <= EXACT_MAX_N:
        p = np.stack([sign_flip_p(d[i], 0.0, "greater") for i in range(k)], axis=1)  # [S, k]
        return float(np.mean(np.all(np.sort(p, axis=1) < levels, axis=1)))
    mean = d.mean(axis=-1)
    se = d.std(axis=-1, ddof=1) / math.sqrt(n)
    t = np.sort((mean / se).T, axis=1)[:, ::-1]  # [S, k], largest t (smallest p) first
    critical = np.array([student_t.ppf(1.0 - level, n - 1) for level in levels])
    return float(np.mean(np.all(t > critical, axis=1)))


def seeds_for_power(sd: float, delta: float, k: int) -> SeedPlan:
    """The fewest seeds (>= POWER_MIN_SEEDS, and enough for the exact test to pass Holm's strictest step) at which
    rule v2 holds with probability >= POWER_TARGET at an effect of POWER_EFFECT x delta; MAX_SEEDS caps the search."""
    start = max(POWER_MIN_SEEDS, smallest_exact_n(k))
    effect = POWER_EFFECT * delta
    if not math.isfinite(sd):
        return SeedPlan(start, math.nan, sd, delta, k, "no pilot sd: the minimum for this claim")
    power = math.nan
    for n in range(start, MAX_SEEDS + 1):
        power = holds_probability(n, effect, sd, k)
        if power >= POWER_TARGET:
            return SeedPlan(n, power, sd, delta, k, "")
    return SeedPlan(MAX_SEEDS, power, sd, delta, k, f"power {power:.2f} < {POWER_TARGET} even at {MAX_SEEDS} seeds")
