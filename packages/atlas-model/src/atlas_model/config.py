"""`AtlasConfig`: one Hugging Face configuration for ATLAS, its baselines and its hybrids.

A model is a Llama-style stack (pre-RMSNorm, SwiGLU MLP, residuals) whose token mixer is chosen by `mixer`:

    memory     the unified memory layer of atlas-kernels (every recurrent model of the paper; `memory` is its typed
               `atlas_kernels.MemoryConfig`, given as one or as a dict of its fields, and a dict only when saved)
    attention  causal softmax attention with RoPE (Transformer++)
    swa        sliding-window softmax attention with RoPE (window `sliding_window`)
    mag        memory and SWA in parallel on the same input, combined by a normalised gate (Titans MAG)
    mal        a memory layer followed by an SWA layer in every block (Titans MAL)
    mac        memory as context: per segment, memory read-outs are extra keys for attention (Titans MAC)

Every constant the paper leaves open is a field with a documented default (docs/deviations.md). The class defaults
are the "atlas" preset at the "tiny" size; use `AtlasConfig.from_preset(name, size, **overrides)` for the others.
"""

import difflib
import math
from collections.abc import Mapping
from dataclasses import field, fields
from typing import Any

from huggingface_hub.dataclasses import strict
from transformers import PreTrainedConfig

from atlas_kernels import MemoryConfig, MemoryConfigError
from atlas_model.errors import AtlasConfigError

MIXERS = ("memory", "attention", "swa", "mag", "mal", "mac")
MEMORY_MIXERS = ("memory", "mag", "mal", "mac")
SWA_MIXERS = ("swa", "mag", "mal")
MEMORY_INIT = ("shared", "per_head", "zero")
MEMORY_OUTPUT_INIT = ("random", "zero")
MEMORY_BACKENDS = ("auto", "torch", "compiled", "triton")
# eta_init defaults by inner optimizer (AtlasConfig.initial_eta): Muon's orthogonalised step has unit singular
# values, so eta is its spectral step size (Muon's usual lr); gd / momentum keep the delta rule's beta = 0.5.
MUON_ETA_INIT = 0.02
DELTA_ETA_INIT = 0.5


def _default_memory() -> MemoryConfig:
    """The Atlas memory at the tiny size (window c = 4, chunk size b = 4)."""
    return MemoryConfig(
        memory="mlp", bias="l2", window=4, optimizer="muon", feature_map="poly", poly_degree=2, chunk_size=4
    )


@strict
class AtlasConfig(PreTrainedConfig):
    r"""Configuration of an ATLAS-family causal language model.

    Args:
        preset, size: names of the `PRESETS` entry and `SIZES` entry this config was built from (informational).
        vocab_size: vocabulary size V.
        hidden_size: model width d.
        num_hidden_layers: number of blocks.
        num_attention_heads: heads of the softmax-attention layers (Table 7 of the paper).
        num_memory_heads: heads of the memory layers; None = `num_attention_heads`. Each memory head owns an
            independent memory of head dim d / num_memory_heads. The paper sizes cap the memory head dim at 64
            because polynomial features of degree 2 make the first memory layer C(dh + 2, 2) wide (README).
        intermediate_size: hidden width of the SwiGLU MLP.
        mixer: token mixer of every block, one of `MIXERS` (module docstring).
        memory: `atlas_kernels.MemoryConfig` fields (memory, bias, window c, optimizer, feature_map, chunk_size,
            ...); None for the attention-only mixers.
        memory_init: the learned initial memory W_0 (outer-loop parameters): "shared" = one W_0 per layer shared
            by its heads (default: per-head W_0 on poly features would cost 2 d^3 / H^2 parameters per layer,
            +25 % at 170M), "per_head", or "zero" (W_0 = 0, not learned; linear memories only, as in
            flash-linear-attention's DeltaNet / GLA, whose state starts at zero).
        memory_init_scale: W_0 ~ N(0, scale^2 / fan_in).
        memory_output_init: "random" (default) or "zero": the output layer W1 of an MLP memory's W_0 starts at 0,
            so that the first writes store v instead of cancelling a random read-out (MQAR study, atlas-experiments
            docs/eval-synthetic.md).
        memory_ln_gain_init: initial gain of the memory LayerNorm (1.0: the usual init; small values shrink the
            LN branch so that x + LN(.) starts near the residual).
        memory_value_scale: None (default) keeps v as projected; a float s makes each head's value s * v / ||v||,
            which fixes the scale of what the memory stores against the unit-norm keys.
        memory_backend: `backend` of `atlas_kernels.memory_chunk`: "auto" (Triton kernels where they cover the
            configuration on CUDA, else PyTorch), "torch", "compiled" (the PyTorch op with each chunk under
            torch.compile; not for exp features or a global window) or "triton".
        gate_rank: rank r of the low-rank gate projections d -> r -> heads (Miras: 32 or 64).
        eta_max: inner learning rate eta = eta_max * sigmoid(.). 1.0 keeps the delta rule with unit keys stable
            (eta < 2 / ||phi(k)||^2 for identity features) and matches flash-linear-attention's beta.
        use_alpha_gate: data-dependent retention alpha in (0, 1); False fixes alpha = 1 (DeltaNet).
        use_gamma_gate: data-dependent window gate gamma_i of each token (built only when the window c > 1).
        alpha_init, eta_init, theta_init, gamma_init: gate values at initialisation (the sigmoid bias is their
            logit; eta_init is a fraction of eta_max). alpha 0.98 gives a memory horizon of about 50 tokens.
            eta_init None (default) resolves by optimizer (`initial_eta`): 0.02 for Muon, whose step
            eta NS_k(S) has singular values near 1 whatever the gradient's scale, so eta is a per-token spectral
            step (0.02 is Muon's usual learning rate; 0.5 rewrote most of the tiny memories every token and left
            Atlas far behind Gated DeltaNet on MQAR, see atlas-experiments docs/eval-synthetic.md, Investigation);
            0.5 for gd and momentum (the delta rule's beta).
        conv_size: width of the causal depthwise convolution after the q, k, v projections (paper: 4).
        use_short_conv: the short convolution (+ SiLU) on q, k, v of the memory layers.
        use_output_gate: o = RMSNorm(o) * SiLU(x W_g) before the output projection of the memory layers.
        rope_theta: RoPE base of the attention layers.
        sliding_window: SWA window w (each token attends to itself and the w - 1 before it); the paper's "2K for
            SWA" gives 2048 at the paper sizes.
        mac_segment_size: segment length of the MAC hybrid (full attention inside a segment).
        mac_persistent_tokens: learned persistent tokens prepended to every MAC segment (Atlas used none).
        rms_norm_eps: epsilon of every RMSNorm.
        initializer_range: std of the normal init of linear and embedding weights.
        tie_word_embeddings: share the input embedding and the LM head.
        use_cache: return a cache from `forward` by default (inference).
    """

    model_type = "atlas_lm"
    keys_to_ignore_at_inference = ["cache"]

    preset: str = "atlas"
    size: str = "tiny"
    vocab_size: int = 256
    hidden_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_memory_heads: int | None = None
    intermediate_size: int = 192
    mixer: str = "memory"
    memory: MemoryConfig | dict | None = field(default_factory=_default_memory)
    memory_init: str = "shared"
    memory_init_scale: float = 1.0
    memory_output_init: str = "random"
    memory_ln_gain_init: float = 1.0
    memory_value_scale: float | None = None
    memory_backend: str = "auto"
    gate_rank: int = 16
    eta_max: float = 1.0
    use_alpha_gate: bool = True
    use_gamma_gate: bool = True
    alpha_init: float = 0.98
    eta_init: float | None = None
    theta_init: float = 0.5
    gamma_init: float = 0.9
    conv_size: int = 4
    use_short_conv: bool = True
    use_output_gate: bool = True
    rope_theta: float = 10000.0
    sliding_window: int = 8
    mac_segment_size: int = 8
    mac_persistent_tokens: int = 0
    rms_norm_eps: float = 1e-6
    initializer_range: float = 0.02
    tie_word_embeddings: bool = False
    use_cache: bool = True
    pad_token_id: int | None = None
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None

    def __post_init__(self, **kwargs: Any) -> None:
        super().__post_init__(**kwargs)
        self._check()

    def save_pretrained(self, save_directory: Any, push_to_hub: bool = False, **kwargs: Any) -> None:
        """Save `config.json` with an `auto_map` to a loader module written beside it (`atlas_model.portable`),
        so that the directory loads with `trust_remote_code=True` in a Python that never imported atlas_model.
        A model's `save_pretrained` saves its config through this method."""
        from atlas_model.portable import AUTO_MAP, write_loader

        self.auto_map = dict(AUTO_MAP)
        super().save_pretrained(save_directory, push_to_hub=push_to_hub, **kwargs)
        write_loader(save_directory)

    # ---------------------------------------------------------------- derived quantities

    @property
    def uses_memory(self) -> bool:
        return self.mixer in MEMORY_MIXERS

    @property
    def head_dim(self) -> int:
        """Head dim of the attention layers."""
        return self.hidden_size // self.num_attention_heads

    @property
    def memory_heads(self) -> int:
        return self.num_memory_heads if self.num_memory_heads is not None else self.num_attention_heads

    @property
    def memory_head_dim(self) -> int:
        return self.hidden_size // self.memory_heads

    @property
    def initial_eta(self) -> float:
        """eta_init, or its default by inner optimizer: 0.02 for Muon, 0.5 for gd / momentum."""
        if self.eta_init is not None:
            return self.eta_init
        muon = self.memory is not None and self.memory.optimizer == "muon"
        return MUON_ETA_INIT if muon else DELTA_ETA_INIT

    def memory_config(self) -> MemoryConfig:
        """The typed `atlas_kernels.MemoryConfig` of the memory layers (`memory`, checked and typed when the config
        was built), shared, frozen, by every layer; an error for a mixer without memory."""
        if self.memory is None:
            raise AtlasConfigError(f"memory: mixer={self.mixer!r} has no memory layer")
        return self.memory

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready fields (`save_pretrained`, `to_json_string`): the memory as a dict of its fields."""
        out = super().to_dict()
        if isinstance(self.memory, MemoryConfig):
            out["memory"] = self.memory.to_dict()
        return out

    @classmethod
    def from_preset(cls, name: str, size: str = "tiny", **overrides: Any) -> "AtlasConfig":
        """The config of preset `name` at size `size` (see `atlas_model.PRESETS`, `atlas_model.SIZES`).

        `overrides` replace config fields; a `memory` override is merged into the preset's memory settings.
        """
        from atlas_model.presets import preset_fields

        check_overrides(overrides)
        values = preset_fields(name, size)
        memory_override = overrides.pop("memory", None)
        if memory_override is not None:
            if values["memory"] is None:
                raise AtlasConfigError(f"memory: preset {name!r} has no memory layer to override")
            values["memory"] = {**_as_dict(values["memory"]), **memory_override}
        values.update(overrides)
        return cls(**values)

    # ---------------------------------------------------------------- validation

    def _check(self) -> None:
        if self.mixer not in MIXERS:
            raise AtlasConfigError(f"mixer: expected one of {', '.join(MIXERS)}, got {self.mixer!r}")
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size"):
            _check_int(name, getattr(self, name), 1)
        for name, minimum in (
            ("gate_rank", 1),
            ("conv_size", 1),
            ("sliding_window", 1),
            ("mac_segment_size", 1),
            ("mac_persistent_tokens", 0),
        ):
            _check_int(name, getattr(self, name), minimum)
        if self.num_memory_heads is not None:
            _check_int("num_memory_heads", self.num_memory_heads, 1)
        _check_divides("num_attention_heads", self.hidden_size, self.num_attention_heads)
        _check_divides("num_memory_heads", self.hidden_size, self.memory_heads)
        if self.mixer not in ("memory",) and self.head_dim % 2:
            raise AtlasConfigError(
                f"num_attention_heads: RoPE needs an even head dim, got {self.hidden_size} / "
                f"{self.num_attention_heads} = {self.head_dim}"
            )
        for name in ("alpha_init", "eta_init", "theta_init", "gamma_init"):
            value = getattr(self, name)
            if name == "eta_init" and value is None:
                continue
            if not 0.0 < value < 1.0:
                raise AtlasConfigError(f"{name}: expected a value in (0, 1) (a sigmoid output), got {value!r}")
        for name in ("eta_max", "memory_init_scale", "rms_norm_eps", "initializer_range", "rope_theta"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise AtlasConfigError(f"{name}: expected a positive float, got {value!r}")
        if self.memory_backend not in MEMORY_BACKENDS:
            raise AtlasConfigError(
                f"memory_backend: expected one of {', '.join(MEMORY_BACKENDS)}, got {self.memory_backend!r}"
            )
        if self.memory_init not in MEMORY_INIT:
            raise AtlasConfigError(f"memory_init: expected one of {', '.join(MEMORY_INIT)}, got {self.memory_init!r}")
        if self.memory_output_init not in MEMORY_OUTPUT_INIT:
            raise AtlasConfigError(
                f"memory_output_init: expected one of {', '.join(MEMORY_OUTPUT_INIT)}, got {self.memory_output_init!r}"
            )
        for name in ("memory_ln_gain_init", "memory_value_scale"):
            value = getattr(self, name)
            if value is None and name == "memory_value_scale":
                continue
            numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not (numeric and math.isfinite(value) and value > 0):
                raise AtlasConfigError(f"{name}: expected a positive float, got {value!r}")

        if not self.uses_memory:
            self.memory = None
            return
        if self.memory is None:
            raise AtlasConfigError(f"memory: mixer={self.mixer!r} needs memory settings (a MemoryConfig dict)")
        # the field's type (checked by @strict) admits only a MemoryConfig or a dict of its fields
        try:
            memory = self.memory if isinstance(self.memory, MemoryConfig) else MemoryConfig.from_dict(self.memory)
        except (MemoryConfigError, TypeError) as err:
            raise AtlasConfigError(f"memory: {err}") from err
        if self.memory_init == "zero" and memory.memory != "linear":
            raise AtlasConfigError(
                f"memory_init: 'zero' is defined for linear memories only (memory={memory.memory!r} would never "
                "leave W_0 = 0: its gradients vanish there)"
            )
        if self.memory_output_init == "zero" and memory.memory == "linear":
            raise AtlasConfigError(
                "memory_output_init: 'zero' is for MLP memories (a linear memory's W_0 is one layer: use memory_init)"
            )
        if memory.feature_map == "exp" and self.memory_init == "zero":
            raise AtlasConfigError("memory_init: 'zero' is not defined for feature_map='exp' (use exp_init_keys=0)")
        if self.memory_backend == "compiled" and (memory.feature_map == "exp" or memory.is_global):
            grows = "feature_map='exp'" if memory.feature_map == "exp" else "window='global'"
            raise AtlasConfigError(
                f"memory_backend: 'compiled' compiles one chunk of fixed shape, but under {grows} the memory's "
                "state grows with every chunk; use 'torch' or 'auto'"
            )
        self.memory = memory


def _as_dict(memory: MemoryConfig | Mapping[str, Any]) -> dict[str, Any]:
    return memory.to_dict() if isinstance(memory, MemoryConfig) else dict(memory)


def check_overrides(overrides: Mapping[str, Any], where: str = "overrides") -> None:
    """Every key of `overrides` names an `AtlasConfig` field, and every key of its `memory` mapping a
    `MemoryConfig` field; the error names the dotted key (`model.overrides.memory.windw`) and the nearest field."""
    if not isinstance(overrides, Mapping):
        raise AtlasConfigError(f"{where}: expected a mapping of AtlasConfig fields, got {type(overrides).__name__}")
    _check_fields(overrides, AtlasConfig, where, "an")
    memory = overrides.get("memory")
    if memory is None:
        return
    if not isinstance(memory, Mapping):
        raise AtlasConfigError(f"{where}.memory: expected a mapping of MemoryConfig fields, got {memory!r}")
    _check_fields(memory, MemoryConfig, f"{where}.memory", "a")


def _check_fields(mapping: Mapping[str, Any], cls: type, where: str, article: str) -> None:
    known = [f.name for f in fields(cls)]
    for key in mapping:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise AtlasConfigError(f"{where}.{key}: not {article} {cls.__name__} field{hint}")


def _check_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise AtlasConfigError(f"{name}: expected an int >= {minimum}, got {value!r}")


def _check_divides(name: str, width: int, heads: int) -> None:
    if width % heads:
        raise AtlasConfigError(f"{name}: hidden_size {width} is not divisible by {heads} heads")
