"""The learned temperature of the exp kernel, exp(tau_h q.k): chunk op == token oracle (float64), including the
gradient of tau, and the dual-form readout."""

from __future__ import annotations

import pytest
import torch

from atlas_kernels import MemoryConfig, init_memory_params, memory_chunk, memory_naive, memory_naive_chunked
from atlas_kernels.ops.memory.read import memory_read
from atlas_kernels.testing import random_inputs, rel_err

H, D, T = 2, 4, 11
TAU = (1.5, 2.5)  # around the initial sqrt(D) = 2, different per head
LEARNED = {"exp_temperature": "learned"}  # the default is "fixed" (tau = 1)


def _params(cfg, requires_grad=True):
    p = init_memory_params(cfg, H, D, D, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    p["feature_coeffs"] = torch.tensor(TAU, dtype=torch.float64)[:, None]
    return {n: t.requires_grad_(requires_grad) for n, t in p.items()}


CONFIGS = [
    MemoryConfig(memory="mlp", bias="l2", feature_map="exp", exp_init_keys=2, window=3, chunk_size=1, **LEARNED),
    MemoryConfig(memory="mlp", bias="dot", feature_map="exp", exp_init_keys=2, window=1, chunk_size=4, **LEARNED),
    MemoryConfig(memory="linear", bias="l2", feature_map="exp", exp_init_keys=0, window=2, chunk_size=4, **LEARNED),
    MemoryConfig(memory="gated_mlp", bias="l2", feature_map="exp", exp_init_keys=2, window=2, chunk_size=4, **LEARNED),
]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"{c.memory}-{c.bias}-c{c.window}-b{c.chunk_size}")
def test_chunk_equals_oracle_with_temperature_gradient(cfg):
    q, k, v, gates = random_inputs(1, T, H, D, seed=4, requires_grad=True)
    del gates["theta"]
    p = _params(cfg)
    weight = torch.randn(1, T, H, D, dtype=torch.float64, generator=torch.Generator().manual_seed(9))
    inputs = {"q": q, "k": k, "v": v, **{f"gate.{n}": t for n, t in gates.items()}, **p}
    oracle = memory_naive if cfg.chunk_size == 1 else memory_naive_chunked
    results = []
    for op in (oracle, memory_chunk):
        o, s = op(q, k, v, gates, p, cfg)
        grads = torch.autograd.grad((o * weight).sum(), list(inputs.values()))
        results.append((o, s, dict(zip(inputs, grads))))
    (o_ref, s_ref, g_ref), (o, s, g) = results
    assert rel_err(o_ref, o) < 1e-9
    for name in ("halo_k", "halo_v", "halo_gamma"):  # the oracle's exp weights are explicit Taylor matrices
        assert rel_err(s_ref.tensors()[name], s.tensors()[name]) < 1e-12, name
    if cfg.memory != "linear":  # W1 acts on the explicit hidden layer in both
        assert rel_err(s_ref.weights["W1"], s.weights["W1"]) < 1e-9
    assert g["feature_coeffs"].abs().min() > 0
    for name in inputs:
        assert rel_err(g_ref[name], g[name]) < 1e-8, name


def test_temperature_changes_the_output_and_fixed_is_tau_one():
    cfg = CONFIGS[1]
    q, k, v, gates = random_inputs(1, T, H, D, seed=5)
    p = _params(cfg, requires_grad=False)
    o, _ = memory_chunk(q, k, v, gates, p, cfg)
    fixed = MemoryConfig(**{**cfg.to_dict(), "ns_coeffs": cfg.ns_coeffs, "exp_temperature": "fixed"})
    rest = {n: t for n, t in p.items() if n != "feature_coeffs"}
    o_fixed, _ = memory_chunk(q, k, v, gates, rest, fixed)
    o_one, _ = memory_chunk(q, k, v, gates, {**rest, "feature_coeffs": torch.ones(H, 1, dtype=torch.float64)}, cfg)
    assert rel_err(o_fixed, o_one) < 1e-14
    assert rel_err(o_fixed, o) > 1e-3


def test_read_uses_the_temperature():
    cfg = CONFIGS[1]
    q, k, v, gates = random_inputs(1, T, H, D, seed=6)
    p = _params(cfg, requires_grad=False)
    _, state = memory_chunk(q, k, v, gates, p, cfg)
    probe = q[:, :3]
    read = memory_read(probe, p, cfg, state)
    o, _ = memory_chunk(probe, probe, v[:, :3], {"eta": torch.zeros(1, 3, H, dtype=torch.float64)}, p, cfg, state)
    assert rel_err(o, read) < 1e-12
