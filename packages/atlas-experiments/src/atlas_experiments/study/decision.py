"""The claims study's decision rule: one verdict per pre-registered comparison, from runs paired by seed.

For one comparison the arms are run on the same seeds (same data, same initialisation seed, same batch order),
and each seed gives a difference d_s signed so that d_s > 0 is the direction the claim predicts. With n paired
seeds, mean m, sample standard deviation sd, standard error se = sd / sqrt(n) and t = m / se:

    holds            every d_s > 0, m >= delta, and the one-sided paired t-test gives p = P(T_{n-1} > t) < 0.05
    does not hold    (every d_s < 0 and m <= -delta), or the 90 % two-sided CI m +- t_{0.95, n-1} se lies inside
                     (-delta, +delta)  (an effect smaller than delta either way: the two one-sided tests at 0.05)
    inconclusive     anything else: the seeds can neither support the claim nor rule out an effect of delta

`resolvable` = t_{0.95, n-1} se is the smallest mean that could reach p < 0.05 with this seed spread (and the CI's
half-width): a reader sees at once whether the seeds could have resolved an effect of size delta.

Edge cases, decided before any result:
- fewer than `MIN_SEEDS` paired seeds: `DecisionError` (the design needs at least three; this is a caller error,
  not a verdict);
- arms with different seeds: `SeedMismatchError`, naming each arm's missing seeds;
- a non-finite value (a diverged run, NaN or inf, in either arm) makes that seed *diverged*: it is reported,
  left out of the statistics, and the verdict cannot be *holds* ("every d_s > 0" is not met by a seed that could
  not be scored); *does not hold* can still follow from the finite seeds. Fewer than `MIN_SEEDS` finite seeds:
  *inconclusive*;
- zero spread (every d_s equal): t is +inf (p = 0) for a positive mean, -inf (p = 1) for a negative one and
  0 (p = 0.5) for a zero mean; the CI collapses to the mean, so equal arms (every d_s = 0) do not hold.

A claim made of several comparisons (an ordering, several pairs) holds when every comparison holds and does not
hold when any comparison does not hold; otherwise it is inconclusive (`combine`). Requiring every part at 0.05 is a
valid 0.05-level test of the whole claim (intersection-union), so no multiplicity correction is applied.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

from atlas_experiments.study import student_t

ALPHA = 0.05
CI_LEVEL = 0.90  # two-sided, = 1 - 2 ALPHA: "CI inside +-delta" is then the two one-sided tests at ALPHA
MIN_SEEDS = 3


class Verdict(StrEnum):
    HOLDS = "holds"
    DOES_NOT_HOLD = "does not hold"
    INCONCLUSIVE = "inconclusive"
    NOT_RESOLVED = "not resolved (floor)"  # rule v2 only: a registered learning gate was not met


class DecisionError(ValueError):
    """The rule cannot be applied to these numbers (too few seeds, a bad delta, unpaired arms)."""


class SeedMismatchError(DecisionError):
    """The arms of a comparison were not run on the same seeds; the message names each arm's missing seeds."""


@dataclass(frozen=True)
class Decision:
    """The verdict of one comparison and every number it rests on (d_s signed: positive = as predicted).

    `differences` lists d_s in the order of `seeds` (NaN for a diverged seed); `n`, `mean`, `sd`, `ci`, `t`,
    `p_value` and `resolvable` are over the finite seeds only (NaN when fewer than two are finite).
    """

    verdict: Verdict
    reason: str
    delta: float
    seeds: tuple[int, ...]
    differences: tuple[float, ...]
    diverged: tuple[int, ...]
    n: int
    mean: float
    sd: float
    ci: tuple[float, float]
    t: float
    p_value: float
    resolvable: float

    def to_dict(self) -> dict[str, Any]:
        return as_record(self)


def decide(differences: Mapping[int, float], delta: float) -> Decision:
    """Apply the rule (module docstring) to per-seed signed differences {seed: d_s} with minimum effect `delta`."""
    if not (isinstance(delta, int | float) and math.isfinite(delta) and delta > 0):
        raise DecisionError(f"delta: expected a positive finite number, got {delta!r}")
    if len(differences) < MIN_SEEDS:
        raise DecisionError(
            f"{len(differences)} paired seed(s) {sorted(differences)}; the rule needs at least {MIN_SEEDS}"
        )
    seeds = tuple(sorted(differences))
    values = tuple(float(differences[s]) for s in seeds)
    diverged = tuple(s for s, d in zip(seeds, values) if not math.isfinite(d))
    finite = [d for d in values if math.isfinite(d)]
    n = len(finite)
    mean, sd, ci, t, p, resolvable = _statistics(finite)

    def result(verdict: Verdict, reason: str) -> Decision:
        return Decision(verdict, reason, float(delta), seeds, values, diverged, n, mean, sd, ci, t, p, resolvable)

    note = f"; diverged seed(s) {', '.join(map(str, diverged))} left out" if diverged else ""
    if n < MIN_SEEDS:
        return result(Verdict.INCONCLUSIVE, f"only {n} finite seed(s) of {len(seeds)}{note}")
    if all(d > 0 for d in finite) and mean >= delta and p < ALPHA:
        if not diverged:
            return result(Verdict.HOLDS, f"every d_s > 0, mean {mean:.4g} >= delta {delta:g}, p = {p:.3g} < {ALPHA}")
        lost = ", ".join(map(str, diverged))
        return result(Verdict.INCONCLUSIVE, f"the finite seeds would hold, but diverged seed(s) {lost} are not d_s > 0")
    if all(d < 0 for d in finite) and mean <= -delta:
        return result(Verdict.DOES_NOT_HOLD, f"every d_s < 0 and mean {mean:.4g} <= -delta {-delta:g}{note}")
    if -delta < ci[0] and ci[1] < delta:
        return result(
            Verdict.DOES_NOT_HOLD,
            f"{CI_LEVEL:.0%} CI [{ci[0]:.4g}, {ci[1]:.4g}] lies inside (-{delta:g}, +{delta:g}){note}",
        )
    return result(Verdict.INCONCLUSIVE, _why_inconclusive(finite, mean, p, delta, resolvable) + note)


def _statistics(finite: Sequence[float]) -> tuple[float, float, tuple[float, float], float, float, float]:
    """mean, sd, CI, t, one-sided p and resolvable effect of the finite differences (NaN below two values)."""
    n = len(finite)
    nan = math.nan
    if n < 2:
        return (finite[0] if n else nan), nan, (nan, nan), nan, nan, nan
    if min(finite) == max(finite):  # exactly zero spread (rounding in the mean would leave sd ~ 1e-17)
        mean, sd = float(finite[0]), 0.0
    else:
        mean = math.fsum(finite) / n
        sd = math.sqrt(math.fsum((d - mean) ** 2 for d in finite) / (n - 1))
    se = sd / math.sqrt(n)
    quantile = student_t.ppf(1.0 - (1.0 - CI_LEVEL) / 2.0, n - 1)
    half = quantile * se
    if se > 0:
        t = mean / se
    else:
        t = math.copysign(math.inf, mean) if mean != 0 else 0.0
    p = student_t.sf(t, n - 1)
    return mean, sd, (mean - half, mean + half), t, p, half


def _why_inconclusive(finite: Sequence[float], mean: float, p: float, delta: float, resolvable: float) -> str:
    if not all(d > 0 for d in finite):
        if any(d > 0 for d in finite) and any(d < 0 for d in finite):
            reason = "mixed signs across seeds"
        elif all(d < 0 for d in finite):
            reason = f"every d_s < 0 but mean {mean:.4g} > -delta {-delta:g}"
        else:
            reason = "some d_s = 0"
    elif mean < delta:
        reason = f"every d_s > 0 but mean {mean:.4g} < delta {delta:g}"
    else:
        reason = f"every d_s > 0, mean {mean:.4g} >= delta, but p = {p:.3g} >= {ALPHA}"
    return f"{reason}; CI not inside +-delta (seeds resolve effects >= {resolvable:.3g})"


# --------------------------------------------------------------------------------------------- from arm values


def contrast_differences(
    values: Mapping[str, Mapping[int, float]],
    terms: Iterable[tuple[str, float]],
    *,
    higher_is_better: bool,
    constant: float = 0.0,
) -> dict[int, float]:
    """Per-seed d_s of the contrast sum_i w_i m_i - constant over arms' metric values {arm: {seed: value}},
    signed so that d_s > 0 is "the contrast is better": +(...) for a higher-is-better metric, -(...) otherwise.

    A pair "a beats b" is the terms ((a, +1), (b, -1)); "a is better than the value v" is ((a, +1),) with
    constant v. Every arm of the contrast must have the same seeds (`SeedMismatchError` names what is missing).
    """
    terms = tuple(terms)
    missing_arms = [arm for arm, _ in terms if arm not in values]
    if missing_arms:
        raise DecisionError(f"no values for arm(s) {', '.join(missing_arms)}")
    seed_sets = {arm: set(values[arm]) for arm, _ in terms}
    every = set().union(*seed_sets.values())
    gaps = [
        f"{arm!r} lacks seed(s) {', '.join(map(str, sorted(every - seeds)))}"
        for arm, seeds in seed_sets.items()
        if every - seeds
    ]
    if gaps:
        raise SeedMismatchError("arms are not paired by seed: " + "; ".join(gaps))
    sign = 1.0 if higher_is_better else -1.0
    return {
        seed: sign * (math.fsum(weight * float(values[arm][seed]) for arm, weight in terms) - constant)
        for seed in sorted(every)
    }


def paired_differences(
    better: Mapping[int, float], worse: Mapping[int, float], *, higher_is_better: bool
) -> dict[int, float]:
    """d_s for "`better` beats `worse`" from two arms' {seed: metric value}."""
    return contrast_differences(
        {"better": better, "worse": worse}, (("better", 1.0), ("worse", -1.0)), higher_is_better=higher_is_better
    )


def combine(verdicts: Iterable[Verdict]) -> Verdict:
    """A claim of several comparisons: holds if all hold, does not hold if any does not, else inconclusive."""
    verdicts = list(verdicts)
    if not verdicts:
        raise DecisionError("combine: no comparison to combine")
    if all(v is Verdict.HOLDS for v in verdicts):
        return Verdict.HOLDS
    if any(v is Verdict.DOES_NOT_HOLD for v in verdicts):
        return Verdict.DOES_NOT_HOLD
    return Verdict.INCONCLUSIVE


@dataclass(frozen=True)
class ClaimDecision:
    """The verdict of a whole claim and the decision of each of its comparisons (label -> Decision)."""

    claim_id: str
    verdict: Verdict
    comparisons: tuple[tuple[str, Decision], ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "claim": self.claim_id,
            "verdict": str(self.verdict),
            "comparisons": {label: d.to_dict() for label, d in self.comparisons},
        }


def check_registered_seeds(claim: Any, values: Mapping[str, Mapping[int, float]], seeds: Iterable[int]) -> None:
    """`SeedMismatchError` when an arm of the claim lacks a registered seed or has an unregistered one."""
    want = set(seeds)
    for arm in dict.fromkeys(name for c in claim.comparisons for name, _ in c.terms):
        have = set(values.get(arm, {}))
        if have != want:
            lacks, extra = sorted(want - have), sorted(have - want)
            raise SeedMismatchError(
                f"{claim.id}: arm {arm!r} lacks registered seed(s) {lacks} and has unregistered seed(s) {extra}"
            )


def as_record(obj: Any) -> dict[str, Any]:
    """A comparison dataclass as plain JSON-ready data (verdict as its words, tuples as lists)."""
    out = asdict(obj)
    out["verdict"] = str(obj.verdict)
    return {k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}


def judge_claim(
    claim: Any, values: Mapping[str, Mapping[int, float]], seeds: Iterable[int] | None = None
) -> ClaimDecision:
    """Apply the rule to every comparison of a loaded claim (`claims.Claim`) given its arms' metric values
    {arm name: {seed: value}}; errors name the claim. `seeds` (the protocol's pre-registered seeds) makes a missing
    or an extra seed an error instead of a smaller or larger sample."""
    if not claim.testable:
        raise DecisionError(f"{claim.id}: registered as not testable ({claim.why})")
    if seeds is not None:
        check_registered_seeds(claim, values, seeds)
    higher = claim.metric.better == "higher"
    decided = []
    for comparison in claim.comparisons:
        try:
            d = contrast_differences(values, comparison.terms, higher_is_better=higher, constant=comparison.constant)
            decided.append((comparison.label, decide(d, claim.delta)))
        except DecisionError as exc:
            raise type(exc)(f"{claim.id} [{comparison.label}]: {exc}") from exc
    return ClaimDecision(claim.id, combine(v.verdict for _, v in decided), tuple(decided))
