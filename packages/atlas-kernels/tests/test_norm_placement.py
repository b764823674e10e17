"""`MemoryConfig.norm_placement="readout"`: the memory LayerNorm on the read-out only.

Oracle: the token loop whose window objective differentiates f_inner(x) = x + W1 s(W2 x) (no LayerNorm) and whose
output is y_t = q_t + LN(W1_t s(W2_t q_t)) (memory_naive_chunked). The chunk op must match it in float64: outputs,
every state tensor and every input gradient, the LayerNorm's affine parameters included.
"""

import dataclasses
import itertools

import pytest
import torch

import atlas_kernels.testing as kt
from atlas_kernels import (
    MemoryConfig,
    api,
    init_memory_params,
    memory_chunk,
    memory_naive,
    memory_naive_chunked,
    memory_read,
)
from atlas_kernels.config import MemoryConfigError
from atlas_kernels.testing import assert_pieces_match_one_call, config_id, random_inputs, rel_err

H, D = 2, 4

GRID = [
    MemoryConfig(memory=m, optimizer=o, window=c, chunk_size=b, norm_placement="readout")
    for m, o, c, b in itertools.product(("mlp", "gated_mlp"), ("gd", "momentum", "muon"), (1, 3), (1, 4))
]
EXTRA = [
    MemoryConfig(memory="mlp", bias="dot", window=2, chunk_size=3, norm_placement="readout"),
    MemoryConfig(memory="mlp", feature_map="poly", window=2, chunk_size=4, norm_placement="readout"),
    MemoryConfig(memory="mlp", window="global", chunk_size=3, norm_placement="readout"),
    MemoryConfig(memory="mlp", residual=False, window=2, chunk_size=4, norm_placement="readout"),
    MemoryConfig(memory="mlp", window=3, chunk_size=4, norm_placement="readout", decay_target="init"),
    MemoryConfig(memory="gated_mlp", window=3, chunk_size=4, gamma="per_step", norm_placement="readout"),
]


def _params(cfg, dtype=torch.float64):
    p = init_memory_params(cfg, H, D, D, dtype=dtype, generator=torch.Generator().manual_seed(0))
    # an LN affine away from (1, 0), so that a missing or misplaced LayerNorm shows in every comparison
    if "ln_weight" in p:
        g = torch.Generator().manual_seed(7)
        p["ln_weight"] = p["ln_weight"] + 0.3 * torch.randn(p["ln_weight"].shape, generator=g, dtype=dtype)
        p["ln_bias"] = p["ln_bias"] + 0.3 * torch.randn(p["ln_bias"].shape, generator=g, dtype=dtype)
    return {n: t.requires_grad_() for n, t in p.items()}


def _compare(cfg, T, eta_scale, tol, seed=1):
    q, k, v, gates = random_inputs(2, T, H, D, seed=seed, requires_grad=True, eta_scale=eta_scale)
    if cfg.gamma == "per_step":
        g = torch.Generator().manual_seed(seed + 1)
        gates["gamma"] = torch.rand(2, T, H, cfg.window, generator=g, dtype=torch.float64).requires_grad_()
    errors = kt.assert_matches_oracle(q, k, v, gates, _params(cfg), cfg, memory_naive_chunked, tol)
    assert {"grad.ln_weight", "grad.ln_bias"} <= errors.keys()


@pytest.mark.parametrize("case", kt.oracle_cases(GRID, EXTRA), ids=kt.oracle_case_id)
def test_chunk_matches_oracle(case):
    _compare(*case)


def test_exact_recurrence_is_the_chunked_oracle_at_b1():
    cfg = MemoryConfig(memory="mlp", optimizer="momentum", window=3, chunk_size=1, norm_placement="readout")
    q, k, v, gates = random_inputs(2, 9, H, D, seed=2)
    p = _params(cfg)
    with torch.no_grad():
        o, s = memory_naive(q, k, v, gates, p, cfg)
        o_ref, s_ref = memory_naive_chunked(q, k, v, gates, p, cfg)
    assert rel_err(o_ref, o) < 1e-13


@pytest.mark.parametrize("cfg", [GRID[1], GRID[3], GRID[7], GRID[10], GRID[11], EXTRA[4]], ids=config_id)
def test_segments_and_decoding_match_one_call(cfg):
    q, k, v, gates = random_inputs(2, 13, H, D, seed=5)
    with torch.no_grad():
        assert_pieces_match_one_call(q, k, v, gates, _params(cfg), cfg, [(0, 3), (3, 9)], decode_from=9, tol=1e-12)


@pytest.mark.parametrize("cfg", [GRID[3], GRID[7], GRID[11], GRID[15]], ids=config_id)
def test_inner_loop_is_the_unnormalised_memory_and_the_readout_is_normalised(cfg):
    """The weights follow the memory without LayerNorm exactly; the output is q + LN(branch) at those weights."""
    T = 12  # a multiple of b = 4: the last output is read at the final weights
    q, k, v, gates = random_inputs(2, T, H, D, seed=4)
    p = _params(cfg)
    plain = dataclasses.replace(cfg, memory_norm=False, norm_placement="inner")
    p_plain = {n: t for n, t in p.items() if not n.startswith("ln_")}
    with torch.no_grad():
        o, s = memory_chunk(q, k, v, gates, p, cfg)
        o_plain, s_plain = memory_chunk(q, k, v, gates, p_plain, plain)
        o_inner, _ = memory_chunk(q, k, v, gates, p, dataclasses.replace(cfg, norm_placement="inner"))
        read = memory_read(q[:, -1:], p, cfg, s)
    for name, t in s_plain.tensors().items():
        assert rel_err(t, s.tensors()[name]) < 1e-13, name
    assert rel_err(o[:, -1:], read) < 1e-12
    # the read-out is normalised (differs from the plain memory) and differs from the LayerNorm inside the memory
    assert rel_err(o_plain, o) > 1e-2
    assert rel_err(o_inner, o) > 1e-3


@pytest.mark.parametrize(
    "cfg", [GRID[0], GRID[5], GRID[11], GRID[14], EXTRA[0], MemoryConfig(memory="linear", window=2, chunk_size=4)]
)
def test_readout_without_memory_norm_is_the_op_without_norm(cfg):
    cfg = dataclasses.replace(cfg, memory_norm=False)
    q, k, v, gates = random_inputs(2, 9, H, D, seed=3)
    p = _params(cfg)
    assert not any(n.startswith("ln_") for n in p)
    with torch.no_grad():
        o_r, s_r = memory_chunk(q, k, v, gates, p, dataclasses.replace(cfg, norm_placement="readout"))
        o_i, s_i = memory_chunk(q, k, v, gates, p, dataclasses.replace(cfg, norm_placement="inner"))
        o_n, _ = memory_naive_chunked(q, k, v, gates, p, dataclasses.replace(cfg, norm_placement="readout"))
    assert torch.equal(o_r, o_i)
    for name, t in s_i.tensors().items():
        assert torch.equal(t, s_r.tensors()[name]), name
    assert rel_err(o_n, o_r) < 1e-12


def test_config_validates_norm_placement():
    assert MemoryConfig().norm_placement == "inner"
    with pytest.raises(MemoryConfigError, match="^norm_placement: expected one of inner, readout"):
        MemoryConfig(norm_placement="chunk")
    cfg = MemoryConfig(norm_placement="readout")
    assert cfg.memory_norm and not cfg.inner_norm
    assert MemoryConfig.from_dict(cfg.to_dict()) == cfg


def test_triton_refuses_readout_norm():
    cfg = MemoryConfig(memory="mlp", window=2, chunk_size=4, norm_placement="readout")
    assert api.triton_unsupported(dataclasses.replace(cfg, norm_placement="inner")) is None
    for c in (cfg, dataclasses.replace(cfg, memory="gated_mlp"), dataclasses.replace(cfg, memory="linear")):
        field, reason = api.triton_unsupported(c)
        assert field == "norm_placement" and "'readout'" in reason
    if api.triton_available():
        with pytest.raises(ValueError, match="^norm_placement: not supported by backend='triton'"):
            api.select_backend(torch.zeros(1, 3, 2, 4), cfg, "triton")
    assert api.select_backend(torch.zeros(1, 3, 2, 4), cfg, "auto") == "torch"
