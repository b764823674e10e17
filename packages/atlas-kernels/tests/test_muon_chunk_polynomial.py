"""muon_polynomial="chunk": the labelled approximation of Muon (one Newton-Schulz polynomial per chunk).

The chunk op's dual form (`muon_lowrank._ChunkPolynomial`) against the token oracle that applies the chunk's first
momentum's polynomial literally (`memory_naive_chunked`), float64: outputs, state, every input gradient. Then the
approximation's defining properties: exact Muon at chunk size 1, causal inside a chunk, the same over segments and
decoding as in one call, and not a silent no-op at chunk size > 1.
"""

from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch

import atlas_kernels.testing as kt
from atlas_kernels import MemoryConfig, init_memory_params, memory_chunk, memory_naive_chunked
from atlas_kernels.config import MemoryConfigError
from atlas_kernels.testing import assert_pieces_match_one_call, random_inputs, rel_err

H, D = 2, 4
GRID = [
    # the factored path with r x r products, as derived here (ns_eval "eigh" rounds the polynomial differently)
    MemoryConfig(
        memory=m,
        optimizer="muon",
        feature_map=f,
        window=c,
        chunk_size=4,
        muon_polynomial="chunk",
        ns_form="lowrank",
        ns_eval="matmul",
    )  # fmt: skip
    for m, f, c in itertools.product(("linear", "mlp", "gated_mlp"), ("identity", "poly"), (1, 3))
]
EXTRA = [
    dataclasses.replace(GRID[0], window="global", chunk_size=3),
    dataclasses.replace(GRID[3], decay_target="init"),
    dataclasses.replace(GRID[3], bias="dot", ns_steps=3),
    # the polynomial path ignores how exact Newton-Schulz would be computed
    dataclasses.replace(GRID[6], ns_form="materialise", window=2),
]


def _params(cfg, Dk=D, Dv=D, requires_grad=True):
    p = init_memory_params(cfg, H, Dk, Dv, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    return {n: t.requires_grad_(requires_grad) for n, t in p.items()}


# T = 7 and 13, not the option tests' usual 33: the approximation is ill-conditioned (a chunk's first momentum is
# rank-deficient against the later ones and its polynomial lifts their extra directions by up to a^k), so a 1e-15
# relative perturbation of the polynomial's input alone moves the oracle's values and gradients by up to 5e-10 at
# T = 13 (MLP, c = 3) and 5e-8 at T = 33; the chunk op, which rounds differently everywhere, lands within 5e-9 at 13.
CASES = [(c, 7, 0.5, 1e-10) for c in GRID + EXTRA] + [(c, 13, 0.1, 1e-8) for c in GRID]


@pytest.mark.parametrize("case", CASES, ids=kt.oracle_case_id)
def test_chunk_op_matches_the_literal_recurrence(case):
    cfg, T, eta_scale, tol = case
    q, k, v, gates = random_inputs(2, T, H, D, seed=3, requires_grad=True, eta_scale=eta_scale)
    kt.assert_matches_oracle(q, k, v, gates, _params(cfg), cfg, memory_naive_chunked, tol)


@pytest.mark.parametrize("memory", ["linear", "mlp"])
def test_exact_muon_at_chunk_size_one(memory):
    cfg = MemoryConfig(memory=memory, optimizer="muon", feature_map="poly", window=2, chunk_size=1)
    q, k, v, gates = random_inputs(2, 9, H, D, seed=4, eta_scale=0.3)
    o_exact, s_exact = memory_chunk(q, k, v, gates, _params(cfg, requires_grad=False), cfg)
    approx = dataclasses.replace(cfg, muon_polynomial="chunk")
    o, s = memory_chunk(q, k, v, gates, _params(approx, requires_grad=False), approx)
    assert rel_err(o_exact, o) < 1e-10
    for name, t in s_exact.tensors().items():
        assert rel_err(t, s.tensors()[name]) < 1e-10, name


def test_an_approximation_at_larger_chunks():
    """Chunk size 4 from a zero momentum: the first momentum of a chunk is rank-deficient against the later ones,
    and its polynomial lifts their extra directions by up to a^k (docs/muon.md): far from exact Muon."""
    cfg = MemoryConfig(memory="mlp", optimizer="muon", feature_map="poly", window=2, chunk_size=4)
    q, k, v, gates = random_inputs(2, 9, H, D, seed=4, eta_scale=0.3)
    o_exact, _ = memory_chunk(q, k, v, gates, _params(cfg, requires_grad=False), cfg)
    approx = dataclasses.replace(cfg, muon_polynomial="chunk")
    o, _ = memory_chunk(q, k, v, gates, _params(approx, requires_grad=False), approx)
    assert rel_err(o_exact[:, :1], o[:, :1]) < 1e-12  # a chunk's first token is exact
    assert rel_err(o_exact, o) > 1e-2


def test_causal_inside_a_chunk():
    """Changing tokens 6.. (the middle of the second chunk of 4) leaves outputs 0..5 as they were."""
    cfg = MemoryConfig(memory="mlp", optimizer="muon", feature_map="poly", window=3, chunk_size=4)
    cfg = dataclasses.replace(cfg, muon_polynomial="chunk")
    q, k, v, gates = random_inputs(1, 11, H, D, seed=5, eta_scale=0.3)
    p = _params(cfg, requires_grad=False)
    o, _ = memory_chunk(q, k, v, gates, p, cfg)
    q2, k2, v2 = (t.clone() for t in (q, k, v))
    g = torch.Generator().manual_seed(9)
    for t in (q2, k2):
        t[:, 6:] = torch.nn.functional.normalize(torch.randn(t[:, 6:].shape, generator=g, dtype=t.dtype), dim=-1)
    v2[:, 6:] = torch.randn(v2[:, 6:].shape, generator=g, dtype=v2.dtype)
    o2, _ = memory_chunk(q2, k2, v2, gates, p, cfg)
    assert torch.equal(o[:, :6], o2[:, :6])
    assert not torch.allclose(o[:, 6:], o2[:, 6:])


def test_segments_and_decoding_match_one_call():
    cfg = dataclasses.replace(GRID[5], chunk_size=4)
    q, k, v, gates = random_inputs(2, 13, H, D, seed=6, eta_scale=0.3)
    cuts = [(0, 5), (5, 10)]
    assert_pieces_match_one_call(q, k, v, gates, _params(cfg, requires_grad=False), cfg, cuts, 10, 1e-10)


def test_only_muon_takes_the_option():
    with pytest.raises(MemoryConfigError, match="muon_polynomial: only Muon"):
        MemoryConfig(optimizer="momentum", muon_polynomial="chunk")
    with pytest.raises(MemoryConfigError, match="muon_polynomial: expected one of token, chunk"):
        MemoryConfig(optimizer="muon", muon_polynomial="first")
    cfg = GRID[3]
    assert MemoryConfig.from_dict(cfg.to_dict()) == cfg
    assert MemoryConfig(optimizer="muon").muon_polynomial == "token"
