"""Shared machinery of `atlas eval mqar | mad | learnability`: which models, how they train, how they are scored.

Models: `--models atlas,gated_deltanet,transformer_pp,my_model.yaml`. A name is an `atlas_model` preset (at
`--size`, default tiny); a file (YAML/JSON) holds `{preset, size?, overrides?, name?}`, a training config with a
`model:` section, or a saved Hugging Face `config.json` of an Atlas model. The command's width / depth / heads
apply to every model first, then a file's own overrides, then the task's vocabulary.

Training: `atlas train`'s AdamW builder and warmup + cosine schedule (`atlas_experiments.train.optim`: decay on
the Linear / Embedding weights only), gradient clipping 1.0,
cross-entropy on the positions whose target is not IGNORE_INDEX; several train sets (MQAR's mixture of settings)
take turns step by step. Scoring: argmax accuracy on the scored positions of held-out sets (micro: over all
answers; macro: the mean per-class recall over the classes present, torchmetrics' default that mad-lab reports).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
import math
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from atlas_data.synthetic import IGNORE_INDEX, TokenDataset
from atlas_experiments.evaluation.results import EvalResult, track_result, write_result
from atlas_experiments.train.config import OptimConfig
from atlas_experiments.train.optim import build_optimizer, lr_at, set_lr

log = logging.getLogger("atlas.eval")

DEFAULT_MODELS = ("atlas", "gated_deltanet", "transformer_pp")
Forward = Callable[[nn.Module, torch.Tensor], torch.Tensor]


# ------------------------------------------------------------------------------------------------------ models


@dataclass(frozen=True)
class ModelChoice:
    """One model of a comparison: a preset at a size plus `AtlasConfig` overrides; `name` labels its metrics."""

    name: str
    preset: str
    size: str = "tiny"
    overrides: Mapping[str, Any] = field(default_factory=dict)
    source: str = "preset"

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "preset": self.preset,
            "size": self.size,
            "overrides": dict(self.overrides),
            "source": self.source,
        }


def _choice_from_file(path: Path, size: str) -> ModelChoice:
    from dataclasses import fields

    import atlas_model
    from atlas_experiments.configio import load_mapping

    data = load_mapping(path)
    if isinstance(data.get("model"), dict):  # an `atlas train` config
        data = data["model"]
    if data.get("model_type") == atlas_model.AtlasConfig.model_type:  # a saved HF config.json
        known = {f.name for f in fields(atlas_model.AtlasConfig)} - {"preset", "size"}
        overrides = {k: v for k, v in data.items() if k in known and v is not None}
        return ModelChoice(path.stem, data.get("preset", "atlas"), data.get("size", size), overrides, str(path))
    if "preset" not in data:
        raise ValueError(f"model config {path}: expected a 'preset' key (or a train config / HF config.json)")
    unknown = sorted(set(data) - {"preset", "size", "overrides", "name"})
    if unknown:
        raise ValueError(f"model config {path}: unknown key(s) {', '.join(unknown)}")
    overrides = data.get("overrides") or {}
    if not isinstance(overrides, dict):
        raise ValueError(f"model config {path}: 'overrides' must be a mapping")
    return ModelChoice(
        str(data.get("name") or path.stem), str(data["preset"]), str(data.get("size", size)), overrides, str(path)
    )


def parse_models(text: str, size: str = "tiny") -> list[ModelChoice]:
    """`--models`: comma-separated preset names and/or model config files (module docstring)."""
    import atlas_model

    out: list[ModelChoice] = []
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        path = Path(item)
        if path.suffix in (".yaml", ".yml", ".json") or path.is_file():
            if not path.is_file():
                raise FileNotFoundError(f"--models: model config not found: {path}")
            choice = _choice_from_file(path, size)
        elif item in atlas_model.PRESETS:
            choice = ModelChoice(item, item, size)
        else:
            raise ValueError(f"--models: {item!r} is neither a preset ({', '.join(atlas_model.PRESETS)}) nor a file")
        if choice.preset not in atlas_model.PRESETS:
            raise ValueError(f"--models: unknown preset {choice.preset!r} in {item}")
        names = {c.name for c in out}
        if choice.name in names:
            choice = dataclasses.replace(choice, name=f"{choice.name}#{len(out)}")
        out.append(choice)
    if not out:
        raise ValueError("--models: no model given")
    return out


DEEP_MEMORIES = ("mlp", "gated_mlp")


def has_deep_memory(preset: str) -> bool:
    from atlas_model import PRESET_TABLE

    memory = PRESET_TABLE[preset].memory
    return memory is not None and memory.get("memory") in DEEP_MEMORIES


def model_config(
    choice: ModelChoice,
    *,
    vocab_size: int,
    width: int | None = None,
    layers: int | None = None,
    heads: int | None = None,
    memory_head_dim: int | None = None,
    memory_expansion: int | None = None,
):
    """The `AtlasConfig` of `choice` for a task: width/depth/heads of the command, the choice's own overrides,
    then the task vocabulary. A new width also sets the SwiGLU hidden size to 3 x width (the tiny size's ratio).
    `memory_head_dim` / `memory_expansion` shrink the inner memory of the deep-memory models only (MLP and gated-MLP
    memories: Atlas, OmegaNet, Titans, DLA, Dot, ...; heads = width / head dim); linear memories and attention keep
    their heads."""
    import atlas_model

    overrides: dict[str, Any] = {}
    if width is not None:
        overrides.update(hidden_size=width, intermediate_size=3 * width)
    if layers is not None:
        overrides["num_hidden_layers"] = layers
    if heads is not None:
        overrides["num_attention_heads"] = heads
    if has_deep_memory(choice.preset):
        if memory_head_dim is not None:
            d = choice.overrides.get("hidden_size", width or atlas_model.SIZE_TABLE[choice.size].hidden_size)
            if d % memory_head_dim:
                raise ValueError(f"--memory-head-dim: width {d} is not a multiple of {memory_head_dim}")
            overrides["num_memory_heads"] = d // memory_head_dim
        if memory_expansion is not None:
            overrides["memory"] = {"expansion": memory_expansion}
    for key, value in choice.overrides.items():
        if key == "memory" and isinstance(value, dict):
            overrides["memory"] = {**overrides.get("memory", {}), **value}
        else:
            overrides[key] = value
    overrides["vocab_size"] = vocab_size
    return atlas_model.AtlasConfig.from_preset(choice.preset, size=choice.size, **overrides)


def memory_deviation(head_dim: int | None, expansion: int | None) -> list[str]:
    """The deviations entry of the deep-memory reductions (empty when the presets' memories are kept)."""
    if head_dim is None and expansion is None:
        return []
    parts = []
    if head_dim is not None:
        parts.append(f"memory head dim {head_dim}")
    if expansion is not None:
        parts.append(f"inner-MLP expansion {expansion}")
    return [
        "deep memories (Atlas, OmegaNet, Titans, ...) shrunk for CPU: "
        + ", ".join(parts)
        + " (presets: memory heads = attention heads, expansion 4)"
    ]


def build_lm(config, seed: int, device: torch.device) -> nn.Module:
    from transformers import AutoModelForCausalLM

    import atlas_model  # noqa: F401  (registers the Auto classes)

    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config).to(device)


def lm_forward(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return model(input_ids=x, use_cache=False).logits


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@torch.no_grad()
def state_size(model: nn.Module, seq_len: int, vocab_size: int, device: torch.device) -> dict[str, int]:
    """Floats a model carries per sequence after reading `seq_len` tokens (batch 1).

    `state`: the whole decoding cache (memory weights, momentum, Omega-window halo, conv states, KV entries);
    `memory`: the memory weights W_t (MemoryState.weights) plus attention keys/values, the "memory size" that
    Figure 7 of the paper plots accuracy against.
    """
    from atlas_kernels import MemoryState
    from atlas_model.cache import iter_tensors

    was_training = model.training
    model.eval()
    x = (torch.arange(seq_len, device=device) % vocab_size)[None]
    out = model(input_ids=x, use_cache=True)
    model.train(was_training)
    cache = out.cache if hasattr(out, "cache") else None
    layers = getattr(cache, "layers", None) or []
    total = sum(t.numel() for t in iter_tensors(layers))

    def memory_floats(obj: Any, key: str = "") -> int:
        if isinstance(obj, MemoryState):
            return sum(t.numel() for t in obj.weights.values())
        if isinstance(obj, dict):
            return sum(memory_floats(v, str(k)) for k, v in obj.items())
        if isinstance(obj, list | tuple):
            return sum(memory_floats(v, key) for v in obj)
        if key.startswith("conv"):
            return 0
        return sum(t.numel() for t in iter_tensors(obj))

    return {"state": int(total), "memory": int(sum(memory_floats(layer) for layer in layers))}


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


def _batches(data: TokenDataset, batch_size: int, rng: np.random.Generator) -> Iterator[np.ndarray]:
    """Index batches over shuffled epochs of `data` (the last partial batch of an epoch is dropped unless the set
    is smaller than a batch)."""
    n = len(data)
    while True:
        order = rng.permutation(n)
        if n <= batch_size:
            yield order
            continue
        for start in range(0, n - batch_size + 1, batch_size):
            yield order[start : start + batch_size]


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
) -> dict[str, Any]:
    """Train `module` in place for `settings.steps` steps; the train sets take turns. Returns a summary (first and
    last-10 % losses, non-finite steps skipped, seconds)."""
    from tqdm.auto import tqdm

    device = torch.device(device)
    optim = settings.optim
    optimizer = build_optimizer(module, optim)
    rng = np.random.default_rng(seed)
    streams = [_batches(d, settings.batch_size, rng) for d in train_sets]
    tensors = [(torch.from_numpy(d.inputs), torch.from_numpy(d.targets)) for d in train_sets]
    module.train()
    losses: list[float] = []
    skipped = 0
    start = time.perf_counter()
    bar = tqdm(range(settings.steps), desc=desc, disable=not progress, leave=False, mininterval=1.0)
    for step in bar:
        which = step % len(train_sets)
        idx = torch.from_numpy(next(streams[which]))
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


# ------------------------------------------------------------------------------------------------ CLI plumbing


def parse_list(text: str | None, kind: type = int, name: str = "list") -> list[Any]:
    """'1,2,3' -> [1, 2, 3] (ValueError naming the option on a bad item)."""
    if text is None or str(text).strip() == "":
        return []
    try:
        return [kind(s.strip()) for s in str(text).split(",") if s.strip()]
    except ValueError as exc:
        raise ValueError(f"{name}: cannot parse {text!r} as a comma-separated list of {kind.__name__}") from exc


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {name}: CUDA is not available on this machine")
    return device


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run with `n` intra-op CPU threads (restored afterwards); None keeps torch's setting."""
    if not n:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def add_run_options(p: argparse.ArgumentParser, default_out: str) -> None:
    """Options every synthetic command shares: device, seed, threads, output and tracking."""
    g = p.add_argument_group("run")
    g.add_argument("--seed", type=int, default=0, help="seeds the data, the model inits and the batch order")
    g.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda, cuda:1 ...")
    g.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's; 1 is fastest on a busy CPU)")
    o = p.add_argument_group("output")
    o.add_argument("--out", default=default_out, help=f"results JSON (figures go next to it; default {default_out})")
    o.add_argument("--tracking-uri", help="MLflow URI (default $MLFLOW_TRACKING_URI or sqlite next to --out)")
    o.add_argument("--experiment", default="eval", help="MLflow experiment (default eval)")
    o.add_argument("--no-track", action="store_true", help="write the JSON only, no MLflow run")
    o.add_argument("--no-progress", action="store_true", help="no progress bars")


def finish(result: EvalResult, args: argparse.Namespace, artifacts: Sequence[Path] = ()) -> int:
    """Write the results JSON, log the MLflow run (unless --no-track), print where things went."""
    out = write_result(result, args.out)
    if not args.no_track:
        os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
        run_id = track_result(
            result,
            uri=args.tracking_uri,
            results_root=out.parent,
            experiment=args.experiment,
            run_name=f"{result.task}:{result.model}",
            artifact=out,
        )
        if run_id is None:
            log.warning("MLflow tracking unavailable; %s is the record", out)
        else:
            print(f"mlflow run: {run_id}")
    for path in artifacts:
        print(f"figure: {path}")
    print(f"results: {out}")
    return 0


def figure_path(out: str | Path, suffix: str = "") -> Path:
    """`<out stem><suffix>.png` next to the results JSON."""
    out = Path(out)
    return out.with_name(f"{out.stem}{suffix}.png")


def finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)
