"""Rule v2 verdicts with their learning gates and, for MQAR and MAD claims, every arm's memory floats.

Values come either from the results of the jobs (`from_results`) or from an earlier report's record
(`from_record`: the v1 verdicts.json keeps each judged claim's per-seed arm values), so the v1 data can be judged
again under rule v2 in a table labelled as what it is: a re-reading of seen data, not new evidence.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

from atlas_experiments.reporting.markdown import fmt, table
from atlas_experiments.study import gates, rule_v2
from atlas_experiments.study.claims import Claim, Protocol, Registry
from atlas_experiments.study.decision import DecisionError
from atlas_experiments.study.plan import planned_claims, progress
from atlas_experiments.study.results import arm_values

# tasks whose arms are sequence models with a memory of a countable size (learnability arms are cells of one stream)
_MEMORY_TASKS = ("mqar", "mad")


def record_values(record: Mapping[str, Any]) -> dict[str, dict[int, float]]:
    """{arm: {seed: value}} of one claim of a verdicts.json (JSON keys are strings; null is a diverged run)."""
    return {arm: {int(s): (math.nan if v is None else float(v)) for s, v in by_seed.items()}
            for arm, by_seed in record["values"].items()}  # fmt: skip


class Baselines:
    """The gates' baselines per protocol, computed once each from the protocol's own data."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry

    @cache  # noqa: B019 (one instance per report)
    def mqar(self, protocol: str) -> dict[str, float]:
        p = self.registry.protocols[protocol]
        return gates.mqar_copy_baselines(p.args, p.seeds)

    @cache  # noqa: B019
    def learnability(self, protocol: str, metric: str) -> dict[str, float]:
        p = self.registry.protocols[protocol]
        return gates.learnability_mean_baselines(p.args, p.seeds, metric)

    @cache  # noqa: B019
    def mad(self, protocol: str) -> dict[str, float]:
        p = self.registry.protocols[protocol]
        return gates.mad_majority_baselines(p.args, p.seeds)

    @cache  # noqa: B019
    def memory(self, protocol: str, arm: str, cell: str | None = None) -> dict[int, int]:
        """{T: memory floats} of an arm as its jobs build it (for MAD, at the claim's task `cell`)."""
        from atlas_experiments.evaluation.synthetic_models import ModelChoice

        p = self.registry.protocols[protocol]
        spec = self.registry.arms[arm]
        choice = ModelChoice(arm, spec.preset, p.size or "tiny", spec.config_overrides())
        if p.task == "mad":
            from atlas_experiments.evaluation import mad

            return mad.memory_floats(choice, gates.mad_protocol(p.args), cell)
        from atlas_experiments.evaluation.mqar import memory_floats

        mqar = gates.mqar_protocol(p.args)
        return memory_floats(choice, mqar, mqar.widths[0])


def _gate_finding(claim: Claim, protocol: Protocol, values, baselines: Baselines, extra: Mapping[str, Any]):
    gate = protocol.gate
    if gate is None:
        return None
    if gate.kind == "copy_from_context":
        base = baselines.mqar(protocol.name)
        # the gate asks whether the models learned where they trained: the mean over the trained settings (the
        # claim's own values unless its cell is one setting, e.g. a test-only one)
        trained = extra.get("trained_mean") or {}
        learned = trained if all(arm.name in trained for arm in claim.arms) else values
        return gates.evaluate(gate, claim, learned, base, extra.get("per_setting"))
    if gate.kind == "mean_predictor":
        by_setting = baselines.learnability(protocol.name, claim.metric.name)
        base = {arm.name: by_setting[arm.select["setting"]] for arm in claim.arms}
        return gates.evaluate(gate, claim, values, base)
    if gate.kind == "majority_class":
        return gates.evaluate(gate, claim, values, {"all": baselines.mad(protocol.name)[claim.metric.cell]})
    unigram = extra.get("unigram")
    if unigram is None:
        return {"kind": gate.kind, "rule": gate.describe(), "passed": False, "comparisons": {},
                "reason": "no unigram baseline recorded by the jobs"}  # fmt: skip
    return gates.evaluate(gate, claim, values, {"all": unigram})


def _extra_from_results(claim: Claim, registry: Registry, root: Path) -> dict[str, Any]:
    """Per-setting MQAR accuracies and the lm jobs' unigram baseline, read from the jobs' results."""
    from atlas_experiments.study.plan import Job
    from atlas_experiments.study.results import load

    protocol = registry.protocol_of(claim)
    per_setting: dict[str, dict[str, dict[int, float]]] = {}
    trained_mean: dict[str, dict[int, float]] = {}
    unigram = []
    for arm in claim.arms:
        for seed in protocol.seeds:
            metrics = load(Job(protocol, None if arm.select else arm, seed), root).get("metrics", {})
            mean_key = f"acc/{arm.name}/d={protocol.args.get('width')}"
            if protocol.task == "mqar" and mean_key in metrics:
                trained_mean.setdefault(arm.name, {})[seed] = float(metrics[mean_key])
            for key, value in metrics.items():
                if key.startswith(mean_key + "/"):
                    per_setting.setdefault(arm.name, {}).setdefault(key[len(mean_key) + 1 :], {})[seed] = float(value)
            if "baseline/unigram_loss" in metrics:
                unigram.append(float(metrics["baseline/unigram_loss"]))
    return {"per_setting": per_setting or None, "trained_mean": trained_mean or None,
            "unigram": (sum(unigram) / len(unigram)) if unigram else None}  # fmt: skip


def judge_v2(
    registry: Registry,
    scales: Iterable[str],
    *,
    root: str | Path | None = None,
    record: Iterable[Mapping[str, Any]] | None = None,
    baselines: Baselines | None = None,
) -> list[dict[str, Any]]:
    """Rule v2 on every planned claim, from the results under `root` or from an earlier report's `record`."""
    baselines = baselines or Baselines(registry)
    by_id = {r["claim"]: r for r in (record or ())}
    out = []
    for claim in planned_claims(registry, scales):
        protocol = registry.protocol_of(claim)
        head = {"claim": claim.id, "delta": claim.delta, "protocol": protocol.name, "evidence": claim.evidence,
                "outcome_seen": claim.outcome_seen}  # fmt: skip
        if record is not None:
            if "values" not in by_id.get(claim.id, {}) or by_id[claim.id]["verdict"] == "not run":
                out.append({**head, "verdict": "not run", "why": "no values in the record"})
                continue
            values, extra = record_values(by_id[claim.id]), {}
        else:
            values, missing = arm_values(claim, registry, root)
            if missing:
                out.append({**head, "verdict": "not run", "why": progress(claim, registry, missing)})
                continue
            extra = _extra_from_results(claim, registry, Path(root))
        finding = _gate_finding(claim, protocol, values, baselines, extra)
        try:
            judged = rule_v2.judge(claim, values, protocol.seeds, finding)
        except DecisionError as exc:
            out.append({**head, "verdict": "not run", "why": str(exc)})
            continue
        entry = {**head, **judged.to_dict(), "values": values}
        # every arm's memory size beside its verdict, equal-memory protocol or not: an ablation that also shrinks
        # the memory (identity features, a linear memory) compares the two together, and the reader should see it
        if protocol.task in _MEMORY_TASKS:
            entry["memory_floats"] = {arm.name: baselines.memory(protocol.name, arm.name, claim.metric.cell)
                                      for arm in claim.arms}  # fmt: skip
        out.append(entry)
    return out


def _mean_sd(by_seed: Mapping[int, float]) -> str:
    xs = [v for v in by_seed.values() if math.isfinite(v)]
    if not xs:
        return "-"
    mean = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
    return f"{fmt(mean, 3)} ± {fmt(sd, 2)}"


def _memory(entry: Mapping[str, Any]) -> str:
    floats = entry.get("memory_floats")
    if not floats:
        return ""
    return "; ".join(f"{arm} " + "/".join(str(v) for _, v in sorted(by_len.items())) for arm, by_len in floats.items())


def summary_table(records: list[dict[str, Any]]) -> str:
    rows = []
    for r in records:
        if "comparisons" not in r:
            rows.append([r["claim"], r["verdict"], "", "", "", "", r.get("why", ""), r["outcome_seen"].split(":")[0]])
            continue
        comps = "; ".join(
            f"{c['label']}: mean {fmt(c['mean'], 3)}, 90% CI [{fmt(c['ci'][0], 3)}, {fmt(c['ci'][1], 3)}], "
            f"p_dir {fmt(c['p_direction'], 3)}, p_below {fmt(c['p_below'], 3)}"
            for c in r["comparisons"].values()
        )
        gate = r.get("gate") or {}
        gate_text = ("passed" if gate.get("passed") else "failed: " + gate.get("reason", "")) if gate else "none"
        arms = "; ".join(f"{arm} {_mean_sd(v)}" for arm, v in r["values"].items())
        rows.append([r["claim"], r["label"], arms, comps, gate_text, _memory(r), r["reason"] if not gate or
                     gate.get("passed") else "", r["outcome_seen"].split(":")[0]])  # fmt: skip
    header = ["claim", "verdict (rule v2)", "arms: mean ± seed sd", "comparisons (d > 0 as predicted)",
              "learning gate", "memory floats per arm (by T)", "why", "outcome seen before registration"]  # fmt: skip
    return table(header, rows)


def gate_table(registry: Registry, records: list[dict[str, Any]]) -> str:
    """Each gated claim's best arm against its baseline, per comparison."""
    rows = []
    for r in records:
        gate = r.get("gate")
        if not gate:
            continue
        for label, g in gate.get("comparisons", {}).items():
            base = g["baseline"]
            base_text = ", ".join(f"{k} {fmt(v, 3)}" for k, v in base.items()) if isinstance(base, dict) else fmt(
                base, 4)  # fmt: skip
            rows.append([r["claim"], label, gate["kind"], g["best_arm"], fmt(g["value"], 4), base_text,
                         "pass" if g["passed"] else "fail", g["detail"]])  # fmt: skip
    return table(["claim", "comparison", "gate", "best arm", "best arm's value", "baseline", "", "detail"], rows)


def per_seed_tables(registry: Registry, records: list[dict[str, Any]]) -> str:
    """Every judged arm's value at every seed, one table per (protocol, metric): the numbers each verdict rests on.

    Claims that share a protocol and metric share their arms' values, so each arm appears once per table."""
    groups: dict[tuple[str, str], tuple[list[str], dict[str, Mapping[int, float]]]] = {}
    for r in records:
        if "comparisons" not in r:
            continue
        m = registry.claim(r["claim"]).metric
        claims, arms = groups.setdefault(
            (r["protocol"], m.name + (f" at {m.cell}" if m.cell else "") + f" ({m.better} is better)"), ([], {})
        )
        claims.append(r["claim"])
        for arm, by_seed in r["values"].items():
            arms.setdefault(arm, by_seed)
    out = []
    for (protocol, metric), (claims, arms) in groups.items():
        seeds = sorted({s for by_seed in arms.values() for s in by_seed})
        rows = [[arm, *[fmt(by_seed.get(s, math.nan), 4) for s in seeds], _mean_sd(by_seed)]
                for arm, by_seed in arms.items()]  # fmt: skip
        out += [f"**{protocol}**, {metric}; judges {', '.join(claims)}\n",
                table(["arm", *[f"seed {s}" for s in seeds], "mean ± sd"], rows), ""]  # fmt: skip
    return "\n".join(out)


def counts(records: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in records:
        out[r["verdict"]] = out.get(r["verdict"], 0) + 1
    return out


def _counts_table(columns: Mapping[str, Mapping[str, int]]) -> str:
    order = ["holds", "does not hold", "inconclusive", "not resolved (floor)", "not run", "other scale", "not testable"]
    names = [v for v in order if any(v in c for c in columns.values())]
    return table(["verdict", *columns], [[v, *[c.get(v, 0) for c in columns.values()]] for v in names])


V1_FIGURE = "verdicts_v1_rule_v2.png"
STALE_FIGURE = "verdicts.png"  # the single figure of reports before the split


def figure_groups(
    registry: Registry, fresh: list[dict[str, Any]], rejudged: list[dict[str, Any]] | None
) -> list[tuple[str, str, list[dict[str, Any]]]]:
    """The report's per-seed difference figures as (file, caption, records), each with at least one judged claim:
    the fresh verdicts of the recall tasks (MQAR, MAD), the fresh learnability verdicts on their own (some 150
    comparisons, which in one figure with the rest would bury the dozen recall rows), and the v1 data re-read."""

    def task(record: Mapping[str, Any]) -> str:
        protocol = registry.protocols.get(record.get("protocol", ""))
        return protocol.task if protocol else ""

    unit = "in units of each claim's delta"
    groups = [
        ("verdicts_recall.png", f"Per-seed differences of the recall claims (MQAR, MAD), {unit}",
         [r for r in fresh if task(r) != "learnability"]),
        ("verdicts_learnability.png", f"Per-seed differences of the learnability claims, {unit}",
         [r for r in fresh if task(r) == "learnability"]),
        (V1_FIGURE, f"Per-seed differences of the v1 data under rule v2, {unit}", list(rejudged or [])),
    ]  # fmt: skip
    return [g for g in groups if any("comparisons" in r for r in g[2])]


def write_figures(
    registry: Registry, fresh: list[dict[str, Any]], rejudged: list[dict[str, Any]] | None, out_dir: str | Path
) -> None:
    """Draw `figure_groups` into `out_dir`, and remove the single `verdicts.png` of earlier reports."""
    from atlas_experiments.study.figure import differences_figure

    for name, caption, records in figure_groups(registry, fresh, rejudged):
        differences_figure(records, Path(out_dir) / name, title=caption)
    (Path(out_dir) / STALE_FIGURE).unlink(missing_ok=True)


def render(
    registry: Registry,
    scales: Iterable[str],
    *,
    fresh: list[dict[str, Any]],
    rejudged: list[dict[str, Any]] | None,
    v1: list[Mapping[str, Any]],
    v1_source: str,
    others: list[Mapping[str, Any]],
    header: str = "",
) -> str:
    """verdicts.md: the counts per rule, rule v2 on new evidence, the v1 data under rule v2, the gates, rule v1.
    `others`: the current registry's claims of another scale or not testable (counted in both rule v2 columns)."""
    columns = {"rule v2, new evidence": counts([*fresh, *others])}
    if rejudged is not None:
        columns["v1 data, rule v2 (not new evidence)"] = counts([*rejudged, *others])
    columns["rule v1, v1 data (as registered)"] = counts(v1)
    judged_fresh = [r for r in fresh if "comparisons" in r]
    figures = figure_groups(registry, fresh, rejudged)
    fresh_figures = [f"![{caption}]({name})\n" for name, caption, _ in figures if name != V1_FIGURE]
    out = [
        "# The claims study: verdicts\n",
        f"Claims registered {registry.registered} (`config/study/claims.yaml`, {len(registry.amendments)} amendments), "
        f"citing {registry.paper_version}; scales run here: {', '.join(sorted(scales))}. Rule v2 (registered "
        f"{registry.rule_v2_registered}, docs/study.md): one-sided paired tests (exact sign-flip for n <= 12), Holm "
        "across a claim's comparisons; holds = every direction established; does not hold = an effect below delta "
        "established (95% upper bound < delta); not resolved (floor) = the protocol's learning gate failed for a "
        "comparison's best arm; otherwise inconclusive. Rule v1 (registered with the claims) is kept below as it "
        "was.\n",
        *([header + "\n"] if header else []),
        _counts_table(columns),
        "",
        "## Rule v2 on new evidence\n",
    ]
    if judged_fresh:
        out += [
            summary_table(fresh),
            "",
            *fresh_figures,
            "### Per-seed values\n",
            per_seed_tables(registry, fresh),
        ]
    else:
        out.append("No protocol registered after rule v2 has run yet: no claim has a verdict under rule v2 from fresh "
                   "seeds. The claims' protocols, seeds and runs so far are those of v1, whose outcomes are "
                   "known.\n")  # fmt: skip
    if rejudged is not None:
        out += [
            "## v1 data, rule v2: not new evidence\n",
            "The v1 runs (the same arms, protocols and seeds as the rule v1 table below) judged again under rule v2 "
            "and its learning gates, so a reader sees what changes and why. These numbers were seen before rule v2 "
            "was registered; they are a re-reading, not a test.\n",
            summary_table(rejudged),
            "",
            *[f"![{caption}]({name})\n" for name, caption, _ in figures if name == V1_FIGURE],
            "### Learning gates on the v1 data\n",
            "Each comparison's best arm against the protocol's baseline, computed from the protocol's own data "
            "(MQAR: copying a random context value, 1 / pairs per setting; learnability: the stream's mean output "
            "as a constant prediction, over the positions the metric averages). The v1 records kept only the mean "
            "MQAR accuracy over settings, so an MQAR gate there can only fail.\n",
            gate_table(registry, rejudged),
            "",
        ]
    out += [f"## Rule v1 verdicts (as registered 2026-12-01; {v1_source})\n", _v1_table(v1), ""]
    return "\n".join(out)


def _v1_table(v1: Iterable[Mapping[str, Any]]) -> str:
    rows = []
    for r in v1:
        if "comparisons" not in r:
            continue
        arms = "; ".join(f"{arm} {_mean_sd(record_values(r)[arm])}" for arm in r["values"])
        rows.append([r["claim"], r["verdict"], arms, "; ".join(d["reason"] for d in r["comparisons"].values())])
    return table(["claim", "verdict (rule v1)", "arms: mean ± seed sd", "why (rule v1)"], rows)
