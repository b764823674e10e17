"""chunk op == naive oracle (float64): outputs, final state and every input gradient."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from atlas_kernels import init_memory_params, memory_chunk, memory_naive, memory_naive_chunked
from atlas_kernels.testing import config_id, random_inputs, rel_err, valid_configs

# Exp features run through truncated Taylor features in the oracle: small key dim, degree 14.
EXP = dict(exp_init_keys=2, exp_taylor_degree=14)
ALL = list(valid_configs(window=1, **EXP))
H, D = 2, 4


def _with(cfg, **changes):
    return dataclasses.replace(cfg, **changes)


def _params(cfg, seed=1, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    p = init_memory_params(cfg, H, D, D, dtype=torch.float64, generator=g)
    return {n: t.requires_grad_(requires_grad) for n, t in p.items()}


def _compare_states(s_ref, s_out, tol):
    if s_ref.explicit_exp:  # naive exp weights are explicit Taylor matrices; compare the rest
        names = [n for n in s_ref.tensors() if n.startswith("halo")]
    else:
        names = list(s_ref.tensors())
    ref, out = s_ref.tensors(), s_out.tensors()
    for name in names:
        assert rel_err(ref[name], out[name]) < tol, name


def test_grid_covers_every_defined_combination():
    # 3 memories x 3 optimizers x 3 features x 2 biases, minus momentum/muon on exp features (2 x 3 x 2).
    assert len(ALL) == 54 - 12


# Configs are parametrised as they run (window, chunk size), so the test ids name what is tested.
@pytest.mark.parametrize("cfg", [_with(c, window=w, chunk_size=1) for w in (1, 2, 5) for c in ALL], ids=config_id)
def test_chunk_b1_equals_token_recurrence(cfg):
    q, k, v, gates = random_inputs(2, 7, H, D, seed=cfg.window)
    p = _params(cfg)
    o_ref, s_ref = memory_naive(q, k, v, gates, p, cfg)
    o, s = memory_chunk(q, k, v, gates, p, cfg)
    assert o.shape == (2, 7, H, D)
    assert rel_err(o_ref, o) < 1e-9
    _compare_states(s_ref, s, 1e-9)


@pytest.mark.parametrize("T", [1, 33, 64])
@pytest.mark.parametrize(
    "cfg",
    [
        dataclasses.replace(c, window=w, chunk_size=1)
        for c, w in [
            (next(valid_configs(memory="mlp", optimizer="muon", feature_map="poly", bias="l2")), 5),
            (
                next(valid_configs(memory="gated_mlp", optimizer="momentum", feature_map="identity", bias="l2")),
                2,
            ),
            (next(valid_configs(memory="linear", optimizer="gd", feature_map="poly", bias="dot")), 5),
            (next(valid_configs(memory="mlp", optimizer="gd", feature_map="exp", bias="l2", **EXP)), 2),
        ]
    ],
    ids=config_id,
)
def test_chunk_b1_equals_recurrence_lengths(cfg, T):
    # The inner LayerNorm makes long recurrences chaotic (1e-14 in v -> 1e-3 after 64 tokens, in the oracle
    # itself), so long sequences are compared without it; short ones above cover it.
    cfg = _with(cfg, memory_norm=False)
    q, k, v, gates = random_inputs(1, T, H, D, seed=T, eta_scale=0.1)
    p = _params(cfg)
    o_ref, s_ref = memory_naive(q, k, v, gates, p, cfg)
    o, s = memory_chunk(q, k, v, gates, p, cfg)
    assert rel_err(o_ref, o) < 1e-9
    _compare_states(s_ref, s, 1e-9)


@pytest.mark.parametrize("cfg", [_with(c, window=3, chunk_size=4) for c in ALL], ids=config_id)
def test_chunk_equals_naive_chunked_with_gradients(cfg):
    """b = 4 over T = 11 (a short last chunk), window 3 reaching across chunk edges; all input gradients."""
    _assert_chunk_equals_naive_chunked(cfg)


@pytest.mark.parametrize("window", [2, 7])
def test_exp_dual_coefficients_across_chunk_edges(window):
    """exp features keep the first layer as coefficients over keys, the window's tokens owning the last c - 1 of them:
    c = 2 (one such token) and c = 7 with a 4-wide hidden layer (more window tokens than hidden units)."""
    base = next(valid_configs(memory="mlp", optimizer="gd", feature_map="exp", bias="l2", **EXP))
    _assert_chunk_equals_naive_chunked(_with(base, window=window, chunk_size=4, expansion=1))


def _assert_chunk_equals_naive_chunked(cfg):
    q, k, v, gates = random_inputs(1, 11, H, D, seed=3, requires_grad=True)
    p = _params(cfg, requires_grad=True)
    weight = torch.randn(1, 11, H, D, dtype=torch.float64, generator=torch.Generator().manual_seed(9))
    inputs = {"q": q, "k": k, "v": v, **{f"gate.{n}": t for n, t in gates.items()}, **p}
    results = []
    for op in (memory_naive_chunked, memory_chunk):
        o, s = op(q, k, v, gates, p, cfg)
        grads = torch.autograd.grad((o * weight).sum(), list(inputs.values()), allow_unused=True)
        results.append((o, s, dict(zip(inputs, grads))))
    (o_ref, s_ref, g_ref), (o, s, g) = results
    assert rel_err(o_ref, o) < 1e-9
    _compare_states(s_ref, s, 1e-9)
    for name in inputs:
        if g_ref[name] is None:  # theta with gd: unused by both
            assert g[name] is None or g[name].abs().max() == 0, name
            continue
        assert g[name] is not None, name
        assert rel_err(g_ref[name], g[name]) < 1e-8, name


@pytest.mark.parametrize(
    "cfg",
    [
        _with(c, window=w, chunk_size=16)
        for c, w in [
            (next(valid_configs(memory="gated_mlp", optimizer="muon", feature_map="identity", bias="l2")), 5),
            (next(valid_configs(memory="mlp", optimizer="momentum", feature_map="poly", bias="dot")), 2),
            (
                next(valid_configs(memory="linear", optimizer="gd", feature_map="identity", bias="l2")),
                "global",
            ),
        ]
    ],
    ids=config_id,
)
def test_chunk16_equals_naive_chunked(cfg):
    cfg = _with(cfg, memory_norm=False)  # see test_chunk_b1_equals_recurrence_lengths
    q, k, v, gates = random_inputs(2, 33, H, D, seed=16, eta_scale=0.1)
    p = _params(cfg)
    o_ref, s_ref = memory_naive_chunked(q, k, v, gates, p, cfg)
    o, s = memory_chunk(q, k, v, gates, p, cfg)
    assert rel_err(o_ref, o) < 1e-9
    _compare_states(s_ref, s, 1e-9)


def test_decay_first_chunked_with_gradients():
    cfg = next(valid_configs(memory="linear", optimizer="gd", feature_map="identity", bias="l2"))
    cfg = _with(cfg, decay_first=True, window=2, chunk_size=4)
    q, k, v, gates = random_inputs(1, 9, H, D, seed=5, requires_grad=True)
    p = _params(cfg, requires_grad=True)
    leaves = [q, k, v, gates["alpha"], gates["eta"], gates["gamma"], p["W"]]
    o_ref, _ = memory_naive_chunked(q, k, v, gates, p, cfg)
    o, _ = memory_chunk(q, k, v, gates, p, cfg)
    assert rel_err(o_ref, o) < 1e-10
    g_ref = torch.autograd.grad(o_ref.square().sum(), leaves)
    g = torch.autograd.grad(o.square().sum(), leaves)
    for a, b in zip(g_ref, g):
        assert rel_err(a, b) < 1e-9
