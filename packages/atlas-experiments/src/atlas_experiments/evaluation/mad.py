"""`atlas eval mad`: the MAD synthetic benchmark (Poli et al. 2024; paper Table 4), trained from scratch per model.

Protocol (mad-lab `benchmark.py`, `train.py`, `mad/analysis.py`): for every task and every difficulty setting of
the task (a baseline plus knobs varied one at a time, `atlas_data.synthetic.mad.mad_settings`), a fresh model is
trained on a fixed train set for each point of the lr x weight-decay sweep (mad-lab: lr {1e-4, 5e-4, 1e-3} x wd
{0, 0.1}, AdamW, cosine decay, 200 epochs of batch 128, width 128, two blocks) and scored on an independent test
set; the best sweep point counts (selected on test accuracy, as mad-lab does), and a task's MAD score is the mean
over its settings. Compression uses mad-lab's auto-encoder head: the backbone's last hidden state plus a sin-cos
position embedding, decoded by a 2-layer MLP into every input token.

Accuracy is micro (all scored tokens); `acc_macro` is the per-class mean that mad-lab's torchmetrics metric gives.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any

import numpy as np
import torch
from torch import nn

from atlas_data.synthetic.mad import GRIDS, MAD_TASKS, MADSetting, generate_mad, mad_settings
from atlas_experiments.evaluation.results import EvalResult
from atlas_experiments.evaluation.resume import ResumeDir
from atlas_experiments.evaluation.sweep import Snapshots, SweepPoint, arm_config_kwargs, run_sweep
from atlas_experiments.evaluation.synthetic_train import (
    FitSnapshot,
    ModelChoice,
    TrainSettings,
    build_lm,
    comparison_result,
    evaluate,
    fit,
    lm_forward,
    match_memory,
    memory_deviation,
    memory_target,
    model_config,
    state_size,
)

log = logging.getLogger("atlas.eval")

SWEEPS: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "paper": ((1e-4, 5e-4, 1e-3), (0.0, 0.1)),
    "reduced": ((5e-4, 1e-3), (0.0,)),
    "single": ((1e-3,), (0.0,)),
}
PAPER_WIDTH = 128
PAPER_EPOCHS, PAPER_BATCH = 200, 128


def _sincos(n: int, dim: int, temperature: float = 10000.0) -> torch.Tensor:
    """mad-lab's `posemb_sincos_1d`: [n, dim] with sin in the first half and cos in the second."""
    half = dim // 2
    omega = torch.arange(half, dtype=torch.float32) / max(half - 1, 1)
    omega = 1.0 / temperature**omega
    angles = torch.arange(n, dtype=torch.float32)[:, None] * omega[None, :]
    out = torch.cat([angles.sin(), angles.cos()], dim=1)
    return torch.nn.functional.pad(out, (0, dim - out.shape[1]))


class CompressionModel(nn.Module):
    """mad-lab's auto-encoder around an `atlas_model` backbone: encode with the causal stack, take the last position,
    add a sin-cos position code per output position, decode with a non-expanding 2-layer MLP, unembed."""

    def __init__(self, config, seq_len: int) -> None:
        from transformers import AutoModel

        import atlas_model  # noqa: F401

        super().__init__()
        d = config.hidden_size
        self.backbone = AutoModel.from_config(config)
        self.register_buffer("positions", _sincos(seq_len, d), persistent=False)
        self.decoder = nn.Sequential(
            nn.RMSNorm(d), nn.Linear(d, d), nn.GELU(), nn.RMSNorm(d), nn.Linear(d, d), nn.GELU()
        )
        self.unembed = nn.Sequential(nn.RMSNorm(d), nn.Linear(d, config.vocab_size))
        for module in (*self.decoder, *self.unembed):
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=0.02)
                nn.init.zeros_(module.bias)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        h = self.backbone(input_ids=input_ids, use_cache=False).last_hidden_state[:, -1]
        z = h[:, None, :] + self.positions[: input_ids.shape[1]].to(h.dtype)[None]
        return self.unembed(self.decoder(z))


def _compression_forward(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return model(x)


@dataclass(frozen=True)
class MADProtocol:
    """What `run_mad` trains and scores (CLI defaults are the CPU-sized embedded run)."""

    tasks: tuple[str, ...] = MAD_TASKS
    grid: str = "reduced"
    lrs: tuple[float, ...] = SWEEPS["single"][0]
    wds: tuple[float, ...] = SWEEPS["single"][1]
    width: int = 64
    layers: int = 2
    heads: int | None = None
    memory_head_dim: int | None = None
    memory_expansion: int | None = None
    match_memory: str | None = None  # a preset or a float count: every arm's memory sized to it (synthetic_models)
    steps: int = 100
    batch_size: int = 16
    num_train_examples: int | None = None  # override every setting's train-set size
    num_test_examples: int | None = None  # None: the grid's (paper 1280, reduced 256)
    warmup_fraction: float = 0.0
    grad_clip: float = 1.0
    eval_batch_size: int = 64

    def __post_init__(self) -> None:
        unknown = sorted(set(self.tasks) - set(MAD_TASKS))
        if unknown or not self.tasks:
            raise ValueError(f"mad --tasks: expected some of {', '.join(MAD_TASKS)}, got {', '.join(self.tasks)}")
        if self.grid not in GRIDS:
            raise ValueError(f"mad --grid: expected one of {', '.join(GRIDS)}, got {self.grid!r}")
        if not self.lrs or not self.wds:
            raise ValueError("mad: the sweep needs at least one lr and one weight decay")

    def settings(self, task: str) -> list[MADSetting]:
        overrides = {} if self.num_train_examples is None else {"num_train_examples": self.num_train_examples}
        return mad_settings(task, self.grid, num_test_examples=self.num_test_examples, **overrides)

    def describe(self) -> dict[str, Any]:
        out = asdict(self)
        out["settings"] = {t: [s.to_dict() for s in self.settings(t)] for t in self.tasks}
        return out

    def deviations(self) -> list[str]:
        dev = []
        if self.width != PAPER_WIDTH:
            dev.append(f"model width {self.width} (MAD: 128)")
        if self.layers != 2:
            dev.append(f"{self.layers} blocks (MAD: 2 blocks of mixer + SwiGLU)")
        if (tuple(self.lrs), tuple(self.wds)) != SWEEPS["paper"]:
            dev.append(
                f"sweep lr {list(self.lrs)} x wd {list(self.wds)} (MAD: lr {{1e-4, 5e-4, 1e-3}} x wd {{0, 0.1}})"
            )
        if self.grid == "paper_baseline":
            dev.append("the paper grid's baseline setting of each task only (MAD: the baseline and its variants)")
        elif self.grid != "paper":
            dev.append(
                f"difficulty grid '{self.grid}' (CPU-sized settings, see atlas_data.synthetic.mad; MAD: "
                "mad-lab configs/tasks)"
            )
        dev.append(
            f"{self.steps} steps of batch {self.batch_size} per run (MAD: {PAPER_EPOCHS} epochs of batch {PAPER_BATCH} "
            "over the train set)"
        )
        if self.num_train_examples is not None:
            dev.append(
                f"{self.num_train_examples} training sequences in every setting (MAD: 12800, 256 for memorization; "
                "the train-size axis of the grid is dropped)"
            )
        if self.num_test_examples not in (None, 1280) or not self.grid.startswith("paper"):
            dev.append("test sets smaller than MAD's 1280 sequences")
        if set(self.tasks) != set(MAD_TASKS):
            dev.append(f"tasks {list(self.tasks)} only")
        dev += memory_deviation(
            self.memory_head_dim,
            self.memory_expansion,
            self.match_memory,
            " (the paper trains the presets' sizes; each arm's size and match status are in details.memory_match)",
        )
        dev.append("gradient clipping 1.0 and cosine decay over steps (mad-lab: no clipping, cosine over epochs)")
        dev.append("scores are micro accuracy (acc_macro: mad-lab's torchmetrics macro average)")
        return dev


def _config_kwargs(protocol: MADProtocol, vocab_size: int) -> dict[str, Any]:
    return arm_config_kwargs(protocol, width=protocol.width, vocab_size=vocab_size)


def _model_config(choice: ModelChoice, setting: MADSetting, protocol: MADProtocol):
    return model_config(choice, **_config_kwargs(protocol, setting.vocab_size))


def matched_arms(
    models: Sequence[ModelChoice], protocol: MADProtocol, *, device: torch.device
) -> tuple[list[ModelChoice], dict[str, dict[str, Any]]]:
    """The arms sized to `protocol.match_memory` (unchanged without it) and how each was sized. Memory weights do
    not depend on the vocabulary or T, so one size serves every task; the longest setting's T probes growth."""
    if not protocol.match_memory:
        return list(models), {}
    seq_len = max(s.seq_len for t in protocol.tasks for s in protocol.settings(t))
    kwargs = _config_kwargs(protocol, 64)
    label, target = memory_target(protocol.match_memory, seq_len=seq_len, device=device, **kwargs)
    arms, info = [], {}
    for choice in models:
        arm, match = match_memory(choice, label, target, seq_len=seq_len, device=device, **kwargs)
        log.info("mad %s: memory %s", choice.name, match.describe())
        arms.append(arm)
        info[choice.name] = match.describe()
    return arms, info


def memory_sizes(
    choice: ModelChoice, setting: MADSetting, protocol: MADProtocol, *, seed: int, device: torch.device | str
) -> dict[str, int]:
    """Floats the model carries after reading the setting's T tokens (batch 1): "memory" (memory weights plus
    attention keys and values, the memory-size axis of the paper's MQAR figure) and "state" (the whole decoding
    cache). Accuracies of arms compare fairly only beside these."""
    model = build_lm(_model_config(choice, setting, protocol), seed, torch.device(device))
    return state_size(model, setting.seq_len, setting.vocab_size, torch.device(device))


def memory_floats(
    choice: ModelChoice, protocol: MADProtocol, task: str, device: torch.device | str = "cpu"
) -> dict[int, int]:
    """{T: memory floats} of an arm as `run_mad` builds it (sized as the protocol says) at `task`'s baseline
    setting, without training: the number a run records under `memory_size/<arm>/<task>`."""
    device = torch.device(device)
    (arm,), _ = matched_arms([choice], protocol, device=device)
    setting = protocol.settings(task)[0]
    return {setting.seq_len: memory_sizes(arm, setting, protocol, seed=0, device=device)["memory"]}


def _train_and_score(
    choice: ModelChoice,
    setting: MADSetting,
    train,
    test,
    lr: float,
    wd: float,
    protocol: MADProtocol,
    *,
    seed: int,
    device: torch.device,
    progress: bool,
    snapshot: FitSnapshot | None = None,
) -> dict[str, Any]:
    cfg = _model_config(choice, setting, protocol)
    if setting.task == "compression":
        torch.manual_seed(seed)
        model: nn.Module = CompressionModel(cfg, train.seq_len).to(device)
        forward = _compression_forward
    else:
        model = build_lm(cfg, seed, device)
        forward = lm_forward
    settings = TrainSettings.for_sweep(protocol, lr=lr, weight_decay=wd)
    desc = f"mad {choice.name} {setting.task} {setting.label} lr={lr:g} wd={wd:g}"
    summary = fit(
        model, [train], settings, forward=forward, seed=seed, device=device, progress=progress, desc=desc,
        snapshot=snapshot,
    )  # fmt: skip
    score = evaluate(model, test, forward=forward, batch_size=protocol.eval_batch_size, device=device)
    return {
        "lr": lr,
        "weight_decay": wd,
        **score,
        "train": summary,
        "epochs": round(protocol.steps * protocol.batch_size / len(train), 2),
    }


def _train_point(point: SweepPoint, snapshots: Snapshots, *, choice: ModelChoice, setting: MADSetting,
                 **kwargs: Any) -> dict[str, Any]:  # fmt: skip
    lr, wd = point.identity["lr"], point.identity["weight_decay"]
    run = _train_and_score(choice, setting, lr=lr, wd=wd, snapshot=snapshots({}) if snapshots else None, **kwargs)
    log.info("mad %s %s %s lr=%g wd=%g: acc %.3f", choice.name, setting.task, setting.label, lr, wd, run["acc"])
    return run


def task_score(best_per_setting: Sequence[dict[str, Any]]) -> tuple[float, float]:
    """A task's MAD score, the mean over its settings of the best-of-sweep accuracy, and the same for acc_macro."""
    return (
        float(np.mean([r["acc"] for r in best_per_setting])),
        float(np.mean([r["acc_macro"] for r in best_per_setting])),
    )


def run_mad(
    models: Sequence[ModelChoice],
    protocol: MADProtocol,
    *,
    seed: int = 0,
    device: torch.device | str = "cpu",
    progress: bool = True,
    resume: ResumeDir | None = None,
) -> EvalResult:
    """Train and score every (model, task, setting, sweep point); best-of-sweep per setting, mean per task. With
    `resume`, each sweep point's run survives a kill (`evaluation.resume`: a rerun skips the finished runs and
    continues the unfinished one from its snapshot)."""
    device = torch.device(device)
    models, matches = matched_arms(models, protocol, device=device)
    metrics: dict[str, float] = {}
    details: dict[str, Any] = {"runs": [], "scores": {}}
    if matches:
        details["memory_match"] = matches
    scores: dict[str, dict[str, float]] = {c.name: {} for c in models}
    for task in protocol.tasks:
        settings = protocol.settings(task)
        per_model: dict[str, list[dict[str, Any]]] = {c.name: [] for c in models}
        for index, setting in enumerate(settings):
            train = generate_mad(setting, "train", seed=seed)
            test = generate_mad(setting, "test", seed=seed)
            for choice in models:
                points = [
                    SweepPoint(
                        f"{task}-s{index}-lr{lr:g}-wd{wd:g}",
                        {"task": task, "setting": setting.label, "lr": lr, "weight_decay": wd},
                    )
                    for lr in protocol.lrs
                    for wd in protocol.wds
                ]

                # mad-lab selects the sweep point on test accuracy
                train_point = partial(
                    _train_point, choice=choice, setting=setting, train=train, test=test, protocol=protocol,
                    seed=seed, device=device, progress=progress,
                )  # fmt: skip
                runs, best = run_sweep(
                    points, train_point, select="acc", choice=choice, seed=seed, protocol=protocol, resume=resume
                )
                details["runs"] += [{"model": choice.name, "task": task, "setting": setting.label, **r} for r in runs]
                per_model[choice.name].append({"setting": setting.label, **best})
                metrics[f"acc/{choice.name}/{task}/{setting.label}"] = best["acc"]
        for choice in models:
            # at the task's baseline setting (its first): the size the arms are compared at
            sizes = memory_sizes(choice, settings[0], protocol, seed=seed, device=device)
            metrics[f"memory_size/{choice.name}/{task}"] = float(sizes["memory"])
            metrics[f"state_size/{choice.name}/{task}"] = float(sizes["state"])
            details.setdefault("memory_size", {}).setdefault(choice.name, {})[task] = {
                "seq_len": settings[0].seq_len,
                **sizes,
            }
            rows = per_model[choice.name]
            score, score_macro = task_score(rows)
            scores[choice.name][task] = score
            metrics[f"acc/{choice.name}/{task}"] = score
            metrics[f"acc_macro/{choice.name}/{task}"] = score_macro
            details["scores"].setdefault(choice.name, {})[task] = {
                "score": score,
                "best_per_setting": [
                    {k: r[k] for k in ("setting", "acc", "acc_macro", "loss", "lr", "weight_decay")} for r in rows
                ],
            }
    for choice in models:
        metrics[f"acc/{choice.name}/average"] = float(np.mean(list(scores[choice.name].values())))
    details["table"] = [
        {"model": c.name, **{t: scores[c.name][t] for t in protocol.tasks}, "average": metrics[f"acc/{c.name}/average"]}
        for c in models
    ]
    return comparison_result("mad", models, protocol, metrics, details, seed=seed, device=device)
