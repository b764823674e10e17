"""The Llama-style model around the token mixers: blocks, `AtlasModel`, `AtlasForCausalLM`.

x = embed(ids)
for each block:  x = x + Mixer_j(RMSNorm(x)) for each of the block's mixers;  x = x + SwiGLU(RMSNorm(x))
logits = lm_head(RMSNorm(x))
"""

import torch
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast

from atlas_model.cache import AtlasCache
from atlas_model.config import AtlasConfig
from atlas_model.layers import (
    Attention,
    LowRankGates,
    MACMixer,
    MAGMixer,
    MemoryLayer,
    MemoryParameters,
    ShortConvolution,
    StepContext,
    SwiGLU,
)
from atlas_model.outputs import lm_output, model_output, output_cache


def build_mixers(config: AtlasConfig) -> list[tuple[str, nn.Module]]:
    """The (name, module) token mixers of one block, applied in order, each with its own pre-norm and residual."""
    d, heads, theta = config.hidden_size, config.num_attention_heads, config.rope_theta
    match config.mixer:
        case "memory":
            return [("memory", MemoryLayer(config))]
        case "attention":
            return [("attention", Attention(d, heads, theta, window=None))]
        case "swa":
            return [("swa", Attention(d, heads, theta, window=config.sliding_window))]
        case "mag":
            return [("mag", MAGMixer(config))]
        case "mal":
            return [("memory", MemoryLayer(config)), ("swa", Attention(d, heads, theta, window=config.sliding_window))]
        case "mac":
            return [("mac", MACMixer(config))]
    raise ValueError(f"mixer: unknown {config.mixer!r}")  # AtlasConfig validates it; kept for type checkers


class AtlasBlock(GradientCheckpointingLayer):
    """Pre-norm residual block: the mixer(s) of `config.mixer`, then a SwiGLU MLP."""

    def __init__(self, config: AtlasConfig, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        mixers = build_mixers(config)
        self.mixer_names = [name for name, _ in mixers]
        self.mixers = nn.ModuleList(module for _, module in mixers)
        self.mixer_norms = nn.ModuleList(nn.RMSNorm(config.hidden_size, eps=config.rms_norm_eps) for _ in mixers)
        self.mlp_norm = nn.RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.mlp = SwiGLU(config.hidden_size, config.intermediate_size)

    def forward(self, hidden_states: torch.Tensor, ctx: StepContext, cache: dict | None = None) -> torch.Tensor:
        """hidden_states [B, T, d] -> [B, T, d]; `cache` is this block's entry of an `AtlasCache` (or None)."""
        for name, norm, mixer in zip(self.mixer_names, self.mixer_norms, self.mixers):
            store = None if cache is None else cache.setdefault(name, {})
            hidden_states = hidden_states + mixer(norm(hidden_states), ctx, store)
        return hidden_states + self.mlp(self.mlp_norm(hidden_states))


class AtlasPreTrainedModel(PreTrainedModel):
    config_class = AtlasConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules = ["AtlasBlock"]
    # The cache holds a recurrent state that cannot be rolled back (no assisted decoding).
    _is_stateful = True

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """Linear / embedding N(0, initializer_range), norms 1 (base class); the modules of this package reset
        their own parameters with `transformers.initialization`, which skips weights loaded from a checkpoint."""
        super()._init_weights(module)
        if isinstance(module, ShortConvolution | LowRankGates | MemoryParameters | MACMixer):
            module.reset_parameters()  # their own parameters only; guarded against re-initialising loaded weights


class AtlasModel(AtlasPreTrainedModel):
    """Embeddings, blocks and the final norm; returns hidden states (and the cache)."""

    def __init__(self, config: AtlasConfig) -> None:
        super().__init__(config)
        # No padding_idx: padding is masked by attention_mask, and pad is often eos, whose embedding must train.
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(AtlasBlock(config, i) for i in range(config.num_hidden_layers))
        self.norm = nn.RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.gradient_checkpointing = False
        self.post_init()

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        cache: AtlasCache | None = None,
        use_cache: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        past_key_values: AtlasCache | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPast | tuple:
        """Run the blocks over T new tokens.

        Args:
            input_ids: [B, T] token ids (or `inputs_embeds` [B, T, d]).
            attention_mask: [B, T] or [B, past + T], 1 for tokens and 0 for padding (left padding for batched
                generation, right padding for scoring). The last T columns belong to the new tokens.
            cache: an `AtlasCache` from a previous call to continue (prefill in pieces, decoding); a new one is
                created when `use_cache` and none is given. `past_key_values` is accepted as an alias.
            use_cache: return the cache (default: `config.use_cache` outside training).
        """
        cache = _resolve_cache(cache, past_key_values)
        if use_cache is None:
            use_cache = self.config.use_cache and not self.training
        output_hidden_states = (
            output_hidden_states if output_hidden_states is not None else self.config.output_hidden_states
        )
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("input_ids / inputs_embeds: pass exactly one of them")

        x = self.embed_tokens(input_ids) if inputs_embeds is None else inputs_embeds
        if use_cache and cache is None:
            cache = AtlasCache(self.config.num_hidden_layers)
        if cache is not None and not isinstance(cache, AtlasCache):
            raise TypeError(f"cache: expected an AtlasCache, got {type(cache).__name__}")
        start = cache.get_seq_length() if cache is not None else 0
        ctx = StepContext(start, x.shape[1], _padding_mask(attention_mask, x.shape[:2]))

        hidden = [x] if output_hidden_states else None
        for i, block in enumerate(self.layers):
            x = block(x, ctx=ctx, cache=None if cache is None else cache.layers[i])
            if hidden is not None:
                hidden.append(x)
        x = self.norm(x)
        if cache is not None:
            cache.seen_tokens += ctx.length
        out_cache = cache if use_cache else None
        hidden_states = tuple(hidden) if hidden is not None else None
        if not return_dict:
            return tuple(v for v in (x, out_cache, hidden_states) if v is not None)
        return model_output(x, out_cache, hidden_states)


class AtlasForCausalLM(AtlasPreTrainedModel, GenerationMixin):
    """`AtlasModel` with a language-modelling head; `generate()` decodes with an `AtlasCache`."""

    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config: AtlasConfig) -> None:
        super().__init__(config)
        self.model = AtlasModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        # generate() must not build a DynamicCache: the model creates its own AtlasCache on the first forward.
        return False

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        cache: AtlasCache | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        past_key_values: AtlasCache | None = None,
        **kwargs,
    ) -> CausalLMOutputWithPast | tuple:
        """Logits [B, T, V] (the last `logits_to_keep` positions when > 0) and, with `labels`, the shifted
        next-token cross-entropy. Other arguments as `AtlasModel.forward`."""
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            inputs_embeds=inputs_embeds,
            cache=_resolve_cache(cache, past_key_values),
            use_cache=use_cache,
            output_hidden_states=output_hidden_states,
            return_dict=True,
        )
        h = out.last_hidden_state
        if isinstance(logits_to_keep, int):
            h = h[:, -logits_to_keep:] if logits_to_keep > 0 else h
        else:
            h = h[:, logits_to_keep]
        logits = self.lm_head(h)
        loss = None
        if labels is not None:
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **kwargs)
        if not return_dict:
            rest = tuple(v for v in (output_cache(out), out.hidden_states) if v is not None)
            return ((loss,) if loss is not None else ()) + (logits,) + rest
        return lm_output(loss, logits, output_cache(out), out.hidden_states)


def _resolve_cache(cache: AtlasCache | None, past_key_values: AtlasCache | None) -> AtlasCache | None:
    if cache is not None and past_key_values is not None and cache is not past_key_values:
        raise ValueError("cache / past_key_values: pass the cache under one name only")
    return cache if cache is not None else past_key_values


def _padding_mask(attention_mask: torch.Tensor | None, shape: tuple[int, int]) -> torch.Tensor | None:
    """The [B, T] bool validity of the new tokens, or None when there is no padding."""
    if attention_mask is None:
        return None
    if attention_mask.dim() != 2 or attention_mask.shape[0] != shape[0] or attention_mask.shape[1] < shape[1]:
        raise ValueError(
            f"attention_mask: expected [B, T] or [B, past + T] with B={shape[0]}, T={shape[1]}, "
            f"got {tuple(attention_mask.shape)}"
        )
    valid = attention_mask[:, attention_mask.shape[1] - shape[1] :].bool()
    return None if bool(valid.all()) else valid
