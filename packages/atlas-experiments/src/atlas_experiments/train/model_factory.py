"""Building, wrapping and (un)wrapping the model for training."""

from __future__ import annotations

import torch

from atlas_experiments.train.config import ModelSpec
from atlas_experiments.train.distributed import DistInfo


def build_model(spec: ModelSpec, vocab_size: int) -> torch.nn.Module:
    """An `atlas_model` causal LM from a preset, its vocabulary taken from the data manifest."""
    from transformers import AutoModelForCausalLM

    import atlas_model  # noqa: F401  (registers the Auto classes)

    return AutoModelForCausalLM.from_config(spec.config(vocab_size))


def wrap(model: torch.nn.Module, info: DistInfo, strategy: str) -> torch.nn.Module:
    """DDP or FSDP2 (one shard unit per block, then the root) when running under torchrun."""
    if not info.enabled:
        return model
    if strategy == "fsdp":
        from torch.distributed.fsdp import fully_shard

        for module in model.modules():
            if getattr(module, "_is_block", False) or type(module).__name__.endswith(("Block", "DecoderLayer")):
                fully_shard(module)
        fully_shard(model)
        return model
    from torch.nn.parallel import DistributedDataParallel

    ids = [info.device.index] if info.device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids)


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    return model.module if hasattr(model, "module") else model


def full_state_dicts(model: torch.nn.Module, optimizer: torch.optim.Optimizer, strategy: str, info: DistInfo):
    """(model state, optimizer state) as full tensors, gathered on every rank for FSDP."""
    if info.enabled and strategy == "fsdp":
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_model_state_dict,
            get_optimizer_state_dict,
        )

        opts = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return get_model_state_dict(model, options=opts), get_optimizer_state_dict(model, optimizer, options=opts)
    return unwrap(model).state_dict(), optimizer.state_dict()


def load_full_state_dicts(model, optimizer, model_state, optim_state, strategy: str, info: DistInfo) -> None:
    if info.enabled and strategy == "fsdp":
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        opts = StateDictOptions(full_state_dict=True)
        set_model_state_dict(model, model_state, options=opts)
        set_optimizer_state_dict(model, optimizer, optim_state, options=opts)
        return
    unwrap(model).load_state_dict(model_state)
    optimizer.load_state_dict(optim_state)
