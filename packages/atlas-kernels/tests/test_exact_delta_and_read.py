"""exact_delta (WY/UT chunk form of the online delta rule) == token recurrence for any chunk size; memory_read."""

import dataclasses

import pytest
import torch

from atlas_kernels import (
    MemoryConfig,
    MemoryConfigError,
    init_memory_params,
    memory_chunk,
    memory_naive,
    memory_read,
    memory_step,
)
from atlas_kernels.testing import config_id, random_inputs, rel_err, valid_configs

H, D = 2, 4


@pytest.mark.parametrize("decay_first", [False, True])
@pytest.mark.parametrize("feature_map", ["identity", "poly"])
@pytest.mark.parametrize("chunk_size", [4, 16])
def test_exact_delta_equals_recurrence_with_gradients(decay_first, feature_map, chunk_size):
    cfg = MemoryConfig(memory="linear", bias="l2", window=1, feature_map=feature_map, decay_first=decay_first)
    q, k, v, gates = random_inputs(2, 37, H, D, seed=chunk_size, requires_grad=True)
    gates.pop("theta")
    p = {n: t.requires_grad_() for n, t in init_memory_params(cfg, H, D, D, dtype=torch.float64).items()}
    o_ref, s_ref = memory_naive(q, k, v, gates, p, dataclasses.replace(cfg, chunk_size=1))
    o, s = memory_chunk(q, k, v, gates, p, dataclasses.replace(cfg, exact_delta=True, chunk_size=chunk_size))
    assert rel_err(o_ref, o) < 1e-12 and rel_err(s_ref.weights["W"], s.weights["W"]) < 1e-12
    leaves = [q, k, v, *gates.values(), *p.values()]
    for a, b in zip(torch.autograd.grad(o_ref.square().sum(), leaves), torch.autograd.grad(o.square().sum(), leaves)):
        assert rel_err(a, b) < 1e-11


def test_exact_delta_segments_and_decoding():
    cfg = MemoryConfig(memory="linear", bias="l2", window=1, decay_first=True, exact_delta=True, chunk_size=8)
    q, k, v, gates = random_inputs(1, 21, H, D, seed=2)
    p = init_memory_params(cfg, H, D, D, dtype=torch.float64)
    o_full, _ = memory_chunk(q, k, v, gates, p, cfg)
    o1, s = memory_chunk(q[:, :11], k[:, :11], v[:, :11], {n: g[:, :11] for n, g in gates.items()}, p, cfg)
    outs = [o1]
    for t in range(11, 21):
        o, s = memory_step(q[:, t], k[:, t], v[:, t], {n: g[:, t] for n, g in gates.items()}, p, cfg, s)
        outs.append(o[:, None])
    assert rel_err(o_full, torch.cat(outs, 1)) < 1e-12


@pytest.mark.parametrize("gamma", ["token", "per_step"])
def test_exact_delta_with_window_gates_and_values_narrower_than_a_chunk(gamma):
    """gamma="per_step" at c = 1 (the window's one gate is the token's own) and values narrower than a chunk
    (Dv = 3 < b = 8, keys of 5): the recurrence's outputs and state, gates gamma != 1, and the state's window empty
    after every chunk (c - 1 = 0 tokens)."""
    cfg = MemoryConfig(memory="linear", bias="l2", window=1, gamma=gamma)
    T, Dk, Dv = 21, 5, 3
    q, k, v, gates = random_inputs(1, T, H, Dk, Dv, seed=4)
    gates.pop("theta")
    steps = [1] if gamma == "per_step" else []
    gates["gamma"] = 0.5 + 0.5 * torch.rand(1, T, H, *steps, generator=torch.Generator().manual_seed(5)).double()
    p = init_memory_params(cfg, H, Dk, Dv, dtype=torch.float64)
    o_ref, s_ref = memory_naive(q, k, v, gates, p, dataclasses.replace(cfg, chunk_size=1))
    o, s = memory_chunk(q, k, v, gates, p, dataclasses.replace(cfg, exact_delta=True, chunk_size=8))
    assert rel_err(o_ref, o) < 1e-12 and rel_err(s_ref.weights["W"], s.weights["W"]) < 1e-12
    assert s.halo_k.shape[2] == s.halo_v.shape[2] == s.halo_gamma.shape[2] == 0


@pytest.mark.parametrize("fields", [{"window": 2}, {"memory": "mlp"}, {"bias": "dot"}, {"optimizer": "momentum"}])
def test_exact_delta_is_rejected_outside_the_delta_rule(fields):
    base = {"memory": "linear", "bias": "l2", "window": 1, "exact_delta": True}
    with pytest.raises(MemoryConfigError, match="^exact_delta"):
        MemoryConfig(**{**base, **fields})


@pytest.mark.parametrize(
    "cfg",
    [
        next(valid_configs(memory="mlp", optimizer="muon", feature_map="poly", bias="l2", window=2, chunk_size=4)),
        next(valid_configs(memory="gated_mlp", optimizer="gd", feature_map="exp", bias="l2", exp_init_keys=2)),
        next(valid_configs(memory="linear", optimizer="momentum", feature_map="identity", bias="dot")),
    ],
    ids=config_id,
)
def test_read_returns_the_output_of_the_state_weights(cfg):
    """Reading with the query of the last token returns that token's output, and never changes the state."""
    q, k, v, gates = random_inputs(1, 9, H, D, seed=4)
    p = init_memory_params(cfg, H, D, D, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    o, s = memory_chunk(q, k, v, gates, p, cfg)
    before = {n: t.clone() for n, t in s.tensors().items()}
    y = memory_read(q[:, -1:], p, cfg, s)
    assert rel_err(o[:, -1:], y) < 1e-12
    assert all(torch.equal(before[n], t) for n, t in s.tensors().items())
    # without a state: the initial weights, i.e. the output of a step with eta = 0 and alpha = 1
    zero = {"eta": torch.zeros(1, 1, H, dtype=torch.float64), "theta": torch.zeros(1, 1, H, dtype=torch.float64)}
    o0, _ = memory_chunk(q[:, :1], k[:, :1], v[:, :1], zero, p, cfg)
    assert rel_err(o0, memory_read(q[:, :1], p, cfg)) < 1e-12
