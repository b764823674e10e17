"""The study's verdicts: every registered claim, judged by the pre-registered rule on the runs that exist.

Claims whose protocol ran get a verdict with every number it rests on (per-seed arm values, signed differences,
mean, seed sd, CI, p, the effect the seeds can resolve); claims whose protocol belongs to another scale say where
they can be tested, and claims no scale can test say why. Nothing is judged on an incomplete set of seeds: a claim
with a missing run is reported as "not run" with the missing jobs.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from atlas_experiments.provenance import commit_label, machine_label
from atlas_experiments.reporting.markdown import fmt, table
from atlas_experiments.study.claims import Claim, Registry
from atlas_experiments.study.decision import DecisionError, judge_claim
from atlas_experiments.study.plan import planned_claims, progress
from atlas_experiments.study.results import arm_values
from atlas_experiments.study.stability import claim_stability, label

FIGURE = "verdicts.png"


def judge_all(registry: Registry, root: str | Path, scales: Iterable[str]) -> list[dict[str, Any]]:
    """One record per claim: verdict (holds | does not hold | inconclusive | not run | other scale | not
    testable), the decision's numbers and the arm values it used."""
    planned = {c.id for c in planned_claims(registry, scales)}
    out = []
    for claim in registry.claims:
        record: dict[str, Any] = {"claim": claim.id, "statement": claim.statement, "paper": claim.paper_value,
                                  "source": claim.source, "scale": claim.scale, "delta": claim.delta,
                                  "delta_unit": claim.delta_unit, "evidence": claim.evidence}  # fmt: skip
        if not claim.testable:
            out.append({**record, "verdict": "not testable", "why": claim.why})
            continue
        if claim.id not in planned:
            out.append({**record, "verdict": "other scale", "why": f"protocol {claim.protocol} runs at {claim.scale}"})
            continue
        values, missing = arm_values(claim, registry, root)
        if missing:
            out.append({**record, "verdict": "not run", "why": progress(claim, registry, missing), "values": values})
            continue
        try:
            decision = judge_claim(claim, values, registry.protocol_of(claim).seeds)
        except DecisionError as exc:
            out.append({**record, "verdict": "not run", "why": str(exc), "values": values})
            continue
        judged = {**record, **decision.to_dict(), "values": values}
        out.append({**judged, "stability": claim_stability(judged)})
    return out


def _claim_section(record: dict[str, Any], claim: Claim) -> str:
    lines = [f"### `{record['claim']}`: **{record['verdict']}**\n", f"{record['statement']} Paper: {record['source']}, "
             f"{record['paper']}. Minimum effect: {fmt(record['delta'])} ({record['delta_unit']}); evidence: "
             f"{record['evidence']}.\n"]  # fmt: skip
    if "comparisons" not in record:
        lines.append(f"{record.get('why', '')}\n")
        return "\n".join(lines)
    seeds = sorted({s for v in record["values"].values() for s in v})
    lines.append(table(["arm", *[f"seed {s}" for s in seeds]],
                       [[arm, *[v.get(s) for s in seeds]] for arm, v in record["values"].items()]))  # fmt: skip
    rows = []
    firmness = (record.get("stability") or {}).get("comparisons", {})
    for name, d in record["comparisons"].items():
        ci = f"[{fmt(d['ci'][0], 3)}, {fmt(d['ci'][1], 3)}]"
        diffs = ", ".join(fmt(x, 3) for x in d["differences"])
        rows.append([name, d["verdict"], diffs, d["mean"], d["sd"], ci, d["p_value"], d["resolvable"],
                     firmness.get(name, ""), d["reason"]])  # fmt: skip
    header = ["comparison", "verdict", "d_s (per seed)", "mean", "seed sd", "90% CI", "p", "resolvable",
              "one more seed", "why"]  # fmt: skip
    lines.append(table(header, rows))
    return "\n".join(lines)


def _arm_summary(record: dict[str, Any]) -> str:
    """Each arm's mean +- seed sd over its seeds, for the summary row of a judged claim."""
    if "comparisons" not in record:
        return ""
    parts = []
    for arm, by_seed in record["values"].items():
        xs = [v for v in by_seed.values() if v is not None and math.isfinite(v)]
        if not xs:
            parts.append(f"{arm} -")
            continue
        mean = sum(xs) / len(xs)
        sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
        parts.append(f"{arm} {fmt(mean, 3)} ± {fmt(sd, 2)}")
    return "; ".join(parts)


def _differences(record: dict[str, Any]) -> str:
    """Per-seed signed differences of each comparison (positive: as predicted)."""
    comparisons = record.get("comparisons") or {}
    many = len(comparisons) > 1
    return "; ".join((f"{name}: " if many else "") + ", ".join(fmt(x, 3) for x in d["differences"])
                     for name, d in comparisons.items())  # fmt: skip


def render(
    records: list[dict[str, Any]],
    registry: Registry,
    scales: Iterable[str],
    coverage: str = "",
    provenance: str = "",
) -> str:
    """verdicts.md; `coverage` says which of the planned jobs had results (a partial run is labelled as such),
    `provenance` when, from which commit and on which machine the results were made."""
    counts: dict[str, int] = {}
    for r in records:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    summary = [[r["claim"], r["verdict"], label(r.get("stability")), _arm_summary(r), _differences(r), r["scale"],
                r.get("why", "") if "comparisons" not in r else ""] for r in records]  # fmt: skip
    out = [
        "# The claims study: verdicts\n",
        f"Claims registered {registry.registered} (`config/study/claims.yaml`, {len(registry.amendments)} "
        f"amendment(s)); scales run here: {', '.join(sorted(scales))}. The rule (docs/study.md): arms paired by seed; "
        "holds = every d_s > 0, mean >= delta and one-sided paired t p < 0.05; does not hold = every d_s < 0 with "
        "mean <= -delta, or the 90% CI inside +-delta; otherwise inconclusive. `resolvable` is the smallest mean the "
        "seeds could have shown at p < 0.05.\n",
        *([provenance + "\n"] if provenance else []),
        *([coverage + "\n"] if coverage else []),
        "Counts: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + "\n",
        "`one more seed` (a reading aid, not part of the rule; `study/stability.py`): the verdict again with one "
        "hypothetical extra seed two seed-sds below and above the mean difference. *stable*: neither moves it; "
        "*fragile*: the verdict it would move to.\n",
        table(
            ["claim", "verdict", "one more seed", "arms: mean ± seed sd", "d_s per seed", "scale", "note"], summary
        ),  # fmt: skip
        *(
            [f"![per-seed differences of every judged claim]({FIGURE})\n"]
            if any("comparisons" in r for r in records)
            else []
        ),  # fmt: skip
        "## Claims judged here\n",
    ]
    for record in records:
        if "comparisons" in record or record["verdict"] == "not run":
            out.append(_claim_section(record, registry.claim(record["claim"])))
    return "\n".join(out)


def write_report(records: list[dict[str, Any]], text: str, out_dir: str | Path, data: Any = None) -> Path:
    """verdicts.json (`data`, else `records`) and verdicts.md, each written atomically. The figures are drawn by the
    caller (`report_v2.figure_groups`)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    record = json.dumps(_finite(records if data is None else data), indent=2)
    for name, body in (("verdicts.json", record), ("verdicts.md", text)):
        tmp = out_dir / f".{name}.tmp"
        tmp.write_text(body)
        tmp.replace(out_dir / name)
    return out_dir / "verdicts.md"


def _finite(obj: Any) -> Any:
    """JSON has no NaN / inf: written as null."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {str(k): _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj


def provenance(root: str | Path, jobs: Iterable[Any], report_dir: str | Path | None = None) -> str:
    """One line for the report: report date, commit (changes under `report_dir` do not count), machine, and the
    span of the jobs' result timestamps."""
    created = []
    for job in jobs:
        stamp = json.loads(job.result(root).read_text()).get("created")
        if stamp:
            created.append(stamp)
    span = f"results created {min(created)} to {max(created)} ({len(created)} jobs)" if created else "no results"
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"Report written {now} at commit {commit_label(report_dir)} on a {machine_label()}; {span}."
