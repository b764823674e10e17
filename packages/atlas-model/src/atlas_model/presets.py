"""Presets (which model) and sizes (how big): plain data that `AtlasConfig.from_preset` combines.

A preset names the token mixer and the memory settings of one model of the paper (docs/memory-op.md, "The
paper's models"); a size gives the widths of Table 7 of the paper, or small CPU sizes for tests and the embedded
default, plus the length constants that have to shrink with them (SWA window, Omega window c, chunk size b).

Readings this package implements (the paper leaves them open):
- "omega" presets take the Omega window c of the size (the paper suggests 4-16; docs/deviations.md, "Open
  constants"): c = 4 on the CPU sizes, c = 8 at the paper sizes; online presets keep c = 1.
- DeepTransformer keeps the data-dependent retention alpha_t of Table 1; with alpha = eta = 1, linear memory
  and exp features it would be unnormalised causal attention (the "nothing forgotten" limit, docs/features.md,
  "Hebbian memory and attention").
- Exp-feature presets learn P = 16 keys that span the initial first-layer weight (`exp_init_keys`), so that
  the deep memory does not start from W2 = 0, where its branch output and every inner gradient but one vanish.
- The linear memories (DeltaNet, Gated DeltaNet, linear attention, SWLA) start from W_0 = 0 like
  flash-linear-attention's kernels; the deep memories learn W_0.
- DeltaNet and Gated DeltaNet compute the exact recurrence of their papers with the exact chunkwise delta rule
  (`exact_delta`, see `_DELTA`); every other memory takes the paper's chunkwise semantics (gradients at the
  chunk start). All take the size's chunk size b.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from atlas_model.errors import AtlasConfigError


@dataclass(frozen=True)
class Preset:
    """One model: its mixer, memory settings and any other config fields it fixes.

    Attributes:
        mixer: `AtlasConfig.mixer`.
        memory: `atlas_kernels.MemoryConfig` fields (None for attention-only mixers). `window` and `chunk_size`
            come from the size unless given here.
        omega: the memory window is the size's Omega window c (False: the online rule, c = 1).
        fields: other `AtlasConfig` fields the model fixes.
        reference: where the paper (or its source) defines the model.
    """

    mixer: str
    memory: Mapping[str, Any] | None
    omega: bool = False
    fields: Mapping[str, Any] = field(default_factory=dict)
    reference: str = ""


@dataclass(frozen=True)
class Size:
    """Widths of one model size and the length constants that scale with it."""

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_memory_heads: int | None
    intermediate_size: int
    vocab_size: int
    gate_rank: int
    sliding_window: int
    mac_segment_size: int
    omega_window: int
    chunk_size: int


# Muon's form (ns_form, ns_eval) is MemoryConfig's default, "auto": chosen per device and memory size, the same map
# every way (docs/muon.md "Choosing the form").
_ATLAS = {"memory": "mlp", "bias": "l2", "optimizer": "muon", "feature_map": "poly", "poly_degree": 2}
_EXP_KEYS = 16
# DeltaNet and Gated DeltaNet are the exact token recurrence, as flash-linear-attention computes them: with the
# chunk-start semantics every gradient of a chunk is taken at its start, and b tokens with (nearly) equal keys
# take one step of size sum_i eta_i ~ b / 2 along that key, which overshoots (|1 - b eta| > 1) and diverges (a
# repeated token drives W to ~1e13 in 256 tokens at b = 16). `exact_delta` computes the exact recurrence
# chunkwise (WY/UT form), so they keep the size's chunk size.
_DELTA = {"memory": "linear", "bias": "l2", "optimizer": "gd", "exact_delta": True}

_PRESETS: dict[str, Preset] = {
    "atlas": Preset("memory", _ATLAS, omega=True, reference="Atlas, Sec. 5 (Eqs. 32-33, App. D.4)"),
    "atlas_pp": Preset(
        "memory", {**_ATLAS, "memory": "gated_mlp"}, omega=True, reference="Atlas++, Eq. 43 (gated MLP memory)"
    ),
    "omeganet": Preset(
        "memory",
        {"memory": "mlp", "bias": "l2", "optimizer": "gd", "feature_map": "poly", "poly_degree": 2},
        omega=True,
        reference="OmegaNet, Sec. 3.2 (Eqs. 9-11)",
    ),
    "dla": Preset(
        "memory",
        {"memory": "mlp", "bias": "dot", "optimizer": "gd", "feature_map": "poly", "poly_degree": 2},
        reference="Deep Linear Attention, Eq. 19",
    ),
    "swla": Preset(
        "memory",
        {"memory": "linear", "bias": "dot", "optimizer": "gd", "feature_map": "poly", "poly_degree": 2},
        omega=True,
        fields={"memory_init": "zero"},
        reference="Sliding Window Linear Attention, Eq. 20",
    ),
    "deep_transformer": Preset(
        "memory",
        {"memory": "mlp", "bias": "dot", "optimizer": "gd", "feature_map": "exp", "exp_init_keys": _EXP_KEYS},
        reference="DeepTransformers, Eq. 25 (unnormalised, alpha_t of Table 1)",
    ),
    "swdt": Preset(
        "memory",
        {"memory": "mlp", "bias": "dot", "optimizer": "gd", "feature_map": "exp", "exp_init_keys": _EXP_KEYS},
        omega=True,
        reference="Sliding-Window DeepTransformer, Table 1",
    ),
    "dot": Preset(
        "memory",
        {"memory": "mlp", "bias": "l2", "optimizer": "gd", "feature_map": "exp", "exp_init_keys": _EXP_KEYS},
        omega=True,
        reference="Deep Omega Transformer, Eq. 27",
    ),
    "titans_lmm": Preset(
        "memory",
        {"memory": "mlp", "bias": "l2", "optimizer": "momentum", "feature_map": "identity"},
        reference="Titans (LMM), Titans Eqs. 13-14",
    ),
    "deltanet": Preset(
        "memory",
        {**_DELTA, "feature_map": "identity"},
        fields={"use_alpha_gate": False, "memory_init": "zero"},
        reference="DeltaNet (alpha = 1), exact recurrence",
    ),
    "gated_deltanet": Preset(
        "memory",
        {**_DELTA, "feature_map": "identity", "decay_first": True},
        fields={"memory_init": "zero"},
        reference="Gated DeltaNet (decay first, flash-linear-attention ordering), exact recurrence",
    ),
    "linear_attention": Preset(
        "memory",
        {"memory": "linear", "bias": "dot", "optimizer": "gd", "feature_map": "identity"},
        fields={"memory_init": "zero"},
        reference="gated linear attention (Miras Eqs. 45-46 with alpha_t)",
    ),
    "transformer_pp": Preset("attention", None, reference="Transformer++ (Llama: RoPE, SwiGLU, RMSNorm)"),
    "swa": Preset("swa", None, reference="sliding-window attention"),
    "atlas_mag": Preset("mag", _ATLAS, omega=True, reference="Atlas (MAG), Titans Eqs. 26-28"),
    "atlas_mal": Preset("mal", _ATLAS, omega=True, reference="Atlas (MAL), Titans Eqs. 29-31"),
    "atlas_mac": Preset("mac", _ATLAS, omega=True, reference="Atlas (MAC), Titans Eqs. 21-25, no persistent tokens"),
}

_PAPER = {"vocab_size": 32000, "gate_rank": 32, "sliding_window": 2048, "mac_segment_size": 512}
_SIZES: dict[str, Size] = {
    # CPU sizes: tests (tiny) and the embedded default (small).
    "tiny": Size(64, 2, 4, None, 192, 256, 16, 8, 8, omega_window=4, chunk_size=4),
    "small": Size(256, 4, 4, 8, 704, 8192, 32, 128, 64, omega_window=4, chunk_size=16),
    # Table 7 of the paper (blocks, width, heads); memory head dim capped at 64 (see AtlasConfig).
    "170M": Size(768, 12, 16, 16, 3072, **_PAPER, omega_window=8, chunk_size=16),
    "340M": Size(1024, 24, 16, 16, 2048, **_PAPER, omega_window=8, chunk_size=16),
    "760M": Size(1536, 24, 16, 24, 3584, **_PAPER, omega_window=8, chunk_size=16),
    "1.3B": Size(2048, 18, 8, 32, 7168, **_PAPER, omega_window=8, chunk_size=16),
}

PRESET_TABLE: Mapping[str, Preset] = MappingProxyType(_PRESETS)
SIZE_TABLE: Mapping[str, Size] = MappingProxyType(_SIZES)
PRESETS: tuple[str, ...] = tuple(_PRESETS)
SIZES: tuple[str, ...] = tuple(_SIZES)
PAPER_SIZES: tuple[str, ...] = ("170M", "340M", "760M", "1.3B")


def preset_fields(name: str, size: str) -> dict[str, Any]:
    """AtlasConfig keyword arguments of preset `name` at size `size`."""
    if name not in _PRESETS:
        raise AtlasConfigError(f"preset: unknown {name!r}; expected one of {', '.join(PRESETS)}")
    if size not in _SIZES:
        raise AtlasConfigError(f"size: unknown {size!r}; expected one of {', '.join(SIZES)}")
    preset, dims = _PRESETS[name], _SIZES[size]
    values: dict[str, Any] = {
        "preset": name,
        "size": size,
        "mixer": preset.mixer,
        "hidden_size": dims.hidden_size,
        "num_hidden_layers": dims.num_hidden_layers,
        "num_attention_heads": dims.num_attention_heads,
        "num_memory_heads": dims.num_memory_heads,
        "intermediate_size": dims.intermediate_size,
        "vocab_size": dims.vocab_size,
        "gate_rank": dims.gate_rank,
        "sliding_window": dims.sliding_window,
        "mac_segment_size": dims.mac_segment_size,
        "memory": None,
    }
    if preset.memory is not None:
        memory = {"window": dims.omega_window if preset.omega else 1, "chunk_size": dims.chunk_size}
        values["memory"] = {**memory, **preset.memory}
    values.update(preset.fields)
    return values
