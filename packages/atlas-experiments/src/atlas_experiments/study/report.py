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
from atlas_experiments.study.claims import Registry
from atlas_experiments.study.decision import DecisionError, judge_claim
from atlas_experiments.study.plan import planned_claims, progress
from atlas_experiments.study.results import arm_values
from atlas_experiments.study.stability import claim_stability


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
