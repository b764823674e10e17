"""The one AdamW builder and the one warmup + cosine schedule of every training path (`atlas train`, and the
synthetic-task trainer of MQAR / MAD).

Weight decay is chosen by role, not by shape: it applies to the `.weight` of `nn.Linear` and `nn.Embedding`
modules (the backbone's projections, the embeddings, the LM head; a tied weight is one parameter and counted once)
and to nothing else. A shape rule (`dim() >= 2`) also catches tensors whose zero is not a neutral point, and the
paper recipes (`recipes.py`: wd 0.1, 28k-190k steps) sum lr x wd to 2-7, i.e. an unopposed shrink by e^-2 to e^-7
toward that zero, whatever the loss says:
- W_0, the memory's initial weights (and the exp-feature init keys / values, which define the initial first
  layer): not decayed. They are the state every sequence starts from, not a map of the residual stream; the inner
  loop has its own retention (alpha_t) for forgetting, and W_0 -> 0 is the degenerate deep memory whose output
  and inner gradients vanish.
- short causal convs ([C, 4] depthwise filters): not decayed. A 4-tap per-channel filter mixes no features and
  holds well under 1 % of the parameters, so there is nothing to regularise; its scale is the scale of v (and of the
  SiLU inputs of q, k), so decay would act as a pull on activations, as it would on a norm gain.
- LayerNorm / RMSNorm affines (the memory's LN, o_norm, block norms, MAG/MAC branch norms): not decayed; decay
  pulls the gain toward 0, i.e. toward switching the branch off.
- gate projections (the low-rank `LowRankGates.down` / `.up`, both nn.Linear): decayed. They are ordinary
  data-dependent projections of the residual stream, and their zero is meaningful: the gate falls back to its
  constant initial value sigmoid(bias). The gate BIASES (`[n_gates, H]`) are not decayed: their zero is a gate of
  0.5 (eta_max / 2 for eta), not the configured initial value.
- polynomial coefficients a_i (stored through softplus): not decayed; a raw 0 is a_i = log 2 for every i, which
  is not a prior anyone chose.
- temperatures, MAC persistent tokens and any other free nn.Parameter: not decayed (not Linear / Embedding).
Linear biases (e.g. MAD's compression head) are not decayed either.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from atlas_experiments.train.config import OptimConfig

DECAYED_MODULES = (nn.Linear, nn.Embedding)

Named = list[tuple[str, nn.Parameter]]


def decay_split(model: nn.Module) -> tuple[Named, Named]:
    """(decayed, not decayed) trainable parameters of `model` as (name, parameter), each sorted by name."""
    decayed_ids = {id(m.weight) for m in model.modules() if isinstance(m, DECAYED_MODULES)}
    decay: Named = []
    keep: Named = []
    # named_parameters() yields a tied weight once, under its first name
    for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
        if p.requires_grad:
            (decay if id(p) in decayed_ids else keep).append((name, p))
    return decay, keep


def build_optimizer(model: nn.Module, optim: OptimConfig) -> torch.optim.AdamW:
    """AdamW over two groups, decayed first (`decay_split`); both always exist so that optimizer states keep
    their layout when weight_decay is 0."""
    decay, keep = decay_split(model)
    if not decay and not keep:
        raise ValueError(f"build_optimizer: {type(model).__name__} has no trainable parameters")
    groups = [
        {"params": [p for _, p in decay], "weight_decay": optim.weight_decay},
        {"params": [p for _, p in keep], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=optim.lr, betas=tuple(optim.betas), eps=optim.eps)


def warmup_steps(optim: OptimConfig, total_steps: int) -> int:
    """`optim.warmup_steps` (capped at the run) or floor(warmup_fraction x total_steps)."""
    if optim.warmup_steps is not None:
        return min(optim.warmup_steps, total_steps)
    return int(optim.warmup_fraction * total_steps)


def lr_at(step: int, optim: OptimConfig, total_steps: int) -> float:
    """Learning rate of optimizer step `step` (0-based) of a `total_steps` run: linear warmup to `optim.lr`, then
    cosine down to the floor `min_lr_ratio` x `optim.lr`, reached at step `total_steps`."""
    if total_steps < 1:
        raise ValueError(f"lr_at: total_steps must be >= 1, got {total_steps}")
    peak, floor = optim.lr, optim.lr * optim.min_lr_ratio
    warmup = warmup_steps(optim, total_steps)
    if warmup > 0 and step < warmup:
        return peak * (step + 1) / warmup
    span = max(total_steps - warmup, 1)
    progress = min(max(step - warmup, 0) / span, 1.0)
    return floor + 0.5 * (peak - floor) * (1.0 + math.cos(math.pi * progress))


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
