"""Building blocks: short conv, attention masks, memory parameters, and the recurrences the presets select."""

import pytest
import torch
import torch.nn.functional as F

from atlas_model import AtlasConfig
from atlas_model.layers import Attention, MemoryLayer, MemoryParameters, ShortConvolution, StepContext
from atlas_model.layers.attention import KVWindow


def test_short_conv_is_causal_and_continues_from_its_state():
    torch.manual_seed(0)
    conv = ShortConvolution(6, 4).double()
    torch.nn.init.normal_(conv.weight)
    x = torch.randn(2, 11, 6, dtype=torch.float64)
    full, _ = conv(x)
    a, state = conv(x[:, :5])
    b, _ = conv(x[:, 5:], state)
    torch.testing.assert_close(torch.cat([a, b], 1), full, rtol=0, atol=1e-14)
    x2 = x.clone()
    x2[:, 7:] += 1.0  # the future does not leak into the past
    torch.testing.assert_close(conv(x2)[0][:, :7], full[:, :7], rtol=0, atol=0)


@pytest.mark.parametrize("window", [None, 1, 3])
def test_attention_matches_a_direct_softmax(window):
    torch.manual_seed(0)
    attn = Attention(16, 2, rope_theta=10000.0, window=window).double()
    x = torch.randn(1, 9, 16, dtype=torch.float64)
    ctx = StepContext(0, 9)
    positions = ctx.positions(x.device)
    q, (k, v) = attn.queries(x, positions), attn.keys_values(x, positions)
    scores = q @ k.mT / 8**0.5  # [B, H, T, T]
    i, j = torch.arange(9)[:, None], torch.arange(9)[None, :]
    allowed = (j <= i) & ((i - j < window) if window is not None else True)
    expected = attn.output(torch.softmax(scores.masked_fill(~allowed, float("-inf")), -1) @ v)
    torch.testing.assert_close(attn(x, ctx), expected, rtol=0, atol=1e-12)
    store: dict = {}
    attn(x, ctx, store)
    kept = store["kv"]
    assert isinstance(kept, KVWindow) and kept.end == 9
    assert kept.keys.shape[2] == (9 if window is None else window - 1)


@pytest.mark.parametrize(("mode", "lead"), [("shared", 1), ("per_head", 4)])
def test_memory_parameters_share_or_own_the_initial_memory(mode, lead):
    cfg = AtlasConfig.from_preset("atlas", memory_init=mode)
    params = MemoryParameters(cfg.memory_config(), 4, 16, mode, 1.0)
    params.reset_parameters()
    assert params.W2.shape == (lead, 64, 153)  # hidden 4 * 16, C(16 + 2, 2) poly features
    assert params.feature_coeffs.shape == (4, 3)  # always per head
    op = params(torch.zeros(1))
    assert op["W2"].shape == (4, 64, 153) and op["W1"].shape == (4, 16, 64)


def test_zero_initial_memory_is_not_a_parameter():
    cfg = AtlasConfig.from_preset("deltanet")
    params = MemoryParameters(cfg.memory_config(), 4, 16, "zero", 1.0)
    assert list(params.parameters()) == []
    w = params(torch.zeros(1, dtype=torch.float64))["W"]
    assert w.shape == (4, 16, 16) and w.dtype == torch.float64 and not w.any()


def _reference(preset: str, k, v, q, gates):
    """Token recurrences of the linear-memory presets, written out. Shapes [B, T, H, D], gates [B, T, H]."""
    B, T, H, D = k.shape
    W = k.new_zeros(B, H, D, D)
    out = []
    for t in range(T):
        kt, vt, qt = k[:, t], v[:, t], q[:, t]
        eta = gates["eta"][:, t, :, None, None]
        alpha = gates.get("alpha", torch.ones_like(gates["eta"]))[:, t, :, None, None]
        if preset == "deltanet":  # W <- W - eta (W k - v) k^T
            W = W - eta * ((W @ kt[..., None]) - vt[..., None]) @ kt[..., None, :]
        elif preset == "gated_deltanet":  # decay first: W <- a W - eta (a W k - v) k^T
            W = alpha * W
            W = W - eta * ((W @ kt[..., None]) - vt[..., None]) @ kt[..., None, :]
        else:  # gated linear attention: W <- a W + eta v k^T
            W = alpha * W + eta * vt[..., None] @ kt[..., None, :]
        out.append((W @ qt[..., None])[..., 0])
    return torch.stack(out, dim=1)


@pytest.mark.parametrize("preset", ["deltanet", "gated_deltanet", "linear_attention"])
def test_linear_presets_run_their_recurrence(preset):
    """Chunk size 1 is the exact token recurrence (larger chunks take every gradient at the chunk start)."""
    torch.manual_seed(0)
    config = AtlasConfig.from_preset(preset, memory={"chunk_size": 1})
    layer = MemoryLayer(config).double()
    for p in layer.parameters():
        torch.nn.init.normal_(p, std=0.3)
    x = torch.randn(2, 10, config.hidden_size, dtype=torch.float64)
    ctx = StepContext(0, 10)
    q, k, v = layer.project(x, ctx, None)
    gates = layer.gate_values(x, None)
    assert ("alpha" in gates) == (preset != "deltanet")
    expected = layer.output(_reference(preset, k, v, q, gates), x)
    torch.testing.assert_close(layer(x, ctx), expected, rtol=0, atol=1e-10)


def test_retrieval_reads_the_memory_without_writing():
    torch.manual_seed(0)
    config = AtlasConfig.from_preset("gated_deltanet")
    layer = MemoryLayer(config).double()
    x = torch.randn(2, 8, config.hidden_size, dtype=torch.float64)
    store: dict = {}
    layer(x, StepContext(0, 8), store)
    state = store["state"]
    q = F.normalize(torch.randn(2, 5, 4, 16, dtype=torch.float64), dim=-1)
    before = {n: t.clone() for n, t in state.tensors().items()}
    o = layer.retrieve(q, state)
    expected = torch.einsum("bhij,bthj->bthi", state.weights["W"], q)
    torch.testing.assert_close(o, expected, rtol=0, atol=1e-12)
    for name, t in state.tensors().items():
        assert torch.equal(t, before[name]), name
