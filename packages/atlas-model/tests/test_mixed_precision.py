"""bf16 autocast: the memory op gets q, k, v in one dtype, as on a GPU, where autocast runs the norm of
`F.normalize` in float32 while the projections come out in bf16 (a GPU run hit "v: dtype torch.bfloat16 differs
from k's torch.float32" before the layer cast them). CPU autocast keeps the norm in bf16, so the test makes
`F.normalize` return float32 as CUDA's autocast does."""

import pytest
import torch
import torch.nn.functional as F

from atlas_model.layers import memory as memory_layer
from atlas_model.layers.memory import same_dtype

VOCAB = 64
_normalize = F.normalize


def _float32_normalize(x, *args, **kwargs):
    return _normalize(x.float(), *args, **kwargs)


@pytest.mark.parametrize("preset", ["omeganet", "dot", "atlas"])
def test_memory_layer_under_autocast_with_float32_norm(preset, make_model, make_ids, monkeypatch):
    model = make_model(preset, vocab_size=VOCAB).train()
    ids = make_ids(VOCAB, 2, 9)
    seen = []
    real_chunk = memory_layer.memory_chunk

    def chunk(q, k, v, *args, **kwargs):
        seen.append((q.dtype, k.dtype, v.dtype))
        return real_chunk(q, k, v, *args, **kwargs)

    monkeypatch.setattr(memory_layer.F, "normalize", _float32_normalize)
    monkeypatch.setattr(memory_layer, "memory_chunk", chunk)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(ids, labels=ids)
    out.loss.backward()
    assert seen and all(dtypes == (torch.bfloat16,) * 3 for dtypes in seen), seen
    assert torch.isfinite(out.loss)
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)


def test_same_dtype_promotes_outside_autocast():
    a, b = torch.ones(2, dtype=torch.bfloat16), torch.ones(2, dtype=torch.float32)
    assert [t.dtype for t in same_dtype(a, b)] == [torch.float32, torch.float32]
    assert same_dtype(b, b)[0] is b  # nothing to cast: the same tensor


def test_same_dtype_takes_the_autocast_dtype():
    a, b = torch.ones(2, dtype=torch.float32), torch.ones(2, dtype=torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert [t.dtype for t in same_dtype(a, b)] == [torch.bfloat16, torch.bfloat16]


def test_same_dtype_on_a_device_autocast_does_not_know():
    a, b = torch.ones(2, device="meta"), torch.ones(2, device="meta", dtype=torch.float64)
    assert [t.dtype for t in same_dtype(a, b)] == [torch.float64, torch.float64]
