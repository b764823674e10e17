"""The models of `atlas eval mqar | mad`: which arms, their configs at a task's size, and how much memory each carries.

Models: `--models atlas,gated_deltanet,transformer_pp,my_model.yaml`. A name is an `atlas_model` preset (at
`--size`, default tiny); a file (YAML/JSON) holds `{preset, size?, overrides?, name?}`, a training config with a
`model:` section, or a saved Hugging Face `config.json` of an Atlas model. The command's width / depth / heads
apply to every model first, then a file's own overrides, then the task's vocabulary.

Memory size: every synthetic result reports each arm's memory floats (`state_size`); `match_memory` resizes the
arms' memories (heads and inner expansion) to one budget so that accuracies compare at equal memory
(packages/atlas-experiments/docs/eval-synthetic.md, "Equal memory").
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from atlas_experiments.configio import merge_settings

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
    overrides = merge_settings(overrides, choice.overrides)
    overrides["vocab_size"] = vocab_size
    return atlas_model.AtlasConfig.from_preset(choice.preset, size=choice.size, **overrides)


def memory_deviation(
    head_dim: int | None, expansion: int | None, match_memory: str | None = None, match_note: str = ""
) -> list[str]:
    """The deviations entries of the deep-memory reductions and of sizing the memories to `match_memory` (empty
    when the presets' memories are kept as they are). `match_note` ends the sizing entry: the protocols compare
    and report the sized arms differently."""
    dev = []
    parts = []
    if head_dim is not None:
        parts.append(f"memory head dim {head_dim}")
    if expansion is not None:
        parts.append(f"inner-MLP expansion {expansion}")
    if parts:
        dev.append(
            "deep memories (Atlas, OmegaNet, Titans, ...) shrunk for CPU: "
            + ", ".join(parts)
            + " (presets: memory heads = attention heads, expansion 4)"
        )
    if match_memory:
        dev.append(f"memories sized to {match_memory}'s memory floats{match_note}")
    return dev


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
    from atlas_model.outputs import output_cache

    was_training = model.training
    model.eval()
    x = (torch.arange(seq_len, device=device) % vocab_size)[None]
    # One thread: the counts are shapes, and this small forward split over threads that other processes keep busy
    # (the study's workers) ran 25-100x slower than on one (docs/study.md, "Shared runs").
    with torch_threads(1):
        out = model(input_ids=x, use_cache=True)
    model.train(was_training)
    cache = output_cache(out)
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


# --------------------------------------------------------------------------------------------- equal memory

MATCH_HEAD_DIMS = (4, 8, 16, 32, 64, 128)
MATCH_EXPANSIONS = (1, 2, 4)
# Within this factor of the budget an arm counts as matched; outside it the nearest size is used and flagged.
MATCH_TOLERANCE = 1.5


@dataclass(frozen=True)
class MemoryMatch:
    """How one arm was sized to the memory budget (`match_memory`).

    status: "matched" (floats within MATCH_TOLERANCE of the target), "nearest" (no size came that close; the
    closest is used), "attention" (no memory layer: its cache is keys and values, sized by T or the window), or
    "grows" (a memory whose floats grow with T, e.g. a global Omega window keeping every key). The last two keep
    their size: they are references beside the matched arms, not like-for-like arms.
    """

    reference: str
    target: int
    floats: int
    status: str
    memory_head_dim: int | None = None
    memory_expansion: int | None = None

    @property
    def ratio(self) -> float:
        return self.floats / self.target

    def describe(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "ratio": round(self.ratio, 4)}


def _memory_floats(config, seq_len: int, device: torch.device) -> int:
    model = build_lm(config, 0, device)
    return state_size(model, seq_len, config.vocab_size, device)["memory"]


def memory_target(
    reference: str, *, seq_len: int, device: torch.device | str = "cpu", **config_kwargs: Any
) -> tuple[str, int]:
    """The memory budget `reference` names: a float count ("4096") or a preset whose memory floats at this task's
    size (`config_kwargs` as for `model_config`) and `seq_len` set the budget. Returns (label, floats)."""
    import atlas_model

    text = str(reference).strip()
    if text.isdigit():
        if int(text) < 1:
            raise ValueError(f"--match-memory: expected a positive float count, got {text}")
        return f"{int(text)} floats", int(text)
    if text not in atlas_model.PRESETS:
        raise ValueError(
            f"--match-memory: {text!r} is neither a float count nor a preset ({', '.join(atlas_model.PRESETS)})"
        )
    config = model_config(ModelChoice(text, text), **config_kwargs)
    return text, _memory_floats(config, seq_len, torch.device(device))


def match_memory(
    choice: ModelChoice,
    reference: str,
    target: int,
    *,
    seq_len: int,
    device: torch.device | str = "cpu",
    **config_kwargs: Any,
) -> tuple[ModelChoice, MemoryMatch]:
    """`choice` with its memory heads (and, for MLP memories, inner expansion) set so that its memory floats after
    `seq_len` tokens come nearest `target` (in log ratio; a tie goes to the larger head, then the smaller
    expansion). `config_kwargs` are `model_config`'s (vocab, width, layers, heads and the unmatched memory
    knobs). A user's own `num_memory_heads` / `memory.expansion` overrides are replaced: the budget decides."""
    device = torch.device(device)
    config = model_config(choice, **config_kwargs)
    floats = _memory_floats(config, seq_len, device)
    if config.memory is None:
        return choice, MemoryMatch(reference, target, floats, "attention")
    if _memory_floats(config, 2 * seq_len, device) != floats:
        return choice, MemoryMatch(reference, target, floats, "grows")
    deep = config.memory.memory in DEEP_MEMORIES
    width = config.hidden_size
    best: tuple[float, int, int, int, int | None] | None = None
    for head_dim in MATCH_HEAD_DIMS:
        if width % head_dim:
            continue
        for expansion in MATCH_EXPANSIONS if deep else (None,):
            candidate = _sized(choice, width // head_dim, expansion)
            n = _memory_floats(model_config(candidate, **config_kwargs), seq_len, device)
            key = (abs(math.log(n / target)), -head_dim, expansion or 0, n, expansion)
            if best is None or key[:3] < best[:3]:
                best = key
    if best is None:
        raise ValueError(f"--match-memory: width {width} of {choice.name} has no head dim in {MATCH_HEAD_DIMS}")
    gap, neg_head, _, n, expansion = best
    status = "matched" if gap <= math.log(MATCH_TOLERANCE) else "nearest"
    sized = _sized(choice, width // -neg_head, expansion)
    return sized, MemoryMatch(reference, target, n, status, -neg_head, expansion)


def _sized(choice: ModelChoice, memory_heads: int, expansion: int | None) -> ModelChoice:
    overrides = {**choice.overrides, "num_memory_heads": memory_heads}
    if expansion is not None:
        overrides["memory"] = {**overrides.get("memory", {}), "expansion": expansion}
    return dataclasses.replace(choice, overrides=overrides)
