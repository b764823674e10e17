"""Model outputs across transformers 5.x releases.

The decoding cache's field of `BaseModelOutputWithPast` / `CausalLMOutputWithPast` is `cache` in the releases this
project pins for development and `past_key_values` in earlier 5.x ones (5.17, on the image of a GPU machine the
project ran on, 2026-12-04): the model builds and reads its outputs through these helpers so that it runs on both.
"""

import dataclasses
import functools
from typing import Any

from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast


@functools.cache  # read on every forward: once per class
def cache_field(cls: type) -> str:
    """The name of the decoding-cache field of output class `cls`."""
    names = {f.name for f in dataclasses.fields(cls)}
    return "cache" if "cache" in names else "past_key_values"


def with_cache(cls: type, cache: Any, **fields: Any) -> Any:
    """An instance of output class `cls` with `fields` and the decoding cache under the field `cls` has."""
    return cls(**fields, **{cache_field(cls): cache})


def output_cache(out: Any) -> Any:
    """The decoding cache of a model output (None when it holds none)."""
    return getattr(out, cache_field(type(out)), None) if dataclasses.is_dataclass(out) else None


def model_output(x: Any, cache: Any, hidden_states: Any) -> BaseModelOutputWithPast:
    return with_cache(BaseModelOutputWithPast, cache, last_hidden_state=x, hidden_states=hidden_states)


def lm_output(loss: Any, logits: Any, cache: Any, hidden_states: Any) -> CausalLMOutputWithPast:
    return with_cache(CausalLMOutputWithPast, cache, loss=loss, logits=logits, hidden_states=hidden_states)
