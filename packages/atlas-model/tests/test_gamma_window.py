"""Memory layers with gamma="per_step" (c window gates per token, atlas-kernels MemoryConfig.gamma)."""

import pytest
import torch

from atlas_model import AtlasConfig, AtlasForCausalLM
from atlas_model.layers import MemoryLayer, StepContext
from atlas_model.outputs import output_cache

VOCAB = 256
WINDOW = {"gamma": "per_step"}


def _model(dtype=torch.float64, seed=0, preset="atlas"):
    torch.manual_seed(seed)
    config = AtlasConfig.from_preset(preset, "tiny", memory=WINDOW)
    return AtlasForCausalLM(config).to(dtype).eval()


def _ids(batch, length, seed=1):
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def test_gate_head_is_c_wide_and_starts_at_gamma_init():
    config = AtlasConfig.from_preset("atlas", "tiny", memory=WINDOW)
    c = config.memory_config().window
    assert c > 1
    layer = MemoryLayer(config).double()
    gamma_names = [n for n in layer.gates.names if n.startswith("gamma")]
    assert gamma_names == [f"gamma_{j}" for j in range(c)]
    torch.nn.init.zeros_(layer.gates.up.weight)  # gates = sigmoid(bias): their initial values
    gates = layer.gate_values(torch.randn(2, 5, config.hidden_size, dtype=torch.float64), None)
    assert gates["gamma"].shape == (2, 5, config.memory_heads, c)
    torch.testing.assert_close(gates["gamma"], torch.full_like(gates["gamma"], config.gamma_init))


def test_initial_gates_reproduce_the_per_token_gate():
    """At the gates' initial values every step weights every window token by gamma_init, as gamma="token" does."""
    token_cfg = AtlasConfig.from_preset("atlas", "tiny", memory={"chunk_size": 4})
    window_cfg = AtlasConfig.from_preset("atlas", "tiny", memory={"chunk_size": 4, **WINDOW})
    torch.manual_seed(0)
    token, window = MemoryLayer(token_cfg).double(), MemoryLayer(window_cfg).double()
    shared = {n: t for n, t in token.state_dict().items() if not n.startswith("gates.")}
    window.load_state_dict(shared, strict=False)
    for layer in (token, window):
        torch.nn.init.zeros_(layer.gates.up.weight)
        layer.gates.reset_parameters()
    x = torch.randn(2, 11, token_cfg.hidden_size, dtype=torch.float64)
    ctx = StepContext(0, 11)
    torch.testing.assert_close(window(x, ctx), token(x, ctx), rtol=0, atol=1e-12)


def test_forward_and_backward_run():
    model = _model(torch.float32)
    model.train()
    ids = _ids(2, 12)
    out = model(ids, labels=ids)
    out.loss.backward()
    grads = [p.grad for n, p in model.named_parameters() if "gates.up" in n]
    assert grads and all(g is not None and torch.isfinite(g).all() and g.abs().sum() > 0 for g in grads)


@torch.no_grad()
def test_generate_equals_greedy_forward():
    model = _model()
    ids = _ids(2, 6)
    out = model.generate(ids, max_new_tokens=7, do_sample=False)
    greedy = ids
    for _ in range(7):
        nxt = model(greedy, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)
        greedy = torch.cat([greedy, nxt], dim=1)
    assert torch.equal(out, greedy)


@torch.no_grad()
def test_prefill_in_pieces_then_decoding_equals_full_forward():
    model = _model()
    ids = _ids(2, 21)
    full = model(ids, use_cache=False).logits
    first = model(ids[:, :5], use_cache=True)
    logits = [first.logits, model(ids[:, 5:12], past_key_values=output_cache(first), use_cache=True).logits]
    for t in range(12, 21):
        logits.append(model(ids[:, t : t + 1], cache=output_cache(first), use_cache=True).logits)
    torch.testing.assert_close(torch.cat(logits, dim=1), full, rtol=0, atol=1e-9)


@pytest.mark.parametrize("split", [None, 9])
@torch.no_grad()
def test_left_padding_does_not_change_the_tokens(split):
    """Window gates that point at padding are dropped (poly features: phi(0) != 0), also across cached calls
    (split: the padded prompt goes in two pieces, the second starting right after the pads)."""
    model = _model()
    ids = _ids(1, 12)
    pads = 8
    padded = torch.cat([torch.zeros(1, pads, dtype=ids.dtype), ids], dim=1)
    mask = torch.cat([torch.zeros(1, pads, dtype=torch.long), torch.ones_like(ids)], dim=1)
    expected = model(ids, use_cache=False).logits
    if split is None:
        got = model(padded, attention_mask=mask, use_cache=False).logits
    else:
        first = model(padded[:, :split], attention_mask=mask[:, :split], use_cache=True)
        rest = model(padded[:, split:], attention_mask=mask, past_key_values=output_cache(first), use_cache=True)
        got = torch.cat([first.logits, rest.logits], dim=1)
    torch.testing.assert_close(got[:, pads:], expected, rtol=0, atol=1e-9)
