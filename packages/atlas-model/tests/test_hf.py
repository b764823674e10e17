"""Hugging Face integration: Auto classes, safetensors round trip, generate() with the AtlasCache."""

import pytest
import torch
from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

from atlas_model import AtlasCache, AtlasConfig, AtlasForCausalLM, AtlasModel
from atlas_model.outputs import output_cache

VOCAB = 256


@pytest.mark.parametrize(
    ("preset", "overrides"),
    [
        ("atlas", {}),
        ("atlas_pp", {"memory_init": "per_head", "tie_word_embeddings": True}),
        ("dot", {}),  # exp features: init keys / values ("init_values.W2" is stored as "init_values__W2")
        ("deltanet", {}),  # W_0 = 0 is not a parameter
        ("atlas_mac", {"mac_persistent_tokens": 2}),
        ("transformer_pp", {}),
    ],
)
def test_save_and_load_round_trip(preset, overrides, make_model, make_ids, tmp_path):
    # float64: weights memory-mapped from safetensors may be aligned differently from freshly allocated ones,
    # which changes the summation order of some CPU kernels (about 1e-6 in float32, 1e-15 here).
    model = make_model(preset, torch.float64, **overrides)
    model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").exists()
    loaded, info = AutoModelForCausalLM.from_pretrained(tmp_path, output_loading_info=True)
    assert isinstance(loaded, AtlasForCausalLM) and loaded.dtype == torch.float64
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    for (name, p), (name2, p2) in zip(model.named_parameters(), loaded.named_parameters(), strict=True):
        assert name == name2 and torch.equal(p, p2), name
    ids = make_ids(VOCAB, 2, 13)
    with torch.no_grad():
        torch.testing.assert_close(loaded.eval()(ids).logits, model(ids).logits, rtol=0, atol=1e-12)
    if overrides.get("tie_word_embeddings"):
        assert loaded.lm_head.weight.data_ptr() == loaded.model.embed_tokens.weight.data_ptr()


def test_auto_classes_know_the_model(tmp_path):
    config = AtlasConfig.from_preset("swla")
    assert isinstance(AutoConfig.for_model("atlas_lm"), AtlasConfig)
    assert isinstance(AutoModelForCausalLM.from_config(config), AtlasForCausalLM)
    AtlasModel(config).save_pretrained(tmp_path)
    assert isinstance(AutoModel.from_pretrained(tmp_path), AtlasModel)


def _greedy_without_cache(model, ids: torch.Tensor, steps: int) -> torch.Tensor:
    for _ in range(steps):
        nxt = model(ids, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)
        ids = torch.cat([ids, nxt], dim=1)
    return ids


@pytest.mark.parametrize("preset", ["atlas", "gated_deltanet", "deep_transformer", "swa", "atlas_mag", "atlas_mac"])
@torch.no_grad()
def test_generate_decodes_with_the_cache(preset, make_model, make_ids):
    model = make_model(preset, torch.float64)
    ids = make_ids(VOCAB, 2, 6)
    calls = []
    model.model.register_forward_pre_hook(
        lambda _, args, kwargs: calls.append((kwargs["input_ids"].shape[1], type(kwargs["cache"]).__name__)),
        with_kwargs=True,
    )
    out = model.generate(ids, max_new_tokens=7, do_sample=False, return_dict_in_generate=True)
    assert calls[0] == (6, "NoneType") and all(c == (1, "AtlasCache") for c in calls[1:]), calls
    assert isinstance(output_cache(out), AtlasCache) and output_cache(out).get_seq_length() == 12
    assert torch.equal(out.sequences, _greedy_without_cache(model, ids, 7))
    assert torch.equal(model.generate(ids, max_new_tokens=3, do_sample=False, use_cache=False), out.sequences[:, :9])


@pytest.mark.parametrize("preset", ["omeganet", "atlas_mal"])
@torch.no_grad()
def test_batched_generation_with_left_padding(preset, make_model, make_ids):
    model = make_model(preset, torch.float64)
    short, long = make_ids(VOCAB, 1, 5, seed=3), make_ids(VOCAB, 1, 13, seed=4)
    pads = 8  # a multiple of the chunk size: chunk boundaries sit at absolute positions
    batch = torch.cat([torch.cat([torch.zeros(1, pads, dtype=short.dtype), short], 1), long])
    mask = torch.ones_like(batch)
    mask[0, :pads] = 0
    out = model.generate(batch, attention_mask=mask, max_new_tokens=5, do_sample=False)
    assert torch.equal(out[0, pads:], model.generate(short, max_new_tokens=5, do_sample=False)[0])
    assert torch.equal(out[1], model.generate(long, max_new_tokens=5, do_sample=False)[0])


def test_forward_rejects_a_foreign_cache(make_model, make_ids):
    from transformers import DynamicCache

    model = make_model("deltanet")
    with pytest.raises(TypeError, match="AtlasCache"):
        model(make_ids(VOCAB, 1, 3), cache=DynamicCache())
    with pytest.raises(ValueError, match="attention_mask"):
        model(make_ids(VOCAB, 1, 3), attention_mask=torch.ones(1, 2))


@torch.no_grad()
def test_beam_search_reorders_the_cache(make_model, make_ids):
    model = make_model("atlas_mal", torch.float64)
    ids = make_ids(VOCAB, 2, 5)
    cached = model.generate(ids, max_new_tokens=5, num_beams=3, do_sample=False)
    uncached = model.generate(ids, max_new_tokens=5, num_beams=3, do_sample=False, use_cache=False)
    assert torch.equal(cached, uncached)
