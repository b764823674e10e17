"""`AtlasCache`: the decoding state of every layer, as a `transformers.Cache` that `generate()` can carry.

Per block, a dict per token mixer holds what that mixer needs to continue a sequence:
- memory layers: the `atlas_kernels.MemoryState` (inner weights, momentum, Omega-window halo, the partial chunk)
  and the conv states (the last conv_size - 1 projected inputs of q, k, v);
- attention layers: a `KVWindow` (all keys for full attention, the last w - 1 for sliding-window attention);
- MAC: additionally the memory state at the segment start and the segment's keys/values.

Memory per generated token is constant for the recurrent and sliding-window models. Full attention grows like
a KV cache, and so do exp-feature memories (DeepTransformer, SWDT, Dot), whose first layer lives in dual form
over every key seen so far.

Transformers 5 builds a `DynamicCache` in `generate()` unless the model opts out
(`_supports_default_dynamic_cache` is False for `AtlasForCausalLM`); the model then creates an `AtlasCache` on
its first forward with `use_cache=True` and `generate()` passes it back through `outputs.cache`. The state is not
a list of per-token entries, so it cannot be cropped (no assisted decoding; `_is_stateful` tells `generate`).
"""

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import torch
from transformers.cache_utils import Cache


def map_tensors(obj: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """Apply fn to every tensor inside nested dicts, lists, tuples and dataclasses (MemoryState, KVWindow)."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, dict):
        return {k: map_tensors(v, fn) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(map_tensors(v, fn) for v in obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {f.name: map_tensors(getattr(obj, f.name), fn) for f in dataclasses.fields(obj)}
        return dataclasses.replace(obj, **changes)
    return obj


def iter_tensors(obj: Any) -> Iterator[torch.Tensor]:
    """Every tensor inside nested dicts, lists, tuples and dataclasses."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from iter_tensors(v)
    elif isinstance(obj, list | tuple):
        for v in obj:
            yield from iter_tensors(v)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            yield from iter_tensors(getattr(obj, f.name))


class AtlasCache(Cache):
    """Recurrent and attention state of every block; every tensor in it is batch-first."""

    def __init__(self, num_layers: int) -> None:
        super().__init__(layers=[{} for _ in range(num_layers)])
        self.seen_tokens = 0

    def __repr__(self) -> str:
        return f"AtlasCache(layers={len(self.layers)}, seen_tokens={self.seen_tokens})"

    # ------------------------------------------------------------------ lengths

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """Tokens consumed so far (every layer has seen the same tokens)."""
        return self.seen_tokens

    def get_max_length(self, layer_idx: int | None = None) -> int:
        return -1  # no maximum: recurrent state, or a KV window that is trimmed as it slides

    def get_mask_sizes(self, query_length: int, layer_idx: int = 0) -> tuple[int, int]:
        return self.seen_tokens + query_length, 0

    def has_previous_state(self, layer_idx: int | None = None, state_idx: int | None = None) -> bool:
        return self.seen_tokens > 0

    # ------------------------------------------------------------------ batch manipulation (beam search etc.)

    def _map(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        self.layers = [map_tensors(layer, fn) for layer in self.layers]

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        self._map(lambda t: t.index_select(0, beam_idx.to(t.device)))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self._map(lambda t: t[indices.to(t.device)])

    def batch_repeat_interleave(self, repeats: int) -> None:
        self._map(lambda t: t.repeat_interleave(repeats, dim=0))

    def detach(self) -> "AtlasCache":
        """Cut every state from the autograd graph, in place (truncated backprop through time)."""
        self._map(torch.Tensor.detach)
        return self

    def reset(self) -> None:
        self.layers = [{} for _ in self.layers]
        self.seen_tokens = 0

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove != 0:
            raise ValueError("AtlasCache.crop: a recurrent memory state cannot be rolled back to an earlier token")

    def activate_past_recording(self) -> None:
        raise ValueError(
            "AtlasCache: recording past states for rollback (assisted decoding) is not possible with a recurrent "
            "memory state"
        )

    # ------------------------------------------------------------------ properties `generate()` inspects

    @property
    def batch_size(self) -> int:
        """Batch size of the cached state, -1 before the first forward."""
        for t in iter_tensors(self.layers):
            return t.shape[0]
        return -1

    @property
    def is_compileable(self) -> bool:
        return False

    @property
    def is_initialized(self) -> bool:
        return self.seen_tokens > 0

    @property
    def is_croppable(self) -> bool:
        return False

    @property
    def is_sliding(self) -> list[bool]:
        return [False] * len(self.layers)

    @property
    def is_linear(self) -> list[bool]:
        # Reported False on purpose: `generate()` then trusts `get_seq_length()` to slice prompts that restart
        # from an existing cache, which is exact here for every layer kind.
        return [False] * len(self.layers)

    @property
    def is_dummy(self) -> list[bool]:
        return [False] * len(self.layers)
