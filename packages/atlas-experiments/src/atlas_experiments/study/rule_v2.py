"""Rule v2 of the claims study (registered 2026-12-03; docs/study.md, "Rule v2"): verdicts the data can support.

Per comparison, d_s is signed so that d_s > 0 is the predicted direction (as in rule v1, `decision.py`). Two
one-sided tests (`paired_tests.one_sided`: exact sign-flip for n <= 12, paired t above):

    direction   H1: E[d] > 0        p_direction
    below       H1: E[d] < delta    p_below   (the paper's minimum effect excluded; covers "no effect" and "reversed")

Over the K comparisons of a claim, Holm's step-down correction at ALPHA is applied to each family separately:

    holds              every comparison's direction is established after Holm. When, besides, a comparison's effect
                       is established below delta (its below-test rejects after Holm), the verdict says so
                       ("holds, effect below delta"): the direction is real, the size is not the paper's.
    does not hold      not holds, and at least one comparison's below-test rejects after Holm.
    inconclusive       otherwise. No verdict from sign patterns alone, no "every seed agrees" condition.
    not resolved       a registered learning gate (`gates.py`) is not met: the arms did not learn the task well
      (floor)          enough for a comparison to say anything about the paper's mechanism. Counted apart.

Edge cases (never a crash): fewer than two finite seeds give inconclusive with NaN statistics; n = 2 cannot reach
p < 0.05 (the smallest exact p is 1/4) and so is inconclusive; zero spread is handled by the exact test (p = 2^-n
for a constant positive difference); a non-finite difference (a diverged run) makes its comparison inconclusive,
since a failed run cannot count for either verdict (its p-values are set to 1 in both Holm families).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from atlas_experiments.study.decision import (
    DecisionError,
    Verdict,
    as_record,
    check_registered_seeds,
    contrast_differences,
)
from atlas_experiments.study.paired_tests import holm, one_sided

ALPHA = 0.05
CI_LEVEL = 1.0 - 2.0 * ALPHA  # the two one-sided (1 - ALPHA) bounds make a 90 % interval
CORRECTION = "holm"
POWER_EFFECT = 2.0  # seeds are planned to detect POWER_EFFECT x delta ...
POWER_TARGET = 0.8  # ... with this probability ...
POWER_MIN_SEEDS = 5  # ... and never fewer than this many seeds
RULE = "v2"


@dataclass(frozen=True)
class Comparison2:
    """One comparison under rule v2: the statistics, both one-sided tests and the verdict after Holm."""

    label: str
    verdict: Verdict
    reason: str
    delta: float
    seeds: tuple[int, ...]
    differences: tuple[float, ...]
    diverged: tuple[int, ...]
    n: int
    mean: float
    sd: float
    test: str
    p_direction: float
    p_below: float
    ci: tuple[float, float]
    direction_holds: bool = False  # after Holm
    below_delta: bool = False  # after Holm

    def to_dict(self) -> dict[str, Any]:
        return as_record(self)


@dataclass(frozen=True)
class Claim2:
    """A claim's verdict under rule v2, its comparisons, and the gate's finding (None: no gate was applied)."""

    claim_id: str
    verdict: Verdict
    reason: str
    comparisons: tuple[Comparison2, ...]
    gate: Mapping[str, Any] | None = field(default=None)

    @property
    def effect_below_delta(self) -> bool:
        return self.verdict is Verdict.HOLDS and any(c.below_delta for c in self.comparisons)

    def label(self) -> str:
        return "holds, effect below delta" if self.effect_below_delta else str(self.verdict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "claim": self.claim_id,
            "rule": RULE,
            "verdict": str(self.verdict),
            "label": self.label(),
            "reason": self.reason,
            "comparisons": {c.label: c.to_dict() for c in self.comparisons},
            "gate": dict(self.gate) if self.gate is not None else None,
        }


def compare(label: str, differences: Mapping[int, float], delta: float) -> Comparison2:
    """Both one-sided tests of one comparison, before any correction (verdict: inconclusive until `combine`)."""
    if not (isinstance(delta, int | float) and math.isfinite(delta) and delta > 0):
        raise ValueError(f"delta: expected a positive finite number, got {delta!r}")
    seeds = tuple(sorted(differences))
    values = tuple(float(differences[s]) for s in seeds)
    diverged = tuple(s for s, d in zip(seeds, values) if not math.isfinite(d))
    finite = [d for d in values if math.isfinite(d)]
    n = len(finite)
    nan = math.nan
    mean = math.fsum(finite) / n if n else nan
    if n < 2:
        return Comparison2(label, Verdict.INCONCLUSIVE, f"only {n} finite seed(s)", float(delta), seeds, values,
                           diverged, n, mean, nan, "none", 1.0, 1.0, (nan, nan))  # fmt: skip
    sd = 0.0 if min(finite) == max(finite) else math.sqrt(math.fsum((d - mean) ** 2 for d in finite) / (n - 1))
    tests = one_sided(finite, float(delta), ALPHA)
    p_dir, p_below = (1.0, 1.0) if diverged else (tests.p_greater, tests.p_less)
    return Comparison2(label, Verdict.INCONCLUSIVE, "", float(delta), seeds, values, diverged, n, mean, sd,
                       tests.test, p_dir, p_below, (tests.lower, tests.upper))  # fmt: skip


def combine(claim_id: str, tested: Sequence[Comparison2], gate: Mapping[str, Any] | None = None) -> Claim2:
    """Holm across the claim's comparisons in both families, then the claim's verdict (module docstring)."""
    if not tested:
        raise ValueError(f"{claim_id}: no comparison to combine")
    direction = holm([c.p_direction for c in tested], ALPHA)
    below = holm([c.p_below for c in tested], ALPHA)
    comparisons = tuple(_settle(c, d, b, len(tested)) for c, d, b in zip(tested, direction, below))
    if gate is not None and not gate["passed"]:
        return Claim2(claim_id, Verdict.NOT_RESOLVED, f"learning gate not met: {gate['reason']}", comparisons, gate)
    if all(direction):
        reason = f"the direction of every comparison is established (Holm, K = {len(tested)})"
        if any(below):
            reason += "; an effect below delta is established too"
        return Claim2(claim_id, Verdict.HOLDS, reason, comparisons, gate)
    if any(below):
        names = ", ".join(c.label for c, b in zip(tested, below) if b)
        return Claim2(claim_id, Verdict.DOES_NOT_HOLD, f"effect below delta established for: {names}", comparisons,
                      gate)  # fmt: skip
    return Claim2(claim_id, Verdict.INCONCLUSIVE, _why_inconclusive(comparisons), comparisons, gate)


def _settle(c: Comparison2, direction: bool, below: bool, k: int) -> Comparison2:
    lo, hi = c.ci
    ci = f"90% CI [{lo:.3g}, {hi:.3g}]"
    if c.n < 2:
        return replace(c, reason=c.reason or "fewer than two finite seeds")
    if c.diverged:
        seeds = ", ".join(map(str, c.diverged))
        return replace(c, reason=f"diverged seed(s) {seeds}: a failed run counts for neither verdict; {ci}")
    if direction:
        tail = "; effect below delta established too" if below else ""
        verdict, reason = Verdict.HOLDS, f"p_direction {c.p_direction:.3g} passes Holm (K = {k}); {ci}{tail}"
    elif below:
        verdict, reason = Verdict.DOES_NOT_HOLD, f"p_below {c.p_below:.3g} passes Holm (K = {k}): {ci} upper < delta"
    else:
        floor = 2.0**-c.n if c.test == "exact sign-flip" else 0.0
        reason = f"neither test passes Holm (K = {k}); {ci}"
        if floor and floor >= ALPHA / k:
            reason += f"; at n = {c.n} the smallest exact p is {floor:.3g}, not below {ALPHA / k:.3g}"
        verdict = Verdict.INCONCLUSIVE
    return replace(c, verdict=verdict, reason=reason, direction_holds=direction, below_delta=below)


def _why_inconclusive(comparisons: Sequence[Comparison2]) -> str:
    parts = [f"{c.label}: {c.verdict}" for c in comparisons]
    floors = sorted({c.reason.split("; ")[-1] for c in comparisons if "smallest exact p" in c.reason})
    tail = f" ({'; '.join(floors)})" if floors else ""
    return "not every direction is established and no effect below delta is: " + "; ".join(parts) + tail


def judge(
    claim: Any,
    values: Mapping[str, Mapping[int, float]],
    seeds: Sequence[int] | None = None,
    gate: Mapping[str, Any] | None = None,
) -> Claim2:
    """Rule v2 on a loaded claim (`claims.Claim`) given {arm: {seed: metric value}}; `seeds` (the protocol's)
    makes a missing or extra seed a `SeedMismatchError` as in rule v1; `gate` is `gates.evaluate`'s finding."""
    if not claim.testable:
        raise DecisionError(f"{claim.id}: registered as not testable ({claim.why})")
    if seeds is not None:
        check_registered_seeds(claim, values, seeds)
    higher = claim.metric.better == "higher"
    tested = []
    for comparison in claim.comparisons:
        d = contrast_differences(values, comparison.terms, higher_is_better=higher, constant=comparison.constant)
        tested.append(compare(comparison.label, d, claim.delta))
    return combine(claim.id, tested, gate)


def smallest_exact_n(k: int, alpha: float = ALPHA) -> int:
    """The fewest seeds at which the exact test can pass Holm's strictest step (2^-n < alpha / k)."""
    n = 1
    while 2.0**-n >= alpha / k:
        n += 1
    return n
