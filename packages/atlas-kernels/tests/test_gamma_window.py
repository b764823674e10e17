"""gamma="per_step": c gates per step (Eqs. 8-9), gates["gamma"] [B, T, H, c], entry j weighting position t - j.

float64 throughout: chunk op == token oracle (outputs, final state, every input gradient), segments and
token-by-token decoding == one call, and the per-token form gamma="token" as the special case
window_gates[t, j] = gamma_{t-j}.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from atlas_kernels import (
    MemoryConfig,
    MemoryConfigError,
    api,
    init_memory_params,
    memory_chunk,
    memory_naive,
    memory_naive_chunked,
)
from atlas_kernels.ops.memory.triton.support import common_unsupported
from atlas_kernels.testing import assert_pieces_match_one_call, random_inputs, rel_err

H, D = 2, 4
BASE = [
    MemoryConfig(memory="linear", bias="l2", optimizer="gd", feature_map="identity"),
    MemoryConfig(memory="mlp", bias="l2", optimizer="momentum", feature_map="identity", memory_norm=False),
    MemoryConfig(memory="mlp", bias="dot", optimizer="gd", feature_map="poly", memory_norm=False),
    MemoryConfig(memory="linear", bias="l2", optimizer="muon", feature_map="identity"),
]


def _id(cfg):
    return f"{cfg.memory}-{cfg.optimizer}-{cfg.feature_map}-{cfg.bias}-c{cfg.window}-b{cfg.chunk_size}"


def _base_id(cfg):
    return f"{cfg.memory}-{cfg.optimizer}-{cfg.feature_map}-{cfg.bias}"


def _cfg(base, c, b):
    return dataclasses.replace(base, gamma="per_step", window=c, chunk_size=b)


def _window_inputs(T, c, seed, requires_grad=False, eta_scale=0.1):
    q, k, v, gates = random_inputs(1, T, H, D, seed=seed, eta_scale=eta_scale)
    g = torch.Generator().manual_seed(seed + 100)
    gates["gamma"] = 0.5 + 0.5 * torch.rand(1, T, H, c, generator=g, dtype=torch.float64)
    if requires_grad:
        q, k, v = (t.requires_grad_() for t in (q, k, v))
        gates = {n: t.requires_grad_() for n, t in gates.items()}
    return q, k, v, gates


def _params(cfg, requires_grad=False):
    p = init_memory_params(cfg, H, D, D, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    return {n: t.requires_grad_(requires_grad) for n, t in p.items()}


def _oracle(cfg):
    return memory_naive if cfg.chunk_size == 1 else memory_naive_chunked


def _token_to_window(gamma: torch.Tensor, c: int) -> torch.Tensor:
    """[B, T, H] per-token gates -> [B, T, H, c] with entry j of token t = gamma_{t-j} (0 before the start)."""
    cols = [torch.nn.functional.pad(gamma, (0, 0, j, 0))[:, : gamma.shape[1]] for j in range(c)]
    return torch.stack(cols, dim=-1)


@pytest.mark.parametrize("base", BASE, ids=_base_id)
@pytest.mark.parametrize("b", [1, 4, 16])
@pytest.mark.parametrize("c", [1, 2, 3, 5])
@pytest.mark.parametrize("T", [7, 33])
def test_chunk_equals_oracle_with_gradients(base, c, b, T):
    cfg = _cfg(base, c, b)
    q, k, v, gates = _window_inputs(T, c, seed=T + c + b, requires_grad=True)
    p = _params(cfg, requires_grad=True)
    if not cfg.uses_momentum:
        gates["theta"].requires_grad_(False)
    weight = torch.randn(1, T, H, D, dtype=torch.float64, generator=torch.Generator().manual_seed(9))
    inputs = {"q": q, "k": k, "v": v, **{f"gate.{n}": t for n, t in gates.items() if t.requires_grad}, **p}
    results = []
    for op in (_oracle(cfg), memory_chunk):
        o, s = op(q, k, v, gates, p, cfg)
        grads = torch.autograd.grad((o * weight).sum(), list(inputs.values()), allow_unused=True)
        results.append((o, s, dict(zip(inputs, grads))))
    (o_ref, s_ref, g_ref), (o, s, g) = results
    assert rel_err(o_ref, o) < 1e-9
    ref, out = s_ref.tensors(), s.tensors()
    assert ref.keys() == out.keys()
    for name in ref:
        assert rel_err(ref[name], out[name]) < 1e-9, name
    assert g["gate.gamma"].shape == (1, T, H, c)
    for name in inputs:
        assert (g_ref[name] is None) == (g[name] is None), name
        if g_ref[name] is not None:
            assert rel_err(g_ref[name], g[name]) < 1e-8, name


def test_gates_pointing_before_the_start_are_ignored():
    """Offsets j > t name padding: their gates change nothing, and get no gradient."""
    cfg = _cfg(BASE[2], 3, 4)
    q, k, v, gates = _window_inputs(7, 3, seed=2)
    p = _params(cfg)
    gamma = gates["gamma"].requires_grad_()
    o, _ = memory_chunk(q, k, v, gates, p, cfg)
    (grad,) = torch.autograd.grad(o.square().sum(), gamma)
    before = torch.zeros_like(gamma, dtype=torch.bool)
    before[:, 0, :, 1:], before[:, 1, :, 2] = True, True
    assert grad[before].abs().max() == 0 and grad[~before].abs().min() > 0
    poked = {**gates, "gamma": torch.where(before, 7.0, gamma.detach())}
    assert torch.equal(memory_chunk(q, k, v, poked, p, cfg)[0], o)


@pytest.mark.parametrize("base", BASE[:3], ids=_base_id)
@pytest.mark.parametrize("c", [1, 2, 3, 5])
@pytest.mark.parametrize("b", [1, 4, 16])
def test_token_gates_broadcast_reproduce_gamma_token(base, c, b):
    """window_gates[t, j] = gamma_{t-j}: outputs, weights and the gamma gradient (summed along the diagonals)."""
    token = dataclasses.replace(base, window=c, chunk_size=b)
    window = dataclasses.replace(token, gamma="per_step")
    q, k, v, gates = random_inputs(1, 33, H, D, seed=c * b, eta_scale=0.1)
    gamma = gates["gamma"].clone().requires_grad_()
    p = _params(token)
    o_tok, s_tok = memory_chunk(q, k, v, {**gates, "gamma": gamma}, p, token)
    o_win, s_win = memory_chunk(q, k, v, {**gates, "gamma": _token_to_window(gamma, c)}, p, window)
    assert rel_err(o_tok, o_win) < 1e-12
    for name in s_tok.weights:
        assert rel_err(s_tok.weights[name], s_win.weights[name]) < 1e-12, name
    assert torch.equal(s_tok.halo_k, s_win.halo_k) and torch.equal(s_tok.halo_v, s_win.halo_v)
    weight = torch.randn_like(o_tok)
    (g_tok,) = torch.autograd.grad((o_tok * weight).sum(), gamma)
    (g_win,) = torch.autograd.grad((o_win * weight).sum(), gamma)
    assert rel_err(g_tok, g_win) < 1e-10


def test_token_gates_broadcast_reproduce_gamma_token_in_the_oracle():
    token = MemoryConfig(memory="mlp", bias="l2", optimizer="momentum", window=3, chunk_size=1)
    window = dataclasses.replace(token, gamma="per_step")
    q, k, v, gates = random_inputs(1, 9, H, D, seed=4)
    p = _params(token)
    o_tok, _ = memory_naive(q, k, v, gates, p, token)
    o_win, _ = memory_naive(q, k, v, {**gates, "gamma": _token_to_window(gates["gamma"], 3)}, p, window)
    assert rel_err(o_tok, o_win) < 1e-12


SEGMENT_CONFIGS = [
    _cfg(BASE[0], 3, 4),
    _cfg(BASE[1], 5, 1),
    _cfg(BASE[2], 2, 16),
    _cfg(BASE[3], 3, 4),
    _cfg(MemoryConfig(memory="mlp", bias="l2", optimizer="gd", feature_map="exp", exp_init_keys=2), 3, 4),
    _cfg(MemoryConfig(memory="linear", bias="l2", optimizer="gd", exact_delta=True), 1, 4),
]


@pytest.mark.parametrize("cfg", SEGMENT_CONFIGS, ids=_id)
def test_segments_and_decoding_match_one_call(cfg):
    T = 23
    q, k, v, gates = _window_inputs(T, cfg.window, seed=7)
    cuts = [(0, 3), (3, 13), (13, 17)]  # uneven, not aligned with the chunk size
    assert_pieces_match_one_call(q, k, v, gates, _params(cfg), cfg, cuts, decode_from=17, tol=1e-12)


def test_decoding_without_gamma_uses_all_ones():
    """A missing gamma defaults to ones of width c, also when pending tokens of a partial chunk are resumed."""
    cfg = _cfg(BASE[0], 3, 4)
    q, k, v, gates = _window_inputs(6, 3, seed=5)
    p = _params(cfg)
    ones = {**gates, "gamma": torch.ones_like(gates["gamma"])}
    o_full, _ = memory_chunk(q, k, v, ones, p, cfg)
    no_gamma = {n: g for n, g in gates.items() if n != "gamma"}
    o1, s = memory_chunk(q[:, :3], k[:, :3], v[:, :3], {n: g[:, :3] for n, g in no_gamma.items()}, p, cfg)
    o2, _ = memory_chunk(q[:, 3:], k[:, 3:], v[:, 3:], {n: g[:, 3:] for n, g in no_gamma.items()}, p, cfg, s)
    assert rel_err(o_full, torch.cat([o1, o2], 1)) < 1e-12


def test_shapes_are_checked_and_named():
    cfg = _cfg(BASE[0], 3, 4)
    q, k, v, gates = _window_inputs(5, 3, seed=1)
    p = _params(cfg)
    for bad in (gates["gamma"][..., 0], gates["gamma"][..., :2]):
        with pytest.raises(ValueError, match=r"^gates\['gamma'\]: expected shape \[B, T, H, c\].*c = 3"):
            memory_chunk(q, k, v, {**gates, "gamma": bad}, p, cfg)
    token = dataclasses.replace(cfg, gamma="token")
    with pytest.raises(ValueError, match=r"^gates\['gamma'\]: expected shape \[B, T, H\]"):
        memory_chunk(q, k, v, gates, p, token)


def test_config_rejects_the_global_window_and_unknown_kinds():
    with pytest.raises(MemoryConfigError, match="^gamma: 'per_step'.*global"):
        MemoryConfig(window="global", gamma="per_step")
    with pytest.raises(MemoryConfigError, match="^gamma: expected one of token, per_step"):
        MemoryConfig(gamma="step")
    cfg = MemoryConfig(window=3, gamma="per_step")
    assert MemoryConfig.from_dict(cfg.to_dict()) == cfg
    assert MemoryConfig().gamma == "token"


@pytest.mark.parametrize("memory", ["linear", "mlp"])
def test_triton_kernels_refuse_window_gates(memory):
    cfg = MemoryConfig(memory=memory, optimizer="gd", window=3, gamma="per_step", chunk_size=4)
    assert common_unsupported(cfg, None, memory=(memory,), op="op")[0] == "gamma"
    assert api.triton_unsupported(cfg)[0] == "gamma"
    assert api.select_backend(torch.zeros(1, 3, 2, 4), cfg, "auto") == "torch"


def test_the_old_spelling_is_refused_with_the_new_one():
    with pytest.raises(MemoryConfigError, match="'window' is now spelled 'per_step'"):
        MemoryConfig(window=3, gamma="window")
