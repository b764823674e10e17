"""`TrainConfig`: everything `atlas train` needs, typed and validated (errors name the dotted key).

Batch arithmetic: one optimizer step consumes `global_batch_tokens` tokens, made of
world_size x grad_accum micro-batches of `micro_batch` sequences of `data.seq_len` tokens; grad_accum is derived
and must come out a positive integer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from atlas_experiments.schema import ConfigError, build, to_dict

TrainConfigError = ConfigError


@dataclass(frozen=True)
class ModelSpec:
    """Which model: an `atlas_model` preset and size, plus `AtlasConfig` overrides (e.g. vocab_size; a `memory`
    mapping merges into the preset's memory settings). Checked when built, before any job trains: the preset and
    size exist, every override key is an `AtlasConfig` (or, under `memory`, a `MemoryConfig`) field, and the values
    pass the model's own validation; errors name the dotted key (`train.model.overrides.memory.window`)."""

    preset: str
    size: str = "tiny"
    overrides: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        import atlas_model

        if self.preset not in atlas_model.PRESETS:
            known = ", ".join(atlas_model.PRESETS)
            raise ConfigError(f"train.model.preset: unknown preset {self.preset!r} (known: {known})")
        if self.size not in atlas_model.SIZES:
            raise ConfigError(f"train.model.size: unknown size {self.size!r} (known: {', '.join(atlas_model.SIZES)})")
        try:
            atlas_model.check_overrides(self.overrides, "train.model.overrides")
        except atlas_model.AtlasConfigError as err:
            raise ConfigError(str(err)) from err
        self.config()

    def config(self, vocab_size: int | None = None):
        """The `AtlasConfig` this spec names; `vocab_size` (the data's) unless the overrides set one."""
        import atlas_model

        extra = {} if vocab_size is None else {"vocab_size": vocab_size}
        try:
            return atlas_model.AtlasConfig.from_preset(self.preset, size=self.size, **{**extra, **self.overrides})
        except atlas_model.AtlasConfigError as err:
            raise ConfigError(f"train.model ({self.preset}, {self.size}): {err}") from err


@dataclass(frozen=True)
class DataSpec:
    """Prepared shards (`atlas data prepare` output directory) and the training context."""

    path: str
    seq_len: int
    train_split: str = "train"
    val_split: str = "validation"
    verify: bool = True

    def __post_init__(self) -> None:
        if self.seq_len < 1:
            raise ConfigError(f"data.seq_len: expected an int >= 1, got {self.seq_len}")


@dataclass(frozen=True)
class OptimConfig:
    """AdamW with linear warmup and cosine decay to `min_lr_ratio` x peak; weight decay reaches the Linear /
    Embedding weights only (`train/optim.py`)."""

    lr: float = 4e-4
    betas: tuple[float, ...] = (0.9, 0.95)
    eps: float = 1e-8
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    warmup_steps: int | None = None
    warmup_fraction: float = 0.02
    min_lr_ratio: float = 0.1

    def __post_init__(self) -> None:
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ConfigError(f"optim.lr: expected a positive float, got {self.lr}")
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            raise ConfigError(f"optim.betas: expected two floats in [0, 1), got {list(self.betas)}")
        if self.weight_decay < 0:
            raise ConfigError(f"optim.weight_decay: expected >= 0, got {self.weight_decay}")
        if self.grad_clip < 0:
            raise ConfigError(f"optim.grad_clip: expected >= 0 (0 disables clipping), got {self.grad_clip}")
        if not 0 <= self.warmup_fraction < 1:
            raise ConfigError(f"optim.warmup_fraction: expected a float in [0, 1), got {self.warmup_fraction}")
        if self.warmup_steps is not None and self.warmup_steps < 0:
            raise ConfigError(f"optim.warmup_steps: expected >= 0, got {self.warmup_steps}")
        if not 0 <= self.min_lr_ratio <= 1:
            raise ConfigError(f"optim.min_lr_ratio: expected a float in [0, 1], got {self.min_lr_ratio}")


@dataclass(frozen=True)
class TrackingConfig:
    """MLflow tracking. `uri` (or `atlas train --tracking-uri`, which replaces it) None: $MLFLOW_TRACKING_URI, else
    sqlite:///<out>/../mlflow.db (`tracking.resolve_tracking_uri`)."""

    enabled: bool = True
    uri: str | None = None
    experiment: str = "pretrain"
    run_name: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    artifact_checkpoint: bool = False
    # a parent-run record (`atlas track parent`): the run is nested under that run, e.g. an ablation's cells
    parent: str | None = None


@dataclass(frozen=True)
class TrainConfig:
    """A pretraining run. Steps come from `steps` or from the token budget `tokens` (exactly one)."""

    model: ModelSpec
    data: DataSpec
    global_batch_tokens: int
    micro_batch: int
    steps: int | None = None
    tokens: int | None = None
    optim: OptimConfig = field(default_factory=OptimConfig)
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    device: Literal["auto", "cpu", "cuda"] = "auto"
    distributed: Literal["ddp", "fsdp"] = "ddp"
    seed: int = 0
    checkpoint_interval: int = 0
    keep_checkpoints: int = 2
    eval_interval: int = 0
    eval_batches: int = 8
    log_interval: int = 1
    max_consecutive_skips: int = 5
    peak_flops: float | None = None
    tracking: TrackingConfig = field(default_factory=TrackingConfig)

    def __post_init__(self) -> None:
        for key in ("global_batch_tokens", "micro_batch", "keep_checkpoints", "log_interval", "eval_batches"):
            if getattr(self, key) < 1:
                raise ConfigError(f"train.{key}: expected an int >= 1, got {getattr(self, key)}")
        for key in ("checkpoint_interval", "eval_interval", "max_consecutive_skips"):
            if getattr(self, key) < 0:
                raise ConfigError(f"train.{key}: expected an int >= 0, got {getattr(self, key)}")
        if (self.steps is None) == (self.tokens is None):
            raise ConfigError("train.steps: give exactly one of steps and tokens")
        if self.steps is not None and self.steps < 1:
            raise ConfigError(f"train.steps: expected an int >= 1, got {self.steps}")
        if self.tokens is not None and self.tokens < self.global_batch_tokens:
            raise ConfigError(f"train.tokens: budget {self.tokens} is below one global batch")
        if self.global_batch_tokens % (self.micro_batch * self.data.seq_len):
            raise ConfigError(
                f"train.global_batch_tokens: {self.global_batch_tokens} is not a multiple of "
                f"micro_batch x seq_len = {self.micro_batch} x {self.data.seq_len}"
            )

    @property
    def total_steps(self) -> int:
        return self.steps if self.steps is not None else math.ceil(self.tokens / self.global_batch_tokens)

    def grad_accum(self, world_size: int) -> int:
        per_step = self.micro_batch * self.data.seq_len * world_size
        if self.global_batch_tokens % per_step:
            raise ConfigError(
                f"train.global_batch_tokens: {self.global_batch_tokens} is not divisible by "
                f"micro_batch x seq_len x world_size = {per_step}"
            )
        return self.global_batch_tokens // per_step

    @property
    def warmup_steps(self) -> int:
        if self.optim.warmup_steps is not None:
            return min(self.optim.warmup_steps, self.total_steps)
        return int(self.optim.warmup_fraction * self.total_steps)

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        """Build from a mapping; a `recipe` key (see `RECIPES`) supplies defaults that the mapping overrides."""
        from atlas_experiments.train.recipes import apply_recipe

        return build(cls, apply_recipe(dict(data)), "train")

    def replace(self, **changes: Any) -> TrainConfig:
        return replace(self, **changes)
