"""Learning gates of rule v2 (docs/study.md, "Learning gates"): a comparison between models that did not learn the
task says nothing about the paper's mechanism, so its claim is "not resolved (floor)" instead of judged.

A gate is registered per protocol (`protocols.<name>.gate` in claims.yaml) and applied per comparison to its best
arm (the arm with the best seed-mean metric): if even the best arm has not learned, the comparison cannot resolve
anything. Every baseline is computed from the protocol's own data, never hard-coded:

    copy_from_context   (MQAR) the best arm's held-out accuracy must exceed, in every setting, the accuracy of
                        copying a random value from the example's context (1 / pairs) by `margin`, and its mean
                        over the settings must reach `min_accuracy`. The gate reads the trained settings only:
                        for a claim on a test-only setting (extrapolation) it asks that the models learned the task
                        where they were trained, and the claim's own cell may then fall anywhere.
    mean_predictor      (learnability) the best arm's loss must lie `margin` below the normalised loss of the best
                        constant predictor (the stream's mean output) over the same positions.
    majority_class      (MAD) the best arm's task score must exceed, by `margin`, the accuracy of answering the most
                        frequent target everywhere (a model that ignores its input), averaged like the score over
                        the task's settings and over the protocol's seeds' test sets.
    unigram             (LM) the best arm's validation loss must lie `margin` below the unigram cross-entropy of the
                        validation split under the training split's token frequencies.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from atlas_experiments.study import _fields as check
from atlas_experiments.study._fields import ClaimsError

KINDS = {"copy_from_context": "mqar", "mean_predictor": "learnability", "majority_class": "mad", "unigram": "lm"}


@dataclass(frozen=True)
class Gate:
    kind: str
    margin: float
    min_accuracy: float | None = None

    def describe(self) -> str:
        if self.kind == "copy_from_context":
            return (f"best arm above copy-from-context by {self.margin:g} in every setting and mean accuracy >= "
                    f"{self.min_accuracy:g}")  # fmt: skip
        if self.kind == "mean_predictor":
            return f"best arm's loss {self.margin:g} below the mean predictor's"
        if self.kind == "majority_class":
            return f"best arm's accuracy {self.margin:g} above the majority class's"
        return f"best arm's validation loss {self.margin:g} nats below the unigram cross-entropy"


def parse_gate(raw: Any, where: str, task: str) -> Gate:
    raw = check.mapping(raw, where)
    kind = check.choice(raw.get("kind"), tuple(KINDS), f"{where}.kind")
    if KINDS[kind] != task:
        raise ClaimsError(f"{where}.kind: {kind} gates {KINDS[kind]} protocols, this one runs {task}")
    known = ("kind", "margin", "min_accuracy") if kind == "copy_from_context" else ("kind", "margin")
    check.keys(raw, where, required=known, known=known)
    margin = raw["margin"]
    if not (check.number(margin) and math.isfinite(margin) and margin >= 0):
        raise ClaimsError(f"{where}.margin: expected a number >= 0, got {margin!r}")
    floor = raw.get("min_accuracy")
    if kind == "copy_from_context" and not (check.number(floor) and 0 <= floor <= 1):
        raise ClaimsError(f"{where}.min_accuracy: expected a number in [0, 1], got {floor!r}")
    return Gate(kind, float(margin), None if floor is None else float(floor))


def _seed_mean(by_seed: Mapping[int, float]) -> float:
    xs = [float(v) for v in by_seed.values() if v is not None and math.isfinite(float(v))]
    return math.fsum(xs) / len(xs) if len(xs) == len(by_seed) and xs else math.nan


def best_arm(arms: Sequence[str], values: Mapping[str, Mapping[int, float]], higher_is_better: bool) -> str:
    """The arm with the best seed-mean (a diverged seed makes an arm's mean NaN, which never wins)."""
    means = {arm: _seed_mean(values[arm]) for arm in arms}
    finite = [a for a in arms if math.isfinite(means[a])]
    if not finite:
        return arms[0]
    return (max if higher_is_better else min)(finite, key=means.__getitem__)


def evaluate(
    gate: Gate,
    claim: Any,
    values: Mapping[str, Mapping[int, float]],
    baseline: Mapping[str, float],
    per_setting: Mapping[str, Mapping[str, Mapping[int, float]]] | None = None,
) -> dict[str, Any]:
    """The gate's finding for a claim: {"passed", "reason", "kind", "rule", "comparisons": {label: {...}}}.

    `baseline`: for copy_from_context the accuracy per setting label ("len=24/pairs=3"); for mean_predictor the
    loss per arm (each stream has its own); for majority_class {"all": accuracy} of the claim's MAD task; for
    unigram {"all": nats}. `per_setting` ({arm: {label: {seed: acc}}})
    holds MQAR accuracies per setting; without them (a record that kept only the mean) the gate checks the mean
    against the mean baseline, which every setting passing would imply, and cannot pass on that alone."""
    higher = claim.metric.better == "higher"
    out: dict[str, Any] = {}
    for comparison in claim.comparisons:
        arms = list(dict.fromkeys(arm for arm, _ in comparison.terms))
        best = best_arm(arms, values, higher)
        value = _seed_mean(values[best])
        if gate.kind == "copy_from_context":
            out[comparison.label] = _copy_gate(gate, best, value, baseline, (per_setting or {}).get(best))
        else:
            base = baseline[best] if gate.kind == "mean_predictor" else baseline["all"]
            threshold = base + gate.margin if higher else base - gate.margin
            ok = math.isfinite(value) and (value >= threshold if higher else value <= threshold)
            detail = f"{best} {value:.4g} vs {'>=' if higher else '<='} {threshold:.4g}"
            out[comparison.label] = {"best_arm": best, "value": value, "baseline": base, "threshold": threshold,
                                     "passed": ok, "detail": detail}  # fmt: skip
    failed = [f"{label}: {r['detail']}" for label, r in out.items() if not r["passed"]]
    return {
        "kind": gate.kind,
        "rule": gate.describe(),
        "passed": not failed,
        "reason": "; ".join(failed) if failed else "every comparison's best arm passes",
        "comparisons": out,
    }


def _copy_gate(
    gate: Gate, best: str, value: float, baseline: Mapping[str, float], settings: Mapping[str, Mapping[int, float]]
) -> dict[str, Any]:
    mean_base = math.fsum(baseline.values()) / len(baseline)
    record = {"best_arm": best, "value": value, "baseline": dict(baseline), "min_accuracy": gate.min_accuracy}
    if not math.isfinite(value) or value < gate.min_accuracy:
        return {**record, "passed": False, "detail": f"{best} mean accuracy {value:.3g} < {gate.min_accuracy:g}"}
    if settings is None:
        ok_mean = value >= mean_base + gate.margin
        why = "per-setting accuracies were not recorded" if ok_mean else (
            f"{best} mean accuracy {value:.3g} < copy baseline {mean_base:.3g} + {gate.margin:g}")  # fmt: skip
        return {**record, "passed": False, "detail": why}
    short = []
    for label, base in baseline.items():
        acc = _seed_mean(settings.get(label, {}))
        if not (math.isfinite(acc) and acc >= base + gate.margin):
            short.append(f"{label} {acc:.3g} < {base:.3g} + {gate.margin:g}")
    detail = f"{best}: " + ("; ".join(short) if short else "every setting above copy-from-context")
    return {**record, "passed": not short, "detail": detail}


# ---------------------------------------------------------------------------------------- baselines from data


def mqar_protocol(args: Mapping[str, Any]):
    """The `MQARProtocol` a study job with these registered args runs (the fields that shape data and models)."""
    from atlas_experiments.evaluation.mqar import MQARProtocol

    def opt(key: str, cast=int):
        return cast(args[key]) if args.get(key) is not None else getattr(MQARProtocol, key)

    return MQARProtocol(
        settings=_settings(args["settings"]),
        test_settings=_settings(args["test_settings"]) if args.get("test_settings") else (),
        vocab_size=int(args["vocab_size"]),
        num_queries=opt("num_queries"),
        test_examples=opt("test_examples"),
        widths=(int(args["width"]),) if "width" in args else MQARProtocol.widths,
        layers=opt("layers"),
        memory_head_dim=opt("memory_head_dim"),
        memory_expansion=opt("memory_expansion"),
        match_memory=opt("match_memory", str),
    )


def _settings(text: Any) -> tuple[tuple[int, int], ...]:
    from atlas_experiments.evaluation.synthetic_train import parse_pairs

    return parse_pairs(str(text), "mqar protocol settings", "TxP items like 64x4")


def mqar_labels(args: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """(trained, test-only) setting labels ("len=64/pairs=8") of an MQAR protocol's registered args."""
    protocol = mqar_protocol(args)
    return [c.label for c in protocol.configs], [c.label for c in protocol.test_configs]


def mqar_copy_baselines(args: Mapping[str, Any], seeds: Sequence[int]) -> dict[str, float]:
    """Copy-from-context accuracy per setting label, averaged over the held-out sets of `seeds` of an MQAR protocol
    (its `args` as registered: settings "TxP,...", vocab_size, test_examples, num_queries)."""
    from atlas_data.synthetic.mqar import copy_from_context_accuracy
    from atlas_experiments.evaluation.mqar import held_out_sets

    protocol = mqar_protocol(args)
    out: dict[str, list[float]] = {c.label: [] for c in protocol.configs}
    for seed in seeds:
        for cfg, data in zip(protocol.configs, held_out_sets(protocol, seed)):
            out[cfg.label].append(copy_from_context_accuracy(data, cfg.num_kv_pairs))
    return {label: math.fsum(v) / len(v) for label, v in out.items()}


def mad_protocol(args: Mapping[str, Any]):
    """The `MADProtocol` a study job with these registered args runs (parsed as `atlas eval mad` parses them)."""
    from atlas_experiments.commands.eval import task_parser
    from atlas_experiments.commands.options import options_namespace
    from atlas_experiments.evaluation.tasks.mad import mad_protocol as from_options

    return from_options(options_namespace(task_parser("mad"), args, where="mad protocol args"))


def mad_majority_baselines(args: Mapping[str, Any], seeds: Sequence[int]) -> dict[str, float]:
    """Per MAD task of a protocol: the majority-class accuracy of each setting's test set, averaged over the
    settings (as the task score averages them) and over `seeds` (each seed's job draws its own data)."""
    from atlas_data.synthetic.mad import generate_mad

    protocol = mad_protocol(args)
    out = {}
    for task in protocol.tasks:
        sets = [generate_mad(s, "test", seed=seed) for seed in seeds for s in protocol.settings(task)]
        accs = [data.majority_accuracy() for data in sets]
        out[task] = math.fsum(accs) / len(accs)
    return out


def learnability_mean_baselines(args: Mapping[str, Any], seeds: Sequence[int], metric: str) -> dict[str, float]:
    """The mean predictor's loss per stream (setting name), averaged over `seeds`, over the positions the metric
    averages (`final_loss`: the last tenth; `mean_loss`: the whole stream), with the streams the runs trained on."""
    from threadpoolctl import threadpool_limits

    from atlas_data.synthetic.learnability import LEARNABILITY_SETTINGS, LearnabilityConfig
    from atlas_experiments.evaluation.learnability import final_window

    cfg = LearnabilityConfig(
        **{k: int(args[k]) for k in ("dim", "seq_len", "rank", "window") if k in args},
        generator=str(args.get("generator", "gaussian")),
    )
    repeats = int(args.get("repeats", 1))
    tail = final_window(cfg.seq_len) if metric == "final_loss" else cfg.seq_len
    out = {}
    # one BLAS thread: the streams' small QRs and matmuls gain nothing from a second, and beside the study's
    # workers on two cores it made `atlas study report` a minute slower (the same numbers either way)
    with threadpool_limits(1):
        for index, name in enumerate(LEARNABILITY_SETTINGS):
            losses = [
                float(_mean_predictor_curve(cfg, name, (seed, r, index))[-tail:].mean())
                for seed in seeds
                for r in range(repeats)
            ]
            out[name] = math.fsum(losses) / len(losses)
    return out


@functools.lru_cache(maxsize=512)
def _mean_predictor_curve(cfg, name: str, seed: tuple[int, int, int]):
    """The mean predictor's loss at every position of one regenerated stream (kept: both metrics read it, and a
    stream at the paper's size takes a second or more to draw)."""
    import numpy as np

    from atlas_data.synthetic.learnability import generate_stream, mean_predictor_losses

    _, outputs = generate_stream(name, cfg, seed=np.random.default_rng(list(seed)))
    return mean_predictor_losses(outputs)
