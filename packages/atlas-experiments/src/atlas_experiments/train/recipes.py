"""The paper's pretraining recipes as named defaults (Section 3.1 and Table 7 of the paper; docs/deviations.md,
"Training recipe").

AdamW (0.9, 0.95), weight decay 0.1, cosine schedule, 0.5M-token batches (2^19 = 524,288), 4K context; peak
learning rates and token budgets per size from Table 7. Warmup is unstated: 2% of the steps. A config selects one
with `recipe: paper-760M` and overrides any key (model preset, data path, micro_batch ...).
"""

from __future__ import annotations

from typing import Any

from atlas_experiments.configio import merge_settings
from atlas_experiments.schema import ConfigError

_PAPER_SIZES = {  # size: (peak lr, training tokens)
    "170M": (3e-3, 15_000_000_000),
    "340M": (1.5e-3, 15_000_000_000),
    "760M": (1.25e-3, 30_000_000_000),
    "1.3B": (7e-4, 100_000_000_000),
}

RECIPES: dict[str, dict[str, Any]] = {
    f"paper-{size}": {
        "model": {"size": size},
        "data": {"seq_len": 4096},
        "global_batch_tokens": 524_288,
        "micro_batch": 8,
        "tokens": tokens,
        "precision": "auto",
        "distributed": "fsdp" if size in ("760M", "1.3B") else "ddp",
        "checkpoint_interval": 1000,
        "eval_interval": 1000,
        "eval_batches": 32,
        "log_interval": 10,
        "optim": {
            "lr": lr,
            "betas": [0.9, 0.95],
            "weight_decay": 0.1,
            "grad_clip": 1.0,
            "warmup_fraction": 0.02,
            "min_lr_ratio": 0.1,
        },
    }
    for size, (lr, tokens) in _PAPER_SIZES.items()
}


def apply_recipe(data: dict[str, Any]) -> dict[str, Any]:
    """`data` over the recipe it names (`merge_settings`). A model size that disagrees with the recipe's is an
    error: the recipe's lr and token budget belong to its size."""
    name = data.pop("recipe", None)
    if name is None:
        return data
    if name not in RECIPES:
        raise ConfigError(f"train.recipe: unknown recipe {name!r} (known: {', '.join(RECIPES)})")
    recipe_size = RECIPES[name]["model"]["size"]
    size = (data.get("model") or {}).get("size", recipe_size)
    if size != recipe_size:
        raise ConfigError(
            f"train.model.size: {size!r} disagrees with recipe {name} (size {recipe_size}); drop one of them or "
            "pick the recipe of that size"
        )
    merged = merge_settings(RECIPES[name], data)
    if "steps" in data:  # an explicit step count replaces the recipe's token budget
        merged.pop("tokens", None)
    return merged
