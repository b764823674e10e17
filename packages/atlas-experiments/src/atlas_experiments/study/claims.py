"""The pre-registered claims (`config/study/claims.yaml`) as typed, frozen objects.

YAML is read once, at the edge (`load_claims`); `parse_claims` validates a plain mapping and every error names where
it is, e.g. ``claims[omega_window.mqar].metric.better: expected 'higher' for mqar accuracy, got 'lower'``. A
claim's prediction is turned into comparisons (`Comparison`: a signed sum of arms, minus a constant) that the
decision rule (`study.decision.judge_claim`) scores seed by seed. `arm_configs.check_arm_configs` builds every arm's
`AtlasConfig` (imports the model stack, so it is separate from loading). The file format: the header of
config/study/claims.yaml and docs/study.md.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from atlas_experiments.arms import ModelArm
from atlas_experiments.study import _fields as check
from atlas_experiments.study._fields import ClaimsError
from atlas_experiments.study.decision import ALPHA, CI_LEVEL, MIN_SEEDS
from atlas_experiments.study.gates import Gate, parse_gate

SCHEMA = 2
SCALES = ("cpu", "gpu", "cluster")
RUNNABLE_SCALES = ("cpu", "gpu")
EVIDENCE = ("direct", "proxy")
# task -> metric -> the direction of "better"; a claim stating the other direction is refused, since a flipped
# sign is the one mistake the decision rule cannot notice.
TASK_METRICS: Mapping[str, Mapping[str, str]] = MappingProxyType(
    {
        "mqar": {"accuracy": "higher"},
        "mad": {"accuracy": "higher"},
        "learnability": {"final_loss": "lower", "mean_loss": "lower"},
        "lm": {"val_loss": "lower"},
        "niah": {"accuracy": "higher"},
        "recall": {"accuracy": "higher"},
    }
)
# tasks whose arms are cells of one run (a stream of `atlas eval learnability`), not model presets
SELECT_TASKS = ("learnability",)
PREDICTIONS = ("order", "pairs", "beats_value", "interaction")
_ID = re.compile(r"^[a-z0-9_]+(\.[a-z0-9_]+)*$")
_TOP = (
    "schema",
    "registered",
    "paper",
    "rule",
    "rule_v2",
    "amendments",
    "tuning_history",
    "not_registered",
    "protocols",
    "arms",
    "claims",
)
_CLAIM_KEYS = (
    "id",
    "statement",
    "paper",
    "arms",
    "predicted",
    "metric",
    "delta",
    "test",
    "why",
    "prior_looks",
    "note",
    "outcome_seen",
)
SEEN = ("yes", "partly", "no")


@dataclass(frozen=True)
class Arm:
    """A model preset plus `AtlasConfig` overrides, or (`select`) a cell of a task that has no presets."""

    name: str
    preset: str | None
    overrides: Mapping[str, Any]
    select: Mapping[str, Any]

    def config_overrides(self) -> dict[str, Any]:
        """The overrides as plain (mutable) data for `AtlasConfig.from_preset`."""
        return check.thaw(self.overrides)

    def model_arm(self, size: str, base: Mapping[str, Any] | None = None) -> ModelArm:
        """This arm as a model at `size` on top of a protocol's model overrides `base` (the arm's own win), the
        object the workflow's runs are too (`atlas_experiments.arms`). A preset arm only."""
        if self.preset is None:
            raise ValueError(f"arm {self.name!r} selects a task cell; it is no model")
        return ModelArm(self.preset, size).over(base or {}, self.overrides)


@dataclass(frozen=True)
class Metric:
    task: str
    name: str
    better: str
    cell: str | None = None

    @property
    def higher_is_better(self) -> bool:
        return self.better == "higher"


@dataclass(frozen=True)
class Comparison:
    """One scored comparison: d = sign x (sum of weight x arm value - constant), sign by the metric's direction."""

    label: str
    terms: tuple[tuple[str, float], ...]
    constant: float = 0.0


@dataclass(frozen=True)
class Protocol:
    name: str
    task: str
    scale: str
    seeds: tuple[int, ...]
    size: str | None
    model_overrides: Mapping[str, Any]
    args: Mapping[str, Any]
    note: str
    gate: Gate | None = None
    registered: str = ""  # the date the protocol (and its seeds) was registered; the file's date by default


@dataclass(frozen=True)
class Claim:
    id: str
    statement: str
    source: str
    paper_value: str
    arms: tuple[Arm, ...]
    prediction: str
    comparisons: tuple[Comparison, ...]
    metric: Metric
    delta: float
    delta_unit: str
    scale: str
    testable: bool
    evidence: str
    protocol: str | None
    why: str | None
    priority: int | None
    prior_looks: tuple[str, ...]
    note: str
    outcome_seen: str = ""  # "yes|partly|no: why" (testable claims): was the outcome visible before registration?


@dataclass(frozen=True)
class Registry:
    """The whole pre-registration: claims plus the arms, protocols and history they refer to."""

    registered: str
    paper_version: str
    rule_v2_registered: str
    amendments: tuple[Mapping[str, Any], ...]
    tuning_history: tuple[Mapping[str, str], ...]
    not_registered: tuple[Mapping[str, str], ...]
    protocols: Mapping[str, Protocol]
    arms: Mapping[str, Arm]
    claims: tuple[Claim, ...]

    def claim(self, claim_id: str) -> Claim:
        for c in self.claims:
            if c.id == claim_id:
                return c
        raise KeyError(f"no claim {claim_id!r}; known: {', '.join(c.id for c in self.claims)}")

    def protocol_of(self, claim: Claim) -> Protocol | None:
        return self.protocols[claim.protocol] if claim.protocol else None


def load_claims(path: str | Path) -> Registry:
    """Read and validate a claims file (YAML or JSON)."""
    from atlas_experiments.configio import ConfigFileError, load_mapping

    try:
        data = load_mapping(path)
    except ConfigFileError as exc:
        raise ClaimsError(str(exc)) from exc
    return parse_claims(data)


# ----------------------------------------------------------------------------------------------------- parsing


def parse_claims(data: Mapping[str, Any]) -> Registry:
    """Validate the mapping of a claims file into a `Registry`."""
    check.keys(data, "claims file", required=_TOP, known=_TOP)
    if data["schema"] != SCHEMA:
        raise ClaimsError(f"schema: expected {SCHEMA}, got {data['schema']!r}")
    registered = check.date(data["registered"], "registered")
    rule = check.mapping(data["rule"], "rule")
    expected = {"alpha": ALPHA, "ci_level": CI_LEVEL, "min_seeds": MIN_SEEDS}
    if dict(rule) != expected:
        raise ClaimsError(f"rule: {dict(rule)} differs from the decision rule in code {expected}")
    paper = check.texts(data["paper"], "paper", ("version", "note"))
    rule_v2 = _rule_v2(data["rule_v2"], registered)
    amendments = tuple(
        _amendment(a, f"amendments[{i}]", registered) for i, a in enumerate(check.list_(data, "amendments"))
    )
    history = tuple(
        check.texts(h, f"tuning_history[{i}]", ("default", "chosen_on"))
        for i, h in enumerate(check.list_(data, "tuning_history"))
    )
    skipped = tuple(
        check.texts(h, f"not_registered[{i}]", ("what", "why"))
        for i, h in enumerate(check.list_(data, "not_registered"))
    )
    protocols = {
        name: _protocol(name, p, registered) for name, p in check.mapping(data["protocols"], "protocols").items()
    }
    arms = {name: _arm(name, a) for name, a in check.mapping(data["arms"], "arms").items()}
    claims: list[Claim] = []
    for i, raw in enumerate(check.list_(data, "claims")):
        claim = _claim(raw, i, arms, protocols)
        if any(c.id == claim.id for c in claims):
            raise ClaimsError(f"claims[{claim.id}].id: duplicate claim id")
        claims.append(claim)
    used = {a.name for c in claims for a in c.arms}
    unused = sorted(set(arms) - used)
    if unused:
        raise ClaimsError(f"arms: defined but used by no claim: {', '.join(unused)}")
    return Registry(
        registered,
        paper["version"],
        rule_v2,
        amendments,
        history,
        skipped,
        MappingProxyType(protocols),
        MappingProxyType(arms),
        tuple(claims),
    )


def _claim(raw: Any, index: int, arms: Mapping[str, Arm], protocols: Mapping[str, Protocol]) -> Claim:
    where = f"claims[{index}]"
    raw = check.mapping(raw, where)
    if isinstance(raw.get("id"), str) and _ID.match(raw["id"]):
        where = f"claims[{raw['id']}]"
    elif "id" in raw:
        raise ClaimsError(f"{where}.id: expected lower-case words joined by '.' or '_', got {raw['id']!r}")
    required = ("id", "statement", "paper", "arms", "predicted", "metric", "delta", "test")
    check.keys(raw, where, required=required, known=_CLAIM_KEYS)
    paper = check.texts(raw["paper"], f"{where}.paper", ("source", "value"))
    metric = _metric(raw["metric"], f"{where}.metric")
    names = raw["arms"]
    if not (isinstance(names, list) and names and all(isinstance(n, str) for n in names)):
        raise ClaimsError(f"{where}.arms: expected a list of arm names, got {names!r}")
    if len(set(names)) != len(names):
        raise ClaimsError(f"{where}.arms: an arm is listed twice: {names}")
    for name in names:
        if name not in arms:
            raise ClaimsError(f"{where}.arms: unknown arm {name!r} (defined under `arms`: {', '.join(arms)})")
        select = bool(arms[name].select)
        if select != (metric.task in SELECT_TASKS):
            kind = "a task cell (`select`)" if metric.task in SELECT_TASKS else "a model preset"
            raise ClaimsError(f"{where}.arms: arm {name!r} must be {kind} for task {metric.task}")
    prediction, comparisons = _prediction(raw["predicted"], f"{where}.predicted", names)
    delta = check.mapping(raw["delta"], f"{where}.delta")
    check.keys(delta, f"{where}.delta", required=("value", "unit"), known=("value", "unit"))
    value = delta["value"]
    if not (check.number(value) and math.isfinite(value) and value > 0):
        raise ClaimsError(f"{where}.delta.value: expected a positive number, got {value!r}")
    unit = check.text(delta["unit"], f"{where}.delta.unit")
    test = check.mapping(raw["test"], f"{where}.test")
    check.keys(
        test,
        f"{where}.test",
        required=("scale", "testable", "evidence"),
        known=("scale", "testable", "evidence", "protocol", "priority"),
    )
    scale = check.choice(test["scale"], SCALES, f"{where}.test.scale")
    evidence = check.choice(test["evidence"], EVIDENCE, f"{where}.test.evidence")
    testable = test["testable"]
    if not isinstance(testable, bool):
        raise ClaimsError(f"{where}.test.testable: expected true or false, got {testable!r}")
    protocol, why = test.get("protocol"), raw.get("why")
    if testable:
        if why is not None:
            raise ClaimsError(f"{where}.why: only for claims with testable: false")
        if scale not in RUNNABLE_SCALES:
            raise ClaimsError(f"{where}.test.scale: {scale!r} is not a scale we run; set testable: false and why")
        if protocol not in protocols:
            raise ClaimsError(f"{where}.test.protocol: expected one of {', '.join(protocols)}, got {protocol!r}")
        p = protocols[protocol]
        if (p.task, p.scale) != (metric.task, scale):
            raise ClaimsError(
                f"{where}.test.protocol: {protocol} runs {p.task} at {p.scale}, the claim is {metric.task} at {scale}"
            )
        ran = str(p.args.get("tasks", "all"))
        if p.task == "mad" and ran != "all" and metric.cell not in ran.split(","):
            raise ClaimsError(f"{where}.metric.cell: {protocol} runs MAD tasks {ran}, not {metric.cell}")
        if p.task == "mqar" and metric.cell is not None:
            from atlas_experiments.study.gates import mqar_labels

            trained, test_only = mqar_labels(p.args)
            if metric.cell not in trained + test_only:
                raise ClaimsError(
                    f"{where}.metric.cell: {protocol} scores settings {', '.join(trained + test_only)}, not "
                    f"{metric.cell!r}"
                )
    else:
        why = check.text(why, f"{where}.why")
        if protocol is not None:
            raise ClaimsError(f"{where}.test.protocol: a claim with testable: false has no protocol")
    priority = test.get("priority")
    if priority is not None and not (isinstance(priority, int) and not isinstance(priority, bool) and priority >= 1):
        raise ClaimsError(f"{where}.test.priority: expected an int >= 1, got {priority!r}")
    seen = raw.get("outcome_seen")
    if testable:
        seen = check.text(seen, f"{where}.outcome_seen")
        if seen.split(":")[0].strip() not in SEEN:
            raise ClaimsError(f"{where}.outcome_seen: expected '<{'|'.join(SEEN)}>: why', got {seen!r}")
    elif seen is not None:
        raise ClaimsError(f"{where}.outcome_seen: only for testable claims")
    looks = raw.get("prior_looks", [])
    if not (isinstance(looks, list) and all(isinstance(x, str) and x.strip() for x in looks)):
        raise ClaimsError(f"{where}.prior_looks: expected a list of sentences, got {looks!r}")
    return Claim(
        id=raw["id"],
        statement=check.text(raw["statement"], f"{where}.statement"),
        source=paper["source"],
        paper_value=paper["value"],
        arms=tuple(arms[n] for n in names),
        prediction=prediction,
        comparisons=comparisons,
        metric=metric,
        delta=float(value),
        delta_unit=unit,
        scale=scale,
        testable=testable,
        evidence=evidence,
        protocol=protocol,
        why=why,
        priority=priority,
        prior_looks=tuple(looks),
        note=check.text(raw["note"], f"{where}.note") if "note" in raw else "",
        outcome_seen=seen or "",
    )


def _prediction(raw: Any, where: str, names: list[str]) -> tuple[str, tuple[Comparison, ...]]:
    raw = check.mapping(raw, where)
    if len(raw) != 1 or next(iter(raw)) not in PREDICTIONS:
        raise ClaimsError(f"{where}: expected exactly one of {', '.join(PREDICTIONS)}, got {sorted(raw)}")
    kind, value = next(iter(raw.items()))
    key = f"{where}.{kind}"

    def arm(name: Any) -> str:
        if name not in names:
            raise ClaimsError(f"{key}: {name!r} is not one of the claim's arms {names}")
        return name

    def pair(item: Any) -> tuple[str, str]:
        if not (isinstance(item, list) and len(item) == 2 and item[0] != item[1]):
            raise ClaimsError(f"{key}: expected [better, worse] with two different arms, got {item!r}")
        return arm(item[0]), arm(item[1])

    if kind == "order":
        if not (isinstance(value, list) and len(value) >= 2 and all(isinstance(x, str) for x in value)):
            raise ClaimsError(f"{key}: expected two or more arm names, best first, got {value!r}")
        if len(set(value)) != len(value):
            raise ClaimsError(f"{key}: expected two or more different arms, best first, got {value!r}")
        comparisons = tuple(_beats(arm(a), arm(b)) for a, b in zip(value, value[1:]))
    elif kind == "pairs":
        if not (isinstance(value, list) and value):
            raise ClaimsError(f"{key}: expected a list of [better, worse] pairs, got {value!r}")
        comparisons = tuple(_beats(*pair(item)) for item in value)
    elif kind == "beats_value":
        if not (check.number(value) and math.isfinite(value)):
            raise ClaimsError(f"{key}: expected a finite number, got {value!r}")
        comparisons = tuple(Comparison(f"{n} beats {value:g}", ((n, 1.0),), float(value)) for n in names)
    else:
        if not (isinstance(value, list) and len(value) == 2):
            raise ClaimsError(f"{key}: expected [[a, b], [c, d]]: the gain of a over b exceeds that of c over d")
        (a, b), (c, d) = pair(value[0]), pair(value[1])
        label = f"gain of {a} over {b} beats gain of {c} over {d}"
        comparisons = (Comparison(label, ((a, 1.0), (b, -1.0), (c, -1.0), (d, 1.0))),)
    used = {n for comp in comparisons for n, _ in comp.terms}
    unused = [n for n in names if n not in used]
    if unused:
        raise ClaimsError(f"{where}: arm(s) {', '.join(unused)} listed in arms but not in the prediction")
    return kind, comparisons


def _beats(better: str, worse: str) -> Comparison:
    return Comparison(f"{better} beats {worse}", ((better, 1.0), (worse, -1.0)))


def _metric(raw: Any, where: str) -> Metric:
    raw = check.mapping(raw, where)
    check.keys(raw, where, required=("task", "name", "better"), known=("task", "name", "better", "cell"))
    task = check.choice(raw["task"], tuple(TASK_METRICS), f"{where}.task")
    name = check.choice(raw["name"], tuple(TASK_METRICS[task]), f"{where}.name")
    expected = TASK_METRICS[task][name]
    if raw["better"] != expected:
        raise ClaimsError(f"{where}.better: expected {expected!r} for {task} {name}, got {raw['better']!r}")
    cell = check.text(raw["cell"], f"{where}.cell") if "cell" in raw else None
    if task == "mad":  # a MAD job scores six tasks: the cell names the one the claim is about
        from atlas_data.synthetic.mad import MAD_TASKS

        check.choice(cell, MAD_TASKS, f"{where}.cell")
    return Metric(task, name, expected, cell)


def _protocol(name: str, raw: Any, registered: str) -> Protocol:
    where = f"protocols.{name}"
    raw = check.mapping(raw, where)
    known = ("task", "scale", "seeds", "size", "model_overrides", "args", "note", "gate", "registered")
    check.keys(raw, where, required=("task", "scale", "seeds"), known=known)
    seeds = raw["seeds"]
    ok = isinstance(seeds, list) and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds)
    if not ok or len(set(seeds)) != len(seeds) or len(seeds) < MIN_SEEDS:
        raise ClaimsError(f"{where}.seeds: expected {MIN_SEEDS} or more different ints >= 0, got {seeds!r}")
    task = check.choice(raw["task"], tuple(TASK_METRICS), f"{where}.task")
    return Protocol(
        name=name,
        task=task,
        scale=check.choice(raw["scale"], RUNNABLE_SCALES, f"{where}.scale"),
        seeds=tuple(seeds),
        size=check.text(raw["size"], f"{where}.size") if "size" in raw else None,
        model_overrides=check.freeze(check.mapping(raw.get("model_overrides", {}), f"{where}.model_overrides")),
        args=check.freeze(check.mapping(raw.get("args", {}), f"{where}.args")),
        note=check.text(raw["note"], f"{where}.note") if "note" in raw else "",
        gate=parse_gate(raw["gate"], f"{where}.gate", task) if "gate" in raw else None,
        registered=check.date(raw["registered"], f"{where}.registered") if "registered" in raw else registered,
    )


def _rule_v2(raw: Any, registered: str) -> str:
    """rule_v2 must repeat the constants of `study.rule_v2`; returns its registration date."""
    from atlas_experiments.study import rule_v2 as v2
    from atlas_experiments.study.paired_tests import EXACT_MAX_N

    raw = check.mapping(raw, "rule_v2")
    date = check.date(raw.get("registered"), "rule_v2.registered")
    if date < registered:
        raise ClaimsError(f"rule_v2.registered: {date} is before the registration date {registered}")
    expected = {"registered": date, "alpha": v2.ALPHA, "ci_level": round(v2.CI_LEVEL, 10), "exact_max_n": EXACT_MAX_N,
                "correction": v2.CORRECTION, "power": {"effect": v2.POWER_EFFECT, "target": v2.POWER_TARGET,
                                                       "min_seeds": v2.POWER_MIN_SEEDS}}  # fmt: skip
    got = {**raw, "ci_level": round(float(raw.get("ci_level", -1)), 10)}
    if got != expected:
        raise ClaimsError(f"rule_v2: {dict(raw)} differs from rule v2 in code {expected}")
    return date


def _arm(name: str, raw: Any) -> Arm:
    where = f"arms.{name}"
    if not _ID.match(str(name)) or "." in str(name):
        raise ClaimsError(f"{where}: arm names are lower-case words joined by '_'")
    raw = check.mapping(raw, where)
    check.keys(raw, where, required=(), known=("preset", "overrides", "select"))
    if ("preset" in raw) == ("select" in raw):
        raise ClaimsError(f"{where}: expected exactly one of preset (a model) and select (a task cell)")
    if "select" in raw:
        if "overrides" in raw:
            raise ClaimsError(f"{where}.overrides: a task cell (select) takes no model overrides")
        select = check.mapping(raw["select"], f"{where}.select")
        _check_select(select, f"{where}.select")
        return Arm(name, None, check.freeze({}), check.freeze(select))
    preset = check.text(raw["preset"], f"{where}.preset")
    return Arm(
        name, preset, check.freeze(check.mapping(raw.get("overrides", {}), f"{where}.overrides")), check.freeze({})
    )


def _check_select(select: Mapping[str, Any], where: str) -> None:
    from atlas_data.synthetic.learnability import LEARNABILITY_SETTINGS

    check.keys(select, where, required=("setting", "memory"), known=("setting", "memory"))
    check.choice(select["setting"], LEARNABILITY_SETTINGS, f"{where}.setting")
    if not re.fullmatch(r"[1-9][0-9]*x[1-9][0-9]*", str(select["memory"])):
        raise ClaimsError(f"{where}.memory: expected LAYERSxEXPANSION such as 2x4, got {select['memory']!r}")


def _amendment(raw: Any, where: str, registered: str) -> Mapping[str, Any]:
    raw = check.mapping(raw, where)
    check.keys(raw, where, required=("date", "note", "results_seen"), known=("date", "note", "results_seen"))
    date = check.date(raw["date"], f"{where}.date")
    if date < registered:
        raise ClaimsError(f"{where}.date: {date} is before the registration date {registered}")
    if not isinstance(raw["results_seen"], bool):
        raise ClaimsError(f"{where}.results_seen: expected true or false")
    return MappingProxyType(
        {"date": date, "note": check.text(raw["note"], f"{where}.note"), "results_seen": raw["results_seen"]}
    )
