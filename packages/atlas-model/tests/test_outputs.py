"""Model outputs under either name of the cache field (`cache` in newer transformers 5.x, `past_key_values` in
earlier ones, e.g. 5.17, where a GPU run's Transformer++ failed with "unexpected keyword argument 'cache'")."""

from dataclasses import dataclass

import torch

from atlas_model.outputs import cache_field, output_cache, with_cache


@dataclass
class OlderOutput:  # a plain dataclass: ModelOutput of newer releases renames the old keyword itself
    last_hidden_state: torch.Tensor | None = None
    past_key_values: object = None
    hidden_states: tuple | None = None


def test_older_field_name():
    out = with_cache(OlderOutput, "the cache", last_hidden_state=torch.zeros(1))
    assert cache_field(OlderOutput) == "past_key_values"
    assert out.past_key_values == "the cache" and output_cache(out) == "the cache"


def test_model_returns_its_cache_under_the_installed_name(make_model, make_ids):
    model = make_model("omeganet", vocab_size=32)
    out = model(make_ids(32, 1, 5), use_cache=True)
    assert output_cache(out) is getattr(out, cache_field(type(out)))
    assert output_cache(out).get_seq_length() == 5
    assert output_cache(model(make_ids(32, 1, 5), use_cache=False)) is None
    assert output_cache((1, 2)) is None
