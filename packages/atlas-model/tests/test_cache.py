"""Cached inference: prefill in pieces and token-by-token decoding reproduce one full forward, exactly (float64)."""

import pytest
import torch

from atlas_model import PRESETS, AtlasCache
from atlas_model.cache import iter_tensors
from atlas_model.outputs import output_cache

VOCAB = 256
TOL = 1e-9
# Uneven pieces: not aligned with the chunk size (4), the MAC segment (8) or the SWA window (8).
PREFILL = (5, 7)
LENGTH = 21


def _incremental_logits(model, ids: torch.Tensor) -> torch.Tensor:
    a, b = PREFILL
    first = model(ids[:, :a], use_cache=True)
    assert isinstance(output_cache(first), AtlasCache)
    second = model(ids[:, a : a + b], past_key_values=output_cache(first), use_cache=True)
    assert output_cache(second) is output_cache(first)
    logits = [first.logits, second.logits]
    for t in range(a + b, ids.shape[1]):
        logits.append(model(ids[:, t : t + 1], cache=output_cache(first), use_cache=True).logits)
    assert output_cache(first).get_seq_length() == ids.shape[1]
    return torch.cat(logits, dim=1)


@pytest.mark.parametrize("preset", PRESETS)
@torch.no_grad()
def test_prefill_in_pieces_then_decoding_equals_full_forward(preset, make_model, make_ids):
    model = make_model(preset, torch.float64)
    ids = make_ids(VOCAB, 2, LENGTH)
    full = model(ids, use_cache=False).logits
    torch.testing.assert_close(_incremental_logits(model, ids), full, rtol=0, atol=TOL)


@pytest.mark.parametrize("preset", PRESETS)
@torch.no_grad()
def test_left_padding_does_not_change_the_tokens(preset, make_model, make_ids):
    """A padded token leaves every state untouched: with 8 pads (a multiple of the chunk size and the MAC
    segment, which sit at absolute positions) a left-padded row equals the unpadded sequence."""
    model = make_model(preset, torch.float64)
    ids = make_ids(VOCAB, 1, 12)
    pads = 8
    padded = torch.cat([torch.zeros(1, pads, dtype=ids.dtype), ids], dim=1)
    mask = torch.cat([torch.zeros(1, pads, dtype=torch.long), torch.ones_like(ids)], dim=1)
    batch = torch.cat([padded, torch.cat([ids, ids[:, :pads]], dim=1)])  # a second, unpadded row
    batch_mask = torch.cat([mask, torch.ones_like(mask)])
    expected = model(ids, use_cache=False).logits
    got = model(batch, attention_mask=batch_mask, use_cache=False).logits
    torch.testing.assert_close(got[:1, pads:], expected, rtol=0, atol=TOL)
    torch.testing.assert_close(got[1:, :12], expected, rtol=0, atol=TOL)


def _cached_elements(cache: AtlasCache) -> int:
    return sum(t.numel() for t in iter_tensors(cache.layers))


@pytest.mark.parametrize(
    ("preset", "grows"),
    [
        ("atlas", False),
        ("gated_deltanet", False),
        ("titans_lmm", False),
        ("swa", False),
        ("atlas_mag", False),
        ("atlas_mal", False),
        ("atlas_mac", False),
        ("transformer_pp", True),
        ("deep_transformer", True),  # exp features: the first layer lives in dual form over every key
    ],
)
@torch.no_grad()
def test_cache_size_per_token(preset, grows, make_model, make_ids):
    model = make_model(preset)
    ids = make_ids(VOCAB, 1, 32)
    cache = output_cache(model(ids[:, :16], use_cache=True))
    at_16 = _cached_elements(cache)
    for t in range(16, 32):  # 32 = 16 + a multiple of the chunk size and of the MAC segment
        model(ids[:, t : t + 1], cache=cache)
    at_32 = _cached_elements(cache)
    assert (at_32 > at_16) == grows, (at_16, at_32)


@torch.no_grad()
def test_reordering_the_cache_reorders_the_continuation(make_model, make_ids):
    model = make_model("atlas_mal", torch.float64)
    ids = make_ids(VOCAB, 3, 11)
    cache = output_cache(model(ids[:, :10], use_cache=True))
    reference = model(ids[:, 10:], cache=cache).logits
    cache = output_cache(model(ids[:, :10], use_cache=True))
    order = torch.tensor([2, 0, 1])
    cache.reorder_cache(order)
    assert cache.batch_size == 3
    torch.testing.assert_close(model(ids[order, 10:], cache=cache).logits, reference[order], rtol=0, atol=TOL)


def test_cache_cannot_be_rolled_back(make_model, make_ids):
    model = make_model("deltanet")
    cache = output_cache(model(make_ids(VOCAB, 1, 4), use_cache=True))
    cache.crop(0)
    with pytest.raises(ValueError, match="rolled back"):
        cache.crop(-1)
    assert not cache.is_croppable and not cache.is_compileable


def test_truncated_backprop_detaches_the_state(make_model, make_ids):
    model = make_model("titans_lmm").train()
    ids = make_ids(VOCAB, 2, 16)
    cache = AtlasCache(model.config.num_hidden_layers)
    model(ids[:, :8], labels=ids[:, :8], cache=cache).loss.backward()
    cache.detach()
    assert not any(t.requires_grad for t in iter_tensors(cache.layers))
    model(ids[:, 8:], labels=ids[:, 8:], cache=cache).loss.backward()  # no second backward through segment 1
    assert cache.get_seq_length() == 16
