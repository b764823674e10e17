"""`atlas eval mqar`: multi-query associative recall, trained from scratch per model (paper Fig. 7; Zoology protocol).

Protocol (Zoology, Arora et al. 2023; DeltaNet, Yang et al. 2024): one model per (preset, width, learning rate)
is trained on a mixture of MQAR settings (seq len T, kv pairs P), the settings taking turns batch by batch, and
scored on held-out sequences of each setting: accuracy over the queried values. The reported accuracy of a (model,
width) is the run with the best mean accuracy over the lr sweep. Every (model, width) also reports its state size
(the floats it carries per sequence after reading T tokens) and memory size (memory weights + attention KV), the
x-axis of the paper's "accuracy per memory size" (Fig. 7), and its accuracy before training.

Test-only settings (`test_settings`) are scored on held-out sequences of their own seed stream and are never
trained on, validated on or part of the mean accuracy: a setting at 4x the longest trained length asks whether a
model's recall extrapolates to contexts longer than any it saw (the paper's Table 3 trains at 4K and tests at 16K;
docs/study.md, "Extrapolation proxy"). Each is also scored, descriptively (`acc_far/...`), on its queries alone whose
key stands farther back than any training setting can put one.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from atlas_data.synthetic.mqar import MQARConfig, beyond, generate_mqar, longest_key_distance
from atlas_experiments.evaluation.results import EvalResult
from atlas_experiments.evaluation.resume import ResumeDir
from atlas_experiments.evaluation.sweep import SweepPoint, arm_config_kwargs, run_sweep
from atlas_experiments.evaluation.synthetic_train import (
    ModelChoice,
    TrainSettings,
    build_lm,
    comparison_result,
    count_parameters,
    evaluate,
    finite,
    fit,
    match_memory,
    memory_deviation,
    memory_target,
    model_config,
    state_size,
)
from atlas_experiments.plotting import pyplot, save_figure_atomic

log = logging.getLogger("atlas.eval")

# Zoology (Fig. 2) / DeltaNet MQAR at paper scale, for the deviations list.
PAPER = {"vocab_size": 8192, "widths": (64, 128, 256, 512), "layers": 2, "train_examples": 100_000}


@dataclass(frozen=True)
class MQARProtocol:
    """What `run_mqar` trains and scores (CLI defaults are the CPU-sized embedded run)."""

    settings: tuple[tuple[int, int], ...] = ((16, 2), (16, 4), (32, 2), (32, 4))  # (seq_len, num_kv_pairs)
    vocab_size: int = 64
    num_queries: int | None = None
    power_a: float = 0.01
    train_examples: int | None = None  # per setting; None: steps * batch / settings (each sequence seen once)
    test_examples: int = 256
    val_examples: int = 0  # per setting, own seed stream: the lr sweep selects on them (0: on the test set)
    eval_every: int = 0  # validation accuracy every N steps (needs val_examples): the learning curve
    widths: tuple[int, ...] = (64,)
    layers: int = 2
    heads: int | None = None
    memory_head_dim: int | None = None
    memory_expansion: int | None = None
    match_memory: str | None = None  # a preset or a float count: every arm's memory sized to it (synthetic_models)
    steps: int = 1000
    batch_size: int = 32
    lrs: tuple[float, ...] = (3e-3,)
    weight_decay: float = 0.1
    warmup_fraction: float = 0.05
    eval_batch_size: int = 64
    test_settings: tuple[tuple[int, int], ...] = ()  # scored only: never trained or validated on (extrapolation)
    configs: tuple[MQARConfig, ...] = field(init=False)
    test_configs: tuple[MQARConfig, ...] = field(init=False)

    def __post_init__(self) -> None:
        if not self.settings:
            raise ValueError("mqar: no (seq_len, num_kv_pairs) setting")

        def build(settings):
            q, a = self.num_queries, self.power_a
            return tuple(MQARConfig(self.vocab_size, t, p, q, a) for t, p in sorted(set(settings)))

        object.__setattr__(self, "configs", build(self.settings))
        object.__setattr__(self, "test_configs", build(self.test_settings))
        both = set(self.settings) & set(self.test_settings)
        if both:
            raise ValueError(
                f"mqar: --test-settings {sorted(both)} are trained settings already (a test-only setting is one the "
                "models never train on)"
            )
        if not self.widths or not self.lrs:
            raise ValueError("mqar: --width and --lrs need at least one value")
        if self.test_examples < 1 or self.steps < 0:
            raise ValueError("mqar: --test-examples must be >= 1 and --steps >= 0")
        if self.val_examples < 0 or self.eval_every < 0:
            raise ValueError("mqar: --val-examples and --eval-every must be >= 0")
        if self.eval_every and not self.val_examples:
            raise ValueError("mqar: --eval-every needs a validation split (--val-examples > 0)")

    def train_size(self) -> int:
        if self.train_examples is not None:
            return self.train_examples
        return max(self.batch_size, self.steps * self.batch_size // len(self.configs))

    def describe(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("configs")
        out.pop("test_configs")
        out["settings"] = [list(s) for s in sorted(set(self.settings))]
        # absent when empty: the protocols registered before the field existed keep their resume keys and records
        if self.test_settings:
            out["test_settings"] = [list(s) for s in sorted(set(self.test_settings))]
        else:
            out.pop("test_settings")
        out["train_examples_per_setting"] = self.train_size()
        return out

    def deviations(self) -> list[str]:
        dev = []
        if self.vocab_size != PAPER["vocab_size"]:
            dev.append(f"vocab {self.vocab_size} (Zoology/DeltaNet MQAR: 8192)")
        if max(self.widths) < 128 or len(self.widths) < 3:
            dev.append(f"model widths {list(self.widths)} (Zoology sweeps 64-512 per memory size)")
        if self.layers != PAPER["layers"]:
            dev.append(f"{self.layers} layers (MQAR protocol: 2)")
        seen = self.steps * self.batch_size
        if seen < PAPER["train_examples"]:
            dev.append(
                f"{self.steps} steps x batch {self.batch_size} = {seen} training sequences (Zoology: 100k examples, "
                "64 epochs)"
            )
        if max(t for t, _ in self.settings) < 256:
            dev.append(f"settings {sorted(set(self.settings))} (paper-scale MQAR: T 64-512, 4-64 kv pairs)")
        if len(self.lrs) < 3:
            dev.append(f"learning-rate sweep {list(self.lrs)} (Zoology sweeps several lrs, best-of)")
        if len(self.lrs) > 1 and not self.val_examples:
            dev.append("the lr is picked on the held-out test set (no validation split: --val-examples)")
        if self.num_queries is not None:
            dev.append(f"{self.num_queries} queries per sequence (Zoology queries every key)")
        dev += memory_deviation(
            self.memory_head_dim,
            self.memory_expansion,
            self.match_memory,
            " at each width (the paper compares at the presets' sizes; each arm's size and match status are in "
            "the table)",
        )
        dev.append("model width/depth from the command on top of the atlas_model preset blocks (SwiGLU 3x width)")
        return dev


def _datasets(protocol: MQARProtocol, seed: int):
    train = [
        generate_mqar(cfg, protocol.train_size(), seed=np.random.default_rng([seed, 1, i]))
        for i, cfg in enumerate(protocol.configs)
    ]
    return train, held_out_sets(protocol, seed)


def validation_sets(protocol: MQARProtocol, seed: int) -> list:
    """The validation sets of a run of `seed` (their own seed stream, disjoint draws from the test sets')."""
    return (
        [
            generate_mqar(cfg, protocol.val_examples, seed=np.random.default_rng([seed, 3, i]))
            for i, cfg in enumerate(protocol.configs)
        ]
        if protocol.val_examples
        else []
    )


def held_out_sets(protocol: MQARProtocol, seed: int) -> list:
    """The held-out sets a run of `seed` is scored on, one per setting of `protocol.configs`."""
    return [
        generate_mqar(cfg, protocol.test_examples, seed=np.random.default_rng([seed, 2, i]))
        for i, cfg in enumerate(protocol.configs)
    ]


def test_only_sets(protocol: MQARProtocol, seed: int) -> list:
    """The held-out sets of the test-only settings (`protocol.test_configs`), a seed stream of their own so that
    adding them leaves every other set of the run as it was."""
    return [
        generate_mqar(cfg, protocol.test_examples, seed=np.random.default_rng([seed, 4, i]))
        for i, cfg in enumerate(protocol.test_configs)
    ]


def config_kwargs(protocol: MQARProtocol, width: int) -> dict[str, Any]:
    """`model_config`'s keyword arguments for an arm of `protocol` at `width`."""
    return arm_config_kwargs(protocol, width=width, vocab_size=protocol.vocab_size)


def sized_arm(choice: ModelChoice, protocol: MQARProtocol, width: int, device: torch.device | str = "cpu"):
    """(arm, match): `choice` with its memory sized to `protocol.match_memory` (unchanged, None without it)."""
    if not protocol.match_memory:
        return choice, None
    kwargs = config_kwargs(protocol, width)
    seq_len = max(c.seq_len for c in protocol.configs)
    label, target = memory_target(protocol.match_memory, seq_len=seq_len, device=device, **kwargs)
    return match_memory(choice, label, target, seq_len=seq_len, device=device, **kwargs)


def memory_floats(choice: ModelChoice, protocol: MQARProtocol, width: int, device: torch.device | str = "cpu"):
    """{seq_len: memory floats} of an arm as `run_mqar` builds it (sized as the protocol says), without training:
    the same numbers a run records under `memory_size/...`."""
    device = torch.device(device)
    arm, _ = sized_arm(choice, protocol, width, device)
    model = build_lm(model_config(arm, **config_kwargs(protocol, width)), 0, device)
    scored = protocol.configs + protocol.test_configs
    return {c.seq_len: state_size(model, c.seq_len, c.vocab_size, device)["memory"] for c in scored}


def trained_models(
    models: Sequence[ModelChoice], protocol: MQARProtocol, device: torch.device | str = "cpu"
) -> list[dict[str, Any]]:
    """What `run_mqar` trains, resolved: per (model, width), the metrics' label and the model config after memory
    sizing. `match_memory` acts only through these configs (and the descriptive `memory_match` row), so two runs
    whose protocols differ in it alone, with equal resolved configs, seed and device, compute the same numbers."""
    out = []
    for choice in models:
        for width in protocol.widths:
            arm, _ = sized_arm(choice, protocol, width, device)
            config = model_config(arm, **config_kwargs(protocol, width))
            out.append({"name": choice.name, "width": width, "config": asdict(config)})
    return out


def mean_accuracy(scores: Sequence[dict[str, float]]) -> float:
    """A run's MQAR accuracy: the unweighted mean over the settings of their held-out accuracy."""
    return float(np.mean([s["acc"] for s in scores]))


def run_mqar(
    models: Sequence[ModelChoice],
    protocol: MQARProtocol,
    *,
    seed: int = 0,
    device: torch.device | str = "cpu",
    progress: bool = True,
    resume: ResumeDir | None = None,
) -> EvalResult:
    """Train every (model, width, lr) on the MQAR mixture and score each setting (module docstring). With `resume`,
    each (model, width, lr) run keeps a snapshot there while it trains and its result once it ends, and a rerun
    skips the finished runs and continues the unfinished one from its snapshot (the same numbers as one
    uninterrupted run)."""
    device = torch.device(device)
    train, test = _datasets(protocol, seed)
    val = validation_sets(protocol, seed)
    # every scored set: the trained settings' (their mean is the run's accuracy), then the test-only ones
    scored_configs = protocol.configs + protocol.test_configs
    test_only = test_only_sets(protocol, seed)
    scored = test + test_only
    # descriptive, never selected on: each test-only set scored only where the key stands farther back than any
    # training setting can put it
    trained_span = max(longest_key_distance(c) for c in protocol.configs)
    far = [beyond(d, c.num_kv_pairs, trained_span) for c, d in zip(protocol.test_configs, test_only)]
    metrics: dict[str, float] = {}
    runs: list[dict[str, Any]] = []
    table: list[dict[str, Any]] = []
    for choice in models:
        for width in protocol.widths:
            arm, match = sized_arm(choice, protocol, width, device)
            if match is not None:
                log.info("mqar %s d=%d: memory %s", choice.name, width, match.describe())
            cfg = model_config(arm, **config_kwargs(protocol, width))
            key = f"{choice.name}/d={width}"
            # the untrained model (every lr's run starts from these weights: build_lm seeds them)
            model = build_lm(cfg, seed, device)
            params = count_parameters(model)
            sizes = {c.seq_len: state_size(model, c.seq_len, c.vocab_size, device) for c in scored_configs}
            init_acc = [evaluate(model, d, batch_size=protocol.eval_batch_size, device=device)["acc"] for d in scored]
            del model

            def train_lr(point: SweepPoint, snapshots, choice=choice, cfg=cfg, key=key, width=width) -> dict[str, Any]:
                lr = point.identity["lr"]
                model = build_lm(cfg, seed, device)
                curve: list[list[float]] = []

                def validate(step: int, module) -> None:
                    accs = [evaluate(module, d, batch_size=protocol.eval_batch_size, device=device) for d in val]
                    curve.append([step, mean_accuracy(accs)])
                    # a line per point, so that a run of hours shows where it is in its log (with --no-progress too)
                    log.info("mqar %s lr=%g step %d: validation accuracy %.3f", key, lr, step, curve[-1][1])

                summary = fit(
                    model, train, TrainSettings.for_sweep(protocol, lr=lr), seed=seed, device=device,
                    progress=progress, desc=f"mqar {key} lr={lr:g}", every=protocol.eval_every,
                    on_step=validate if val else None, snapshot=snapshots({"curve": curve}) if snapshots else None,
                )  # fmt: skip
                scores = [evaluate(model, d, batch_size=protocol.eval_batch_size, device=device) for d in scored]
                run = {
                    "model": choice.name,
                    "width": width,
                    "lr": lr,
                    "mean_acc": mean_accuracy(scores[: len(test)]),
                    "train": summary,
                    "per_setting": {c.label: s for c, s in zip(scored_configs, scores)},
                }
                if far:
                    run["beyond_trained_span"] = {
                        c.label: evaluate(model, d, batch_size=protocol.eval_batch_size, device=device)
                        for c, d in zip(protocol.test_configs, far)
                    }
                if val:
                    if not curve or curve[-1][0] != protocol.steps:
                        validate(protocol.steps, model)
                    run["val_acc"], run["curve"] = curve[-1][1], curve
                log.info("mqar %s lr=%g: mean acc %.3f (%.0fs)", key, lr, run["mean_acc"], summary["seconds"])
                return run

            points = [SweepPoint(f"d{width}-lr{lr:g}", {"width": width, "lr": lr}) for lr in protocol.lrs]
            # the lr is picked on the validation split where there is one, never on the test set
            width_runs, best = run_sweep(
                points, train_lr, select="val_acc" if val else "mean_acc", choice=choice, seed=seed,
                protocol=protocol, resume=resume,
            )  # fmt: skip
            runs += width_runs
            row = {
                "model": choice.name,
                "preset": choice.preset,
                "width": width,
                "best_lr": best["lr"],
                "acc": best["mean_acc"],
                "acc_init": float(np.mean(init_acc[: len(test)])),
                "per_setting": {c.label: best["per_setting"][c.label]["acc"] for c in scored_configs},
                "state_size": {str(t): s["state"] for t, s in sizes.items()},
                "memory_size": {str(t): s["memory"] for t, s in sizes.items()},
                "parameters": params,
            }
            if match is not None:
                row["memory_match"] = match.describe()
            if val:
                row["val_acc"], row["curve"] = best["val_acc"], best["curve"]
                metrics[f"val_acc/{key}"] = best["val_acc"]
            table.append(row)
            metrics[f"acc/{key}"] = row["acc"]
            metrics[f"acc_init/{key}"] = row["acc_init"]
            if protocol.test_configs:
                row["test_only"] = [c.label for c in protocol.test_configs]
                row["trained_span"] = trained_span
                for c in protocol.test_configs:
                    score = best["beyond_trained_span"][c.label]
                    metrics[f"acc_far/{key}/{c.label}"] = score["acc"]
                    metrics[f"answers_far/{key}/{c.label}"] = float(score["answers"])
            for c, a0 in zip(scored_configs, init_acc):
                metrics[f"acc/{key}/{c.label}"] = row["per_setting"][c.label]
                metrics[f"acc_init/{key}/{c.label}"] = a0
            for t, s in sizes.items():
                metrics[f"state_size/{key}/len={t}"] = float(s["state"])
                metrics[f"memory_size/{key}/len={t}"] = float(s["memory"])
            metrics[f"loss_last/{key}"] = finite(best["train"]["loss_last"]) or float("nan")
    return comparison_result(
        "mqar", models, protocol, metrics, {"table": table, "runs": runs}, seed=seed, device=device
    )


def plot_mqar(result: EvalResult, path: Path) -> Path:
    """Accuracy vs memory size (Fig. 7 style): one panel per setting, one line per model over its widths."""
    plt = pyplot()
    from matplotlib.ticker import NullFormatter

    table = result.details["table"]
    labels = list(table[0]["per_setting"]) if table else []
    test_only = set(table[0].get("test_only", ())) if table else set()
    fig, axes = plt.subplots(1, max(1, len(labels)), figsize=(4.2 * max(1, len(labels)), 3.6), squeeze=False)
    for ax, label in zip(axes[0], labels):
        seq_len = label.split("/")[0].split("=")[1]
        for name in dict.fromkeys(r["model"] for r in table):
            rows = sorted((r for r in table if r["model"] == name), key=lambda r: r["memory_size"][seq_len])
            xs = [max(r["memory_size"][seq_len], 1) for r in rows]
            ys = [r["per_setting"][label] for r in rows]
            ax.plot(xs, ys, marker="o", label=name)
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(f"MQAR {label}" + (" (test only)" if label in test_only else ""))
        ax.set_xlabel("memory size (floats per sequence)")
        ax.set_ylabel("accuracy")
        ax.grid(alpha=0.3)
    if labels:
        axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    return save_figure_atomic(fig, path)


def plot_mqar_curves(result: EvalResult, path: Path) -> Path | None:
    """Validation accuracy against training step, one line per (model, width, lr); None without curves."""
    runs = [r for r in result.details["runs"] if r.get("curve")]
    if not runs:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for r in runs:
        steps, accs = zip(*r["curve"])
        ax.plot(steps, accs, marker=".", label=f"{r['model']} d={r['width']} lr={r['lr']:g}")
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("training step")
    ax.set_ylabel("validation accuracy (mean over settings)")
    ax.set_title("MQAR learning curves")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    return save_figure_atomic(fig, path)
