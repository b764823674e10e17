"""From counted FLOPs and bytes to projected GPU time: one training job's GPU-hours and the Slurm runtime it
requests (docs/costs.md).

The projection is a roofline of the eager step: a job needs at least its FLOPs at the stated model FLOP utilisation
(MFU) of the GPU's bf16 matmul peak (its float64 GEMM FLOPs at the float64 peak), and, since eager PyTorch runs
every call as its own kernel, at least its unfused bytes at the memory bandwidth; the larger of the two is the
estimate. Launch overhead (the memory ops' small calls in sequence, benchmarks/op_counts.md) is not in it, so
measured GPU rows, where they exist, are the better guide for the memory ops.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass
from typing import Any

from atlas_experiments.cost.count import StepCount, Tally, count_step

MIN_RUNTIME_MINUTES = 10


def runtime_minutes(gpu_hours: float, gpus: int, margin: float) -> int:
    """The Slurm runtime a job of `gpu_hours` requests on `gpus` GPUs: wall time x margin, at least 10 minutes."""
    return max(MIN_RUNTIME_MINUTES, math.ceil(gpu_hours / max(1, gpus) * 60 * margin))


@dataclass(frozen=True)
class GpuAssumptions:
    """The machine a projection is for.

    Defaults: an H200, whose measured dense bf16 matmul roof is 675 TFLOP/s (benchmarks/gpu/, 2026-11-30),
    nominal float64 tensor-core peak 67 TFLOP/s (the vendor's figure, not measured here) and nominal HBM bandwidth
    4.8 TB/s; 40% MFU, a figure well-tuned dense Transformer training reaches and the memory ops do not yet
    (0.1-0.3% of the roof measured); 1.5x margin on requested runtimes."""

    peak_tflops: float = 675.0
    mfu: float = 0.4
    hbm_tbps: float = 4.8
    margin: float = 1.5
    fp64_tflops: float = 67.0

    def __post_init__(self) -> None:
        for name in ("peak_tflops", "hbm_tbps", "fp64_tflops"):
            if not getattr(self, name) > 0:
                raise ValueError(f"cost.{name}: must be > 0, got {getattr(self, name)!r}")
        if not 0 < self.mfu <= 1:
            raise ValueError(f"cost.mfu: must be in (0, 1], got {self.mfu!r}")
        if not self.margin >= 1:
            raise ValueError(f"cost.margin: must be >= 1, got {self.margin!r}")


@dataclass(frozen=True)
class JobSpec:
    """A pretraining job as the cost model sees it: the model, its context and its token budget."""

    name: str
    preset: str
    size: str
    overrides: dict[str, Any]
    seq_len: int
    tokens: int

    def key(self) -> str:
        """A hash of everything that sets the cost: a table row is stale when its key differs."""
        fields = {k: v for k, v in asdict(self).items() if k != "name"}
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]

    @classmethod
    def from_train_config(cls, name: str, data: dict[str, Any]) -> JobSpec:
        """From a TrainConfig mapping (what `atlas train --config` reads; a `recipe` is resolved)."""
        from atlas_experiments.train.config import ModelSpec
        from atlas_experiments.train.recipes import apply_recipe

        merged = apply_recipe(dict(data))
        model = merged.get("model") or {}
        if "preset" not in model:
            raise ValueError(f"{name}: train.model.preset is missing")
        spec = ModelSpec(model["preset"], model.get("size", "tiny"), dict(model.get("overrides") or {}))
        seq_len = (merged.get("data") or {}).get("seq_len")
        if not isinstance(seq_len, int) or seq_len < 1:
            raise ValueError(f"{name}: train.data.seq_len must be a positive integer, got {seq_len!r}")
        tokens = merged.get("tokens")
        if tokens is None:
            steps, batch = merged.get("steps"), merged.get("global_batch_tokens")
            if not isinstance(steps, int) or not isinstance(batch, int):
                raise ValueError(f"{name}: train.tokens, or train.steps and train.global_batch_tokens, are needed")
            tokens = steps * batch
        return cls(name, spec.preset, spec.size, spec.overrides, seq_len, int(tokens))


@dataclass(frozen=True)
class JobCost:
    """Per-token counts of one job's model and its projection on `gpus` GPUs."""

    job: JobSpec
    key: str
    layers: int
    per_token: Tally  # the whole model, fwd + bwd
    layer_per_token: Tally  # one decoder layer
    gpu_hours: float
    compute_hours: float
    bandwidth_hours: float

    def wall_hours(self, gpus: int) -> float:
        return self.gpu_hours / max(1, gpus)

    def runtime_minutes(self, gpus: int, assumptions: GpuAssumptions) -> int:
        """The Slurm runtime a job of this cost requests on `gpus` GPUs (`runtime_minutes`)."""
        return runtime_minutes(self.gpu_hours, gpus, assumptions.margin)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.job.name,
            "key": self.key,
            "job": asdict(self.job),
            "layers": self.layers,
            "per_token": asdict(self.per_token),
            "layer_per_token": asdict(self.layer_per_token),
            "gpu_hours": self.gpu_hours,
            "compute_hours": self.compute_hours,
            "bandwidth_hours": self.bandwidth_hours,
        }


def compute_seconds_per_token(per_token: Tally, assumptions: GpuAssumptions) -> float:
    """GPU seconds of one token's FLOPs at the stated MFU: float64 GEMMs at the float64 peak, the rest at bf16's."""
    fast = (per_token.flops - per_token.gemm_flops_fp64) / (assumptions.peak_tflops * 1e12)
    return (fast + per_token.gemm_flops_fp64 / (assumptions.fp64_tflops * 1e12)) / assumptions.mfu


def project(job: JobSpec, assumptions: GpuAssumptions, step: StepCount | None = None) -> JobCost:
    """Count `job`'s model (or use `step`, a count of it) and project its GPU-hours."""
    from atlas_experiments.train.config import ModelSpec

    config = ModelSpec(job.preset, job.size, dict(job.overrides)).config()
    step = step if step is not None else count_step(config, job.seq_len)
    layers = config.num_hidden_layers
    layer = step.layer.scaled(1 / step.tokens)
    total = step.rest.scaled(1 / step.tokens)
    total.add(layer.scaled(layers))
    compute_s = job.tokens * compute_seconds_per_token(total, assumptions)
    bandwidth_s = job.tokens * total.bytes_unfused / (assumptions.hbm_tbps * 1e12)
    return JobCost(
        job=job,
        key=job.key(),
        layers=layers,
        per_token=total,
        layer_per_token=layer,
        gpu_hours=max(compute_s, bandwidth_s) / 3600,
        compute_hours=compute_s / 3600,
        bandwidth_hours=bandwidth_s / 3600,
    )
