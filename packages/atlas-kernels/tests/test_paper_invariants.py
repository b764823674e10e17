"""The memory op reduces to the closed forms the paper names (float64)."""

import pytest
import torch
import torch.nn.functional as F

from atlas_kernels import MemoryConfig, init_memory_params, memory_chunk, memory_naive_chunked
from atlas_kernels.testing import random_inputs, rel_err

B, T, H, D = 2, 33, 2, 4


def _zero_linear(cfg):
    return {"W": torch.zeros(H, D, cfg.feature_dim(D), dtype=torch.float64)}


@pytest.mark.parametrize("decay_first", [False, True])
@pytest.mark.parametrize("chunk_size", [1, 16])
def test_online_l2_linear_is_the_gated_delta_rule(decay_first, chunk_size):
    cfg = MemoryConfig(
        memory="linear", bias="l2", window=1, optimizer="gd", chunk_size=chunk_size, decay_first=decay_first
    )
    q, k, v, gates = random_inputs(B, T, H, D, seed=1, eta_scale=0.5)
    gates = {"alpha": gates["alpha"], "eta": gates["eta"]}
    p = init_memory_params(cfg, H, D, D, dtype=torch.float64)
    o, state = memory_chunk(q, k, v, gates, p, cfg)
    W = p["W"].expand(B, H, D, D)
    outs = []
    for t in range(T):
        kt, vt, qt = k[:, t, ..., None], v[:, t, ..., None], q[:, t, ..., None]
        a, e = gates["alpha"][:, t, :, None, None], gates["eta"][:, t, :, None, None]
        read = a * W if decay_first else W  # fla's gated delta rule decays before the delta step
        W = a * W - e * (read @ kt - vt) @ kt.mT
        outs.append((W @ qt).squeeze(-1))
    if chunk_size == 1:
        assert rel_err(torch.stack(outs, 1), o) < 1e-12
        assert rel_err(W, state.weights["W"]) < 1e-12
        return
    # b > 1 reads every error of a chunk at the chunk-start weights (the paper's chunkwise parallel training), so
    # the token recurrence is no longer the reference; the naive-chunked oracle of the same rule is
    o_ref, s_ref = memory_naive_chunked(q, k, v, gates, p, cfg)
    assert rel_err(o_ref, o) < 1e-12
    assert rel_err(s_ref.weights["W"], state.weights["W"]) < 1e-12
    assert rel_err(torch.stack(outs, 1), o) > 1e-3  # the chunk size took effect


def test_windowed_dot_linear_is_swla():
    """Each token is written c times, once per step while it is in the window (Eq. 20, corrected sign)."""
    c = 3
    cfg = MemoryConfig(memory="linear", bias="dot", window=c, optimizer="gd", chunk_size=8)
    q, k, v, gates = random_inputs(B, T, H, D, seed=2)
    o, _ = memory_chunk(q, k, v, gates, _zero_linear(cfg), cfg)
    W = torch.zeros(B, H, D, D, dtype=torch.float64)
    outs = []
    for t in range(T):
        write = sum(
            gates["gamma"][:, i, :, None, None] * v[:, i, ..., None] @ k[:, i, ..., None].mT
            for i in range(max(0, t - c + 1), t + 1)
        )
        W = gates["alpha"][:, t, :, None, None] * W + gates["eta"][:, t, :, None, None] * write
        outs.append((W @ q[:, t, ..., None]).squeeze(-1))
    assert rel_err(torch.stack(outs, 1), o) < 1e-12


@pytest.mark.parametrize("temperature", ["fixed", "learned"])
@pytest.mark.parametrize("chunk_size", [1, 5])
def test_online_hebbian_exp_memory_is_causal_attention(chunk_size, temperature):
    """Linear memory, dot bias, exp features, c = 1, alpha = eta = 1: y_t = sum_{i<=t} exp(tau_h q_t.k_i) v_i;
    with the softmax normaliser (the same memory storing 1s) it is scaled_dot_product_attention at scale tau_h
    (tau = 1 for exp_temperature="fixed")."""
    cfg = MemoryConfig(
        memory="linear",
        bias="dot",
        window=1,
        optimizer="gd",
        feature_map="exp",
        exp_temperature=temperature,
        chunk_size=chunk_size,
    )
    q, k, v, _ = random_inputs(B, T, H, D, seed=3)
    tau = torch.tensor([0.7, 3.0], dtype=torch.float64)  # per head; sqrt(D) = 2 is the initial value
    params = {"feature_coeffs": tau[:, None]} if temperature == "learned" else {}
    if temperature == "fixed":
        tau = torch.ones(H, dtype=torch.float64)
    ones = torch.ones(B, T, H)
    gates = {"eta": ones.double()}
    o, _ = memory_chunk(q, k, v, gates, params, cfg)
    scores = (torch.einsum("bthd,bshd->bhts", q, k) * tau[:, None, None]).exp().tril()
    assert rel_err(torch.einsum("bhts,bshd->bthd", scores, v), o) < 1e-12
    z, _ = memory_chunk(q, k, torch.ones(B, T, H, 1, dtype=torch.float64), gates, params, cfg)
    scaled_q = q * tau[:, None]  # SDPA takes one scale: the per-head temperature goes into q
    sdpa = F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (scaled_q, k, v)), is_causal=True, scale=1.0)
    assert rel_err(sdpa.transpose(1, 2), o / z) < 1e-12


def test_exp_temperature_starts_at_attention_logit_range():
    """tau_0 = sqrt(Dk): exp(tau_0 cos) = exp(q'.k' / sqrt(Dk)) for q', k' of unit RMS (norm sqrt(Dk))."""
    cfg = MemoryConfig(memory="mlp", bias="dot", feature_map="exp", exp_init_keys=2, exp_temperature="learned")
    p = init_memory_params(cfg, H, 16, 16, dtype=torch.float64)
    assert torch.equal(p["feature_coeffs"], torch.full((H, 1), 4.0, dtype=torch.float64))
    assert "feature_coeffs" not in init_memory_params(
        MemoryConfig(memory="mlp", bias="dot", feature_map="exp", exp_temperature="fixed"), H, 16, 16
    )


def test_poly_with_degree_one_coefficients_equals_identity_features():
    ident = MemoryConfig(memory="mlp", bias="l2", window=2, optimizer="momentum", feature_map="identity")
    poly = MemoryConfig(memory="mlp", bias="l2", window=2, optimizer="momentum", feature_map="poly", poly_degree=2)
    q, k, v, gates = random_inputs(B, T, H, D, seed=4, eta_scale=0.2)
    p = init_memory_params(ident, H, D, D, dtype=torch.float64)
    pp = dict(p)
    W2 = torch.zeros(H, p["W2"].shape[1], poly.feature_dim(D), dtype=torch.float64)
    W2[..., 1 : 1 + D] = p["W2"]  # the degree-1 block
    pp["W2"], pp["feature_coeffs"] = W2, torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64)
    o_id, _ = memory_chunk(q, k, v, gates, p, ident)
    o_poly, _ = memory_chunk(q, k, v, gates, pp, poly)
    assert rel_err(o_id, o_poly) < 1e-12
