"""How firm a verdict is: the verdict again with one more, hypothetical seed two seed-sds to either side of the mean.

The issue the study answers requires that rerunning with other seeds moves a verdict at most to its neighbour
(holds <-> inconclusive <-> does not hold). This check says, per comparison and per claim, whether one plausible
extra seed (mean +- 2 sd of the observed differences; about the 2.5 % tail of a normal spread either way) would
already move it. *stable*: neither extra seed changes the verdict. *fragile*: one of them does, and the record
names the verdict it would move to. It is a reading aid, computed with the registered rule itself
(`decision.decide`), not part of that rule: the pre-registered verdict is the one reported.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from atlas_experiments.study.decision import Verdict, combine, decide

SPREAD = 2.0  # the hypothetical seed sits SPREAD seed-sds from the mean


def perturbed(decision: Mapping[str, Any]) -> tuple[Verdict, Verdict] | None:
    """The verdicts of one comparison (a `Decision.to_dict()`) with an extra seed at mean - SPREAD sd and at
    mean + SPREAD sd; None when fewer than two finite seeds leave no spread to speak of."""
    finite = {s: d for s, d in zip(decision["seeds"], decision["differences"]) if d is not None and math.isfinite(d)}
    mean, sd = decision["mean"], decision["sd"]
    if len(finite) < 2 or mean is None or sd is None or not (math.isfinite(mean) and math.isfinite(sd)):
        return None
    extra = max(decision["seeds"]) + 1
    low = decide({**finite, extra: mean - SPREAD * sd}, decision["delta"]).verdict
    high = decide({**finite, extra: mean + SPREAD * sd}, decision["delta"]).verdict
    return low, high


def claim_stability(record: Mapping[str, Any]) -> dict[str, Any] | None:
    """{"stable": bool, "moves_to": [verdicts], "comparisons": {label: "stable" | "fragile: -> ..."}} for a judged
    claim record (`report.judge_all`); the claim's verdict under each extra seed is the rule's `combine` of its
    comparisons' verdicts under that seed. None for a claim without a verdict."""
    comparisons = record.get("comparisons")
    if not comparisons:
        return None
    per: dict[str, str] = {}
    lows, highs = [], []
    for label, decision in comparisons.items():
        pair = perturbed(decision)
        if pair is None:
            per[label] = "n/a (no spread)"
            lows.append(Verdict(decision["verdict"]))
            highs.append(Verdict(decision["verdict"]))
            continue
        lows.append(pair[0])
        highs.append(pair[1])
        moved = sorted({str(v) for v in pair if str(v) != decision["verdict"]})
        per[label] = "stable" if not moved else "fragile: -> " + " / ".join(moved)
    verdict = record["verdict"]
    moves = sorted({str(v) for v in (combine(lows), combine(highs)) if str(v) != verdict})
    return {"stable": not moves, "moves_to": moves, "comparisons": per}
