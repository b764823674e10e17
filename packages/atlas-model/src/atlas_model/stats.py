"""Parameter counts of a config without allocating its weights (the model is built on the meta device)."""

import torch

from atlas_model.config import AtlasConfig


def parameter_count(config: AtlasConfig, *, embeddings: bool = True) -> int:
    """Number of parameters of `AtlasForCausalLM(config)` (tied weights once); embeddings=False leaves out the
    input embedding and the LM head."""
    from atlas_model.modeling import AtlasForCausalLM

    with torch.device("meta"):
        model = AtlasForCausalLM(config)
    total = sum(p.numel() for p in model.parameters())
    if not embeddings:
        total -= model.get_input_embeddings().weight.numel()
        if not config.tie_word_embeddings:
            total -= model.get_output_embeddings().weight.numel()
    return total
