"""The linear gd memory with its full chunks batched (`linear_scan.linear_chunks`) against the per-chunk loop and
the token-loop oracles, float64: outputs, end state and every input gradient; resumed states and pieces; which
configurations take the batched path."""

from __future__ import annotations

import pytest
import torch

from atlas_kernels import MemoryConfig, memory_naive, memory_naive_chunked
from atlas_kernels.ops.memory import linear_scan
from atlas_kernels.ops.memory.chunk import memory_chunk_torch
from atlas_kernels.testing import (
    assert_matches_oracle,
    assert_pieces_match_one_call,
    config_id,
    leaf_inputs,
    random_loss_grads,
    result_errors,
    rounded_run,
)

H, D = 2, 4

BATCHED = [
    # linear attention (dot bias, c = 1) and its sliding-window twin with degree-2 features (SWLA)
    MemoryConfig(memory="linear", optimizer="gd", bias="dot", chunk_size=4),
    MemoryConfig(memory="linear", optimizer="gd", bias="dot", feature_map="poly", window=3, chunk_size=4),
    # the l2 bias: chunk-start gradients (gated delta rule without the exact WY form), with and without decay_first
    MemoryConfig(memory="linear", optimizer="gd", bias="l2", chunk_size=4),
    MemoryConfig(memory="linear", optimizer="gd", bias="l2", decay_first=True, chunk_size=4),
    # an Omega window longer than a chunk (the halo reaches two chunks back) and one-token chunks
    MemoryConfig(memory="linear", optimizer="gd", bias="l2", window=7, chunk_size=3),
    MemoryConfig(memory="linear", optimizer="gd", bias="l2", feature_map="poly", window=2, chunk_size=1),
    # the exact delta rule (DeltaNet; Gated DeltaNet with decay first), and with degree-2 features
    MemoryConfig(memory="linear", exact_delta=True, chunk_size=4),
    MemoryConfig(memory="linear", exact_delta=True, decay_first=True, chunk_size=4),
    MemoryConfig(memory="linear", exact_delta=True, feature_map="poly", chunk_size=3),
]


def _run(cfg, T, batch_linear, B=2, state=None, seed=3):
    q, k, v, gates, params = leaf_inputs(cfg, H, B=B, T=T, Dk=D, eta_scale=0.5, seed=seed)
    leaves = {"q": q, "k": k, "v": v, **{f"gate.{n}": g for n, g in gates.items()}, **params}
    o, s = memory_chunk_torch(q, k, v, gates, params, cfg, state=state, batch_linear=batch_linear)
    return random_loss_grads(o, s, leaves)


@pytest.mark.parametrize("T", [7, 33, 12])
@pytest.mark.parametrize("cfg", BATCHED, ids=config_id)
def test_batched_chunks_equal_the_per_chunk_loop(cfg, T):
    """Lengths with a short last chunk (7, 33) and without (12)."""
    assert linear_scan.batched_linear(cfg, D)
    errors = result_errors(_run(cfg, T, False), _run(cfg, T, True))
    worst = max(errors, key=errors.get)
    assert errors[worst] < 1e-12, (worst, errors[worst])


@pytest.mark.parametrize("cfg", BATCHED[::2] + BATCHED[3:4] + BATCHED[7:8], ids=config_id)
def test_batched_chunks_match_the_token_loop_oracles(cfg):
    """`memory_naive_chunked` (the token recurrence with every gradient taken at its chunk's start weights), and for
    the exact delta rule `memory_naive` (the token recurrence itself, which its chunks reproduce exactly)."""
    q, k, v, gates, params = leaf_inputs(cfg, H, B=2, T=33, Dk=D, eta_scale=0.1)
    oracle = memory_naive if cfg.exact_delta else memory_naive_chunked
    assert_matches_oracle(q, k, v, gates, params, cfg, oracle, 1e-10)


@pytest.mark.parametrize("cfg", [BATCHED[3], BATCHED[4], BATCHED[7]], ids=config_id)
def test_pieces_and_decoding_chain_through_the_batched_path(cfg):
    """A sequence cut where a chunk does not end (the resumed chunk's pending tokens and the halo inside the
    incoming state), then decoded token by token, equals one call."""
    q, k, v, gates, params = leaf_inputs(cfg, H, B=2, T=29, Dk=D, eta_scale=0.5, requires_grad=False)
    assert_pieces_match_one_call(q, k, v, gates, params, cfg, [(0, 6), (6, 17), (17, 25)], 25, 1e-12)


def test_the_state_before_the_last_chunk_resumes_a_short_tail():
    """T = 9, b = 4: the batched pair of chunks hands the tail chunk its start state; the returned state keeps it
    as `resume` (the chunk a later call completes), equal to the loop's."""
    cfg = BATCHED[3]
    q, k, v, gates, params = leaf_inputs(cfg, H, B=1, T=9, Dk=D, requires_grad=False)
    states = [memory_chunk_torch(q, k, v, gates, params, cfg, batch_linear=b)[1] for b in (False, True)]
    ref, out = (s.resume.tensors() for s in states)
    assert ref.keys() == out.keys()
    for name in ref:
        torch.testing.assert_close(out[name], ref[name], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize(
    "cfg",
    [
        MemoryConfig(memory="linear", optimizer="momentum", chunk_size=4),
        MemoryConfig(memory="linear", window="global", chunk_size=4),
        MemoryConfig(memory="linear", gamma="per_step", window=3, chunk_size=4),
        MemoryConfig(memory="linear", decay_target="init", chunk_size=4),
        MemoryConfig(memory="linear", feature_map="exp", chunk_size=4),
        MemoryConfig(memory="linear", optimizer="muon", chunk_size=4),
        MemoryConfig(memory="mlp", optimizer="gd", chunk_size=4),
    ],
    ids=config_id,
)
def test_other_configurations_keep_the_per_chunk_loop(cfg):
    assert not linear_scan.batched_linear(cfg, D)


def test_wide_l2_features_keep_the_loop_and_dot_features_do_not():
    """Under the l2 bias every chunk carries an F x F matrix: degree-2 features of 64-dim keys (2,145 wide) stay
    on the loop; under the dot bias the matrix is a scalar."""
    l2 = MemoryConfig(memory="linear", optimizer="gd", bias="l2", feature_map="poly")
    assert linear_scan.batched_linear(l2, 16) and not linear_scan.batched_linear(l2, 64)
    assert linear_scan.batched_linear(MemoryConfig(memory="linear", optimizer="gd", bias="dot", feature_map="poly"), 64)


def test_the_batched_path_runs_when_it_should(monkeypatch):
    """memory_chunk_torch takes it for an eligible config with identity features by default (not under checkpoint,
    not for a sequence shorter than a chunk), with polynomial features when asked, and not when told not to."""
    calls = []
    real = linear_scan.linear_chunks

    def spy(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr("atlas_kernels.ops.memory.chunk.linear_chunks", spy)
    cfg = BATCHED[2]
    q, k, v, gates, params = leaf_inputs(cfg, H, T=9, Dk=D, requires_grad=False)
    memory_chunk_torch(q, k, v, gates, params, cfg)
    assert calls == [1]
    memory_chunk_torch(q, k, v, gates, params, cfg, checkpoint=True)
    memory_chunk_torch(q, k, v, gates, params, cfg, batch_linear=False)
    memory_chunk_torch(q[:, :3], k[:, :3], v[:, :3], {n: g[:, :3] for n, g in gates.items()}, params, cfg)
    assert calls == [1]
    poly = BATCHED[1]
    q, k, v, gates, params = leaf_inputs(poly, H, T=9, Dk=D, requires_grad=False)
    memory_chunk_torch(q, k, v, gates, params, poly)
    assert calls == [1]
    memory_chunk_torch(q, k, v, gates, params, poly, batch_linear=True)
    assert calls == [1, 1]


def test_a_halo_of_the_wrong_size_is_refused():
    cfg = BATCHED[4]
    q, k, v, gates, params = leaf_inputs(cfg, H, T=6, Dk=D, requires_grad=False)
    _, state = memory_chunk_torch(q, k, v, gates, params, cfg)
    state.halo_k = state.halo_k[:, :, 1:]
    from atlas_kernels.ops.memory.inputs import prepare_inputs

    x = prepare_inputs(q, k, v, gates, params, cfg)
    with pytest.raises(ValueError, match="halo of 6, got T=6 and a halo of 5"):
        linear_scan.linear_chunks(x, state, params, cfg)


@pytest.mark.parametrize("cfg", [BATCHED[3], BATCHED[1]], ids=config_id)
def test_the_batched_path_traces_without_graph_break(cfg):
    """torch.compile(fullgraph=True) of the op through the batched path (dynamo only), equal to the eager op."""
    import torch._dynamo

    from atlas_kernels.ops.features.poly import mark_compile_constants

    q, k, v, gates, params = leaf_inputs(cfg, H, T=11, Dk=D, requires_grad=False)
    torch._dynamo.reset()
    mark_compile_constants()
    traced = torch.compile(memory_chunk_torch, fullgraph=True, backend="eager")
    o, _ = traced(q, k, v, gates, params, cfg, batch_linear=True)
    torch.testing.assert_close(o, memory_chunk_torch(q, k, v, gates, params, cfg, batch_linear=True)[0])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize(
    "cfg",
    [
        MemoryConfig(memory="linear", exact_delta=True, decay_first=True, chunk_size=16),
        MemoryConfig(memory="linear", optimizer="gd", bias="l2", window=4, chunk_size=16),
    ],
    ids=config_id,
)
def test_low_precision_is_as_accurate_as_the_loop(cfg, dtype):
    """16 chunks of 16 (T 255) in float32 and bf16 (computed in float32, returned in bf16): the batched path's
    largest relative error against float64 on the same rounded inputs (outputs, state, every gradient) is within
    1.5x the loop's."""
    run = lambda compute, b: rounded_run(cfg, 4, 255, 32, dtype, compute, batch_linear=b)  # noqa: E731
    ref = run(torch.float64, False)
    loop, batched = (max(result_errors(ref, run(dtype, b)).values()) for b in (False, True))
    assert 0 < batched <= 1.5 * loop, (batched, loop)
