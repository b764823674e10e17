"""`MemoryConfig.decay_target="init"`: the decay pulls the inner weights toward W_0 instead of 0.

Oracle: the token loop with W_t = W_0 + alpha_t (W_{t-1} - W_0) + (update) (memory_naive_chunked); the chunk op's
closed form (A_j W_start + (1 - A_j) W_0) must match it in float64: outputs, final state and every input gradient,
the initial weights W_0 included.
"""

import dataclasses
import itertools

import pytest
import torch
import torch.nn.functional as F

import atlas_kernels.testing as kt
from atlas_kernels import MemoryConfig, api, init_memory_params, memory_chunk, memory_naive, memory_naive_chunked
from atlas_kernels.config import MemoryConfigError
from atlas_kernels.testing import assert_pieces_match_one_call, config_id, random_inputs, rel_err

H, D = 2, 4

GRID = [
    MemoryConfig(memory=m, optimizer=o, window=c, chunk_size=b, decay_target="init")
    for m, o, c, b in itertools.product(("linear", "mlp"), ("gd", "momentum", "muon"), (1, 3), (1, 4))
]
EXTRA = [
    MemoryConfig(memory="linear", decay_first=True, window=1, chunk_size=4, decay_target="init"),
    MemoryConfig(memory="linear", exact_delta=True, window=1, chunk_size=4, decay_target="init"),
    MemoryConfig(memory="linear", exact_delta=True, decay_first=True, chunk_size=3, decay_target="init"),
    MemoryConfig(memory="gated_mlp", optimizer="momentum", window=2, chunk_size=4, decay_target="init"),
    MemoryConfig(memory="linear", feature_map="poly", bias="dot", window=2, chunk_size=3, decay_target="init"),
    MemoryConfig(memory="mlp", window="global", chunk_size=3, decay_target="init"),
]


def _params(cfg, dtype=torch.float64):
    p = init_memory_params(cfg, H, D, D, dtype=dtype, generator=torch.Generator().manual_seed(0))
    return {n: t.requires_grad_() for n, t in p.items()}


def _compare(cfg, T, eta_scale, tol, seed=1):
    q, k, v, gates = random_inputs(2, T, H, D, seed=seed, requires_grad=True, eta_scale=eta_scale)
    oracle = memory_naive if cfg.exact_delta else memory_naive_chunked
    kt.assert_matches_oracle(q, k, v, gates, _params(cfg), cfg, oracle, tol)


@pytest.mark.parametrize("case", kt.oracle_cases(GRID, EXTRA), ids=kt.oracle_case_id)
def test_chunk_matches_oracle(case):
    _compare(*case)


def test_exp_features_without_init_keys_decay_the_explicit_layers_toward_w0():
    # first layer: W_0 = 0 (exp_init_keys = 0), W1 decays toward its W_0; the oracle truncates phi* (Taylor)
    cfg = MemoryConfig(memory="mlp", feature_map="exp", window=2, chunk_size=4, decay_target="init")
    _compare(cfg, 7, eta_scale=0.5, tol=1e-8)


@pytest.mark.parametrize("cfg", [GRID[9], GRID[15], GRID[19], GRID[23], EXTRA[2]], ids=config_id)
def test_segments_and_decoding_match_one_call(cfg):
    q, k, v, gates = random_inputs(2, 13, H, D, seed=5)
    with torch.no_grad():
        assert_pieces_match_one_call(q, k, v, gates, _params(cfg), cfg, [(0, 3), (3, 9)], decode_from=9, tol=1e-12)


@pytest.mark.parametrize("cfg", [GRID[5], GRID[14], GRID[23], EXTRA[0], EXTRA[1]], ids=config_id)
def test_init_equals_zero_when_alpha_is_one(cfg):
    q, k, v, gates = random_inputs(2, 9, H, D, seed=3)
    gates["alpha"] = torch.ones_like(gates["alpha"])
    p = _params(cfg)
    with torch.no_grad():
        o_init, s_init = memory_chunk(q, k, v, gates, p, cfg)
        o_zero, s_zero = memory_chunk(q, k, v, gates, p, dataclasses.replace(cfg, decay_target="zero"))
    assert rel_err(o_zero, o_init) < 1e-13
    for name, t in s_zero.tensors().items():
        assert rel_err(t, s_init.tensors()[name]) < 1e-13, name
    # and alpha < 1 does change the result (the option is not ignored)
    gates["alpha"] = torch.full_like(gates["alpha"], 0.9)
    with torch.no_grad():
        o_init, _ = memory_chunk(q, k, v, gates, p, cfg)
        o_zero, _ = memory_chunk(q, k, v, gates, p, dataclasses.replace(cfg, decay_target="zero"))
    assert rel_err(o_zero, o_init) > 1e-3


def _key_grad_norm(decay_target, T):
    """d mean(o^2) / dk for the MLP + LayerNorm memory, gd, eta 0.02, alpha 0.98, c = b = 1 (README numbers)."""
    cfg = MemoryConfig(memory="mlp", expansion=2, optimizer="gd", window=1, chunk_size=1, decay_target=decay_target)
    g = torch.Generator().manual_seed(0)
    B, Hh, Dh = 2, 2, 8
    k = F.normalize(torch.randn(B, T, Hh, Dh, generator=g, dtype=torch.float64), dim=-1).requires_grad_()
    q = F.normalize(torch.randn(B, T, Hh, Dh, generator=g, dtype=torch.float64), dim=-1)
    v = F.normalize(torch.randn(B, T, Hh, Dh, generator=g, dtype=torch.float64), dim=-1)
    gates = {
        "alpha": torch.full((B, T, Hh), 0.98, dtype=torch.float64),
        "eta": torch.full((B, T, Hh), 0.02, dtype=torch.float64),
    }
    p = init_memory_params(cfg, Hh, Dh, Dh, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    o, _ = memory_chunk(q, k, v, gates, p, cfg)
    (gk,) = torch.autograd.grad(o.pow(2).mean(), k)
    return gk.norm().item()


def test_init_keeps_outer_gradients_bounded_where_zero_explodes():
    # measured: zero 0.095 (T 64) -> 4.7 (T 256) -> 4e12 (T 1024); init 0.055 -> 0.044 -> 0.024
    zero = _key_grad_norm("zero", 256) / _key_grad_norm("zero", 64)
    init = _key_grad_norm("init", 256) / _key_grad_norm("init", 64)
    assert zero > 10.0
    assert init < 2.0


def test_config_validates_decay_target():
    assert MemoryConfig().decay_target == "zero"
    with pytest.raises(MemoryConfigError, match="^decay_target: expected one of zero, init"):
        MemoryConfig(decay_target="w0")
    with pytest.raises(MemoryConfigError, match="^decay_target: 'init' is not defined for feature_map=exp"):
        MemoryConfig(feature_map="exp", exp_init_keys=2, decay_target="init")
    MemoryConfig(feature_map="exp", exp_init_keys=0, decay_target="init")
    cfg = MemoryConfig(decay_target="init")
    assert MemoryConfig.from_dict(cfg.to_dict()) == cfg


def test_triton_linear_refuses_decay_target_init():
    """The linear kernel decays toward 0 only (the MLP kernels implement "init": tests/test_triton_mlp.py)."""
    cfg = MemoryConfig(memory="linear", window=2, chunk_size=4, decay_target="init")
    assert api.triton_unsupported(dataclasses.replace(cfg, memory="mlp")) is None
    field, reason = api.triton_unsupported(cfg)
    assert field == "decay_target" and "'init'" in reason
    assert api.triton_unsupported(dataclasses.replace(cfg, decay_target="zero")) is None
    if api.triton_available():
        with pytest.raises(ValueError, match="^decay_target: not supported by backend='triton'"):
            api.select_backend(torch.zeros(1, 3, 2, 4), cfg, "triton")
    assert api.select_backend(torch.zeros(1, 3, 2, 4), cfg, "auto") == "torch"
