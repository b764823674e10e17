"""Shared machinery of `atlas eval mqar | mad | learnability`: how models train and how they are scored (which
models, at what size: `synthetic_models`, re-exported here).

Training: `atlas train`'s AdamW builder and warmup + cosine schedule (`atlas_experiments.train.optim`: decay on
the Linear / Embedding weights only), gradient clipping 1.0,
cross-entropy on the positions whose target is not IGNORE_INDEX; several train sets (MQAR's mixture of settings)
take turns step by step. Scoring: argmax accuracy on the scored positions of held-out sets (micro: over all
answers; macro: the mean per-class recall over the classes present, torchmetrics' default that mad-lab reports).
"""

from __future__ import annotations

import argparse
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from atlas_data.synthetic import IGNORE_INDEX, TokenDataset
from atlas_experiments.evaluation.results import EvalResult, add_output_options
from atlas_experiments.evaluation.synthetic_models import (  # noqa: F401  (re-exported: the commands import here)
    DEEP_MEMORIES,
    MemoryMatch,
    ModelChoice,
    build_lm,
    count_parameters,
    has_deep_memory,
    lm_forward,
    match_memory,
    memory_deviation,
    memory_target,
    model_config,
    parse_models,
    state_size,
    torch_threads,
)
from atlas_experiments.train.config import OptimConfig
from atlas_experiments.train.optim import build_optimizer, lr_at, set_lr

DEFAULT_MODELS = ("atlas", "gated_deltanet", "transformer_pp")
Forward = Callable[[nn.Module, torch.Tensor], torch.Tensor]


# ---------------------------------------------------------------------------------------------------- training


@dataclass(frozen=True)
class TrainSettings:
    """One training run: `steps` AdamW steps of `batch_size` sequences (module docstring)."""

    steps: int
    batch_size: int
    lr: float
    weight_decay: float = 0.0
    warmup_fraction: float = 0.05
    min_lr_ratio: float = 0.0
    grad_clip: float = 1.0
    betas: tuple[float, float] = (0.9, 0.999)
    eval_batch_size: int = 64

    def __post_init__(self) -> None:
        if self.steps < 0 or self.batch_size < 1:
            raise ValueError(f"training: expected steps >= 0 and batch_size >= 1, got {self.steps}, {self.batch_size}")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(f"training: expected a positive lr, got {self.lr}")
        if self.weight_decay < 0:
            raise ValueError(f"training: expected weight_decay >= 0, got {self.weight_decay}")
        self.optim  # noqa: B018  (fails now, naming the key, on bad betas / warmup / floor / clipping)

    @classmethod
    def for_sweep(cls, protocol: Any, **point: float) -> TrainSettings:
        """One sweep point of a task protocol: every field the protocol shares with these settings by name (steps,
        batch size, warmup, clipping, ...), then the point's values (lr, weight_decay)."""
        shared = {f.name: getattr(protocol, f.name) for f in fields(cls) if hasattr(protocol, f.name)}
        return cls(**{**shared, **point})

    @property
    def optim(self) -> OptimConfig:
        """These settings as `atlas train`'s optimizer config (eps and the warmup rounding are `atlas train`'s)."""
        return OptimConfig(
            lr=self.lr,
            betas=tuple(self.betas),
            weight_decay=self.weight_decay,
            grad_clip=self.grad_clip,
            warmup_fraction=self.warmup_fraction,
            min_lr_ratio=self.min_lr_ratio,
        )


class _BatchStream:
    """Index batches over shuffled epochs of a set of `n` sequences (the last partial batch of an epoch is dropped
    unless the set is smaller than a batch). Its position is state (`state` / `load`), so that a resumed run draws
    the batches an uninterrupted one would; every stream of a run shares one generator."""

    def __init__(self, n: int, batch_size: int) -> None:
        self.n, self.batch_size = n, batch_size
        self.order: np.ndarray | None = None
        self.pos = 0

    def next(self, rng: np.random.Generator) -> np.ndarray:
        if self.n <= self.batch_size:
            return rng.permutation(self.n)
        if self.order is None or self.pos + self.batch_size > self.n:
            self.order, self.pos = rng.permutation(self.n), 0
        batch = self.order[self.pos : self.pos + self.batch_size]
        self.pos += self.batch_size
        return batch

    def state(self) -> dict[str, Any]:
        return {"order": None if self.order is None else torch.from_numpy(self.order.copy()), "pos": self.pos}

    def load(self, state: Mapping[str, Any]) -> None:
        order = state["order"]
        self.order = None if order is None else order.numpy()
        self.pos = int(state["pos"])


@dataclass
class FitSnapshot:
    """Where `fit` keeps a resumable snapshot of a run: every `every` steps it writes the model, the optimizer, the
    batch streams, the generator and the losses so far to `path` (temp file, then rename), and a later `fit` with
    the same `key` continues from it, bit for bit as the uninterrupted run. `records` are the caller's lists that
    grow with the run (a learning curve): saved with it and refilled in place on resume. A snapshot whose `key`
    differs (another model, lr, seed or protocol) is refused with its path."""

    path: Path
    every: int
    key: str
    records: dict[str, list[Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        if self.every < 1:
            raise ValueError(f"snapshot {self.path}: expected every >= 1 step, got {self.every}")

    def save(self, state: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        torch.save({**state, "key": self.key, "records": self.records}, tmp)
        os.replace(tmp, self.path)

    def load(self) -> dict[str, Any] | None:
        if not self.path.exists():
            return None
        try:
            state = torch.load(self.path, map_location="cpu", weights_only=True)
        except Exception as exc:  # a truncated or foreign file: never resume from it silently
            raise ValueError(f"snapshot {self.path}: unreadable ({exc}); delete it to start the run again") from exc
        if state.get("key") != self.key:
            raise ValueError(
                f"snapshot {self.path}: written by another run (key {state.get('key')!r}, this run {self.key!r}); "
                "delete it or resume in another folder"
            )
        for name, values in state["records"].items():
            self.records.setdefault(name, [])[:] = values
        return state


def token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1), ignore_index=IGNORE_INDEX)


def fit(
    module: nn.Module,
    train_sets: Sequence[TokenDataset],
    settings: TrainSettings,
    *,
    forward: Forward = lm_forward,
    seed: int = 0,
    device: torch.device | str = "cpu",
    progress: bool = True,
    desc: str = "train",
    every: int = 0,
    on_step: Callable[[int, nn.Module], None] | None = None,
    snapshot: FitSnapshot | None = None,
) -> dict[str, Any]:
    """Train `module` in place for `settings.steps` steps; the train sets take turns. Returns a summary (first and
    last-10 % losses, non-finite steps skipped, seconds). With `every` > 0, `on_step(step, module)` is called after
    every `every`-th step and after the last (a learning curve); its time is not counted in `seconds`. With a
    `snapshot`, the run continues from the snapshot's step when one exists and leaves one every `snapshot.every`
    steps (after that step's `on_step`), so a killed run resumes where it stood."""
    from tqdm.auto import tqdm

    device = torch.device(device)
    optim = settings.optim
    optimizer = build_optimizer(module, optim)
    rng = np.random.default_rng(seed)
    streams = [_BatchStream(len(d), settings.batch_size) for d in train_sets]
    tensors = [(torch.from_numpy(d.inputs), torch.from_numpy(d.targets)) for d in train_sets]
    module.train()
    losses: list[float] = []
    skipped = first = 0
    elapsed = 0.0
    saved = snapshot.load() if snapshot is not None else None
    if saved is not None:
        module.load_state_dict(saved["module"])
        optimizer.load_state_dict(saved["optimizer"])
        rng.bit_generator.state = saved["rng"]
        torch.set_rng_state(saved["torch_rng"])
        for stream, state in zip(streams, saved["streams"], strict=True):
            stream.load(state)
        losses, skipped, first = list(saved["losses"]), int(saved["skipped"]), int(saved["step"])
        elapsed = float(saved["seconds"])
    start = time.perf_counter() - elapsed
    bar = tqdm(range(first, settings.steps), desc=desc, disable=not progress, leave=False, mininterval=1.0)
    for step in bar:
        which = step % len(train_sets)
        idx = torch.from_numpy(streams[which].next(rng))
        x, y = (t[idx].to(device) for t in tensors[which])
        if not bool((y != IGNORE_INDEX).any()):
            continue
        set_lr(optimizer, lr_at(step, optim, settings.steps))
        loss = token_loss(forward(module, x), y)
        if not torch.isfinite(loss):
            skipped += 1
            optimizer.zero_grad(set_to_none=True)
            continue
        loss.backward()
        if settings.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(module.parameters(), settings.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
        if step % 10 == 0:
            bar.set_postfix(loss=f"{losses[-1]:.3f}", refresh=False)
        if on_step is not None and every > 0 and ((step + 1) % every == 0 or step + 1 == settings.steps):
            paused = time.perf_counter()
            on_step(step + 1, module)
            module.train()
            start += time.perf_counter() - paused
        if snapshot is not None and (step + 1) % snapshot.every == 0 and step + 1 < settings.steps:
            paused = time.perf_counter()
            snapshot.save({
                "step": step + 1, "module": module.state_dict(), "optimizer": optimizer.state_dict(),
                "rng": rng.bit_generator.state, "torch_rng": torch.get_rng_state(),
                "streams": [st.state() for st in streams], "losses": losses, "skipped": skipped,
                "seconds": paused - start,
            })  # fmt: skip
            start += time.perf_counter() - paused
    tail = losses[-max(1, len(losses) // 10) :] if losses else []
    return {
        "steps": settings.steps,
        "loss_first": losses[0] if losses else None,
        "loss_last": float(np.mean(tail)) if tail else None,
        "nonfinite_steps": skipped,
        "seconds": round(time.perf_counter() - start, 3),
    }


@torch.no_grad()
def evaluate(
    module: nn.Module,
    data: TokenDataset,
    *,
    forward: Forward = lm_forward,
    batch_size: int = 64,
    device: torch.device | str = "cpu",
) -> dict[str, float]:
    """Accuracy (micro and macro), loss and answer count of `module` on the scored positions of `data`."""
    device = torch.device(device)
    was_training = module.training
    module.eval()
    correct = total = 0
    loss_sum = 0.0
    hits = np.zeros(data.vocab_size, dtype=np.int64)
    counts = np.zeros(data.vocab_size, dtype=np.int64)
    for start in range(0, len(data), batch_size):
        x = torch.from_numpy(data.inputs[start : start + batch_size]).to(device)
        y = torch.from_numpy(data.targets[start : start + batch_size]).to(device)
        mask = y != IGNORE_INDEX
        if not bool(mask.any()):
            continue
        logits = forward(module, x)[mask].float()
        gold = y[mask]
        pred = logits.argmax(-1)
        correct += int((pred == gold).sum())
        total += int(gold.numel())
        loss_sum += float(F.cross_entropy(logits, gold, reduction="sum"))
        g = gold.cpu().numpy()
        counts += np.bincount(g, minlength=data.vocab_size)[: data.vocab_size]
        hits += np.bincount(g[(pred == gold).cpu().numpy()], minlength=data.vocab_size)[: data.vocab_size]
    module.train(was_training)
    present = counts > 0
    return {
        "acc": correct / total if total else float("nan"),
        "acc_macro": float(np.mean(hits[present] / counts[present])) if present.any() else float("nan"),
        "loss": loss_sum / total if total else float("nan"),
        "answers": total,
    }


def best_run(runs: Sequence[dict[str, Any]], score: str) -> dict[str, Any]:
    """The run of a sweep with the highest `score`; the earlier run on a tie. A run without a score (NaN: a
    diverged run, or no answer scored) never wins; when no run has one, the first stands."""
    valid = [r for r in runs if not math.isnan(r[score])]
    return max(valid, key=lambda r: r[score]) if valid else runs[0]


def comparison_result(
    task: str,
    models: Sequence[ModelChoice],
    protocol: Any,
    metrics: dict[str, float],
    details: dict[str, Any],
    *,
    seed: int,
    device: torch.device,
) -> EvalResult:
    """The result of a comparison of `models` on a trained task (MQAR, MAD): the protocol as run (its `describe()`
    plus seed, device and every arm) and its `deviations()`; NaN metrics (no scored answer) are left out."""
    return EvalResult(
        task=task,
        model=",".join(c.name for c in models),
        metrics={k: v for k, v in metrics.items() if v == v},
        protocol={
            **protocol.describe(),
            "seed": seed,
            "device": str(device),
            "models": [c.describe() for c in models],
        },
        deviations=protocol.deviations(),
        details=details,
    )


# ------------------------------------------------------------------------------------------------ CLI plumbing


def parse_list(text: str | Sequence[Any] | None, kind: type = int, name: str = "list") -> list[Any]:
    """'1,2,3' (or [1, 2, 3], from a config file) -> [1, 2, 3] (ValueError naming the option on a bad item)."""
    if isinstance(text, list | tuple):
        text = ",".join(map(str, text))
    if text is None or str(text).strip() == "":
        return []
    try:
        return [kind(s.strip()) for s in str(text).split(",") if s.strip()]
    except ValueError as exc:
        raise ValueError(f"{name}: cannot parse {text!r} as a comma-separated list of {kind.__name__}") from exc


def parse_pairs(text: str, name: str, form: str) -> tuple[tuple[int, int], ...]:
    """'64x4,128x8' -> ((64, 4), (128, 8)); `form` ("TxP like 64x4") describes an item in the error naming `name`."""
    out = []
    for item in parse_list(text, str, name):
        try:
            a, b = (int(v) for v in item.lower().split("x"))
        except ValueError as exc:
            raise ValueError(f"{name}: expected {form}, got {item!r}") from exc
        out.append((a, b))
    return tuple(out)


def add_run_options(p: argparse.ArgumentParser, default_out: str) -> None:
    """Options every synthetic command shares: device, seed, threads, output and tracking."""
    g = p.add_argument_group("run")
    g.add_argument("--seed", type=int, default=0, help="seeds the data, the model inits and the batch order")
    g.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda, cuda:1 ...")
    g.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's; 1 is fastest on a busy CPU)")
    add_output_options(p, default_out)


def figure_path(out: str | Path, suffix: str = "") -> Path:
    """`<out stem><suffix>.png` next to the results JSON."""
    out = Path(out)
    return out.with_name(f"{out.stem}{suffix}.png")


def finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)
