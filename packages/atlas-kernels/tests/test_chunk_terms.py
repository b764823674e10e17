"""The per-chunk loop with every full chunk's state-independent terms built as one batch (`chunk_terms`) against the
loop building them chunk by chunk and against the token-loop oracle, float64: outputs, end state and every input
gradient; the batched terms themselves against the per-chunk builder; pieces; which calls take the path."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from atlas_kernels import MemoryConfig, memory_naive_chunked
from atlas_kernels.ops.memory import chunk_terms
from atlas_kernels.ops.memory.chunk import _split_chunks, memory_chunk_torch
from atlas_kernels.ops.memory.inputs import prepare_inputs
from atlas_kernels.ops.memory.params import initial_state
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
    # OmegaNet's memory (degree-2 features, l2, a window of 4) and DLA's (dot bias, c = 1)
    MemoryConfig(memory="mlp", optimizer="gd", feature_map="poly", window=4, chunk_size=4),
    MemoryConfig(memory="mlp", optimizer="gd", feature_map="poly", bias="dot", chunk_size=4),
    # Titans' momentum MLP, and a window longer than a chunk (the halo reaches two chunks back) on the gated MLP
    MemoryConfig(memory="mlp", optimizer="momentum", chunk_size=3),
    MemoryConfig(memory="gated_mlp", optimizer="gd", window=7, chunk_size=3),
    # Muon (the factored path, as at the paper sizes) without chunk checkpoints
    MemoryConfig(memory="mlp", optimizer="muon", feature_map="poly", window=4, chunk_size=4, ns_form="lowrank"),
    # linear memories the batched linear path leaves on the loop: SWLA's polynomial features, decay first with them
    MemoryConfig(memory="linear", optimizer="gd", bias="dot", feature_map="poly", window=3, chunk_size=4),
    MemoryConfig(memory="linear", optimizer="gd", bias="l2", decay_first=True, feature_map="poly", chunk_size=4),
    # per-step gates, a decay toward the initial weights, one-token chunks
    MemoryConfig(memory="mlp", optimizer="gd", gamma="per_step", window=3, chunk_size=4),
    MemoryConfig(memory="mlp", optimizer="momentum", decay_target="init", window=3, chunk_size=4),
    MemoryConfig(memory="mlp", optimizer="gd", feature_map="poly", window=2, chunk_size=1),
]


def _gates(cfg, gates, seed=5):
    """gamma="per_step" takes c gates per token ([B, T, H, c]), drawn in (0.5, 1)."""
    if cfg.gamma != "per_step":
        return gates
    g = gates["gamma"]
    per_step = 0.5 + 0.5 * torch.rand(
        *g.shape, cfg.window, generator=torch.Generator().manual_seed(seed), dtype=g.dtype
    )
    return {**gates, "gamma": per_step.requires_grad_(g.requires_grad)}


def _run(cfg, T, batch_terms, B=2, seed=3):
    q, k, v, gates, params = leaf_inputs(cfg, H, B=B, T=T, Dk=D, eta_scale=0.5, seed=seed)
    gates = _gates(cfg, gates)
    leaves = {"q": q, "k": k, "v": v, **{f"gate.{n}": g for n, g in gates.items()}, **params}
    o, s = memory_chunk_torch(q, k, v, gates, params, cfg, checkpoint=False, batch_terms=batch_terms)
    return random_loss_grads(o, s, leaves)


@pytest.mark.parametrize("T", [7, 33, 12])
@pytest.mark.parametrize("cfg", BATCHED, ids=config_id)
def test_batched_terms_equal_the_per_chunk_loop(cfg, T):
    """Lengths with a short last chunk (7, 33) and without (12)."""
    assert chunk_terms.batched_terms_apply(cfg)
    errors = result_errors(_run(cfg, T, False), _run(cfg, T, True))
    worst = max(errors, key=errors.get)
    assert errors[worst] < 1e-12, (worst, errors[worst])


@pytest.mark.parametrize("cfg", [BATCHED[0], BATCHED[2], BATCHED[3], BATCHED[6]], ids=config_id)
def test_batched_terms_match_the_token_loop_oracle(cfg):
    """`memory_naive_chunked`: the token recurrence with every gradient taken at its chunk's start weights. T = 11 as
    in test_memory_equivalence.py: over more chunks the MLP memories' LayerNorm amplifies float64 rounding (both the
    loop and the batched terms reach 4e-10 to 6e-8 against the oracle at T = 33)."""
    q, k, v, gates, params = leaf_inputs(cfg, H, B=2, T=11, Dk=D, eta_scale=0.1)
    assert_matches_oracle(q, k, v, gates, params, cfg, memory_naive_chunked, 1e-10)


@pytest.mark.parametrize("cfg", [BATCHED[0], BATCHED[3], BATCHED[7], BATCHED[8]], ids=config_id)
def test_each_chunks_terms_equal_the_per_chunk_builder(cfg):
    """Entry c of `batched_chunk_terms` is `chunk_terms` of chunk c after the halo the loop carries into it, field
    by field (the decays' too; the features as the chunk's step reads them, `chunk_features`)."""
    q, k, v, gates, params = leaf_inputs(cfg, H, B=2, T=12, Dk=D, eta_scale=0.5, requires_grad=False)
    x = prepare_inputs(q, k, v, _gates(cfg, gates), params, cfg)
    state = initial_state(params, cfg, x.k, D, dual_exp=True)
    batched = chunk_terms.batched_chunk_terms(x, state, params, cfg)
    chunks = _split_chunks(x, cfg.chunk_size)
    assert len(batched) == len(chunks) == 12 // cfg.chunk_size
    for c, xc in enumerate(chunks):
        ref = chunk_terms.chunk_terms(xc, state, params, cfg)
        # polynomial features are left to each chunk's step: what it computes from the batched window
        features = zip(("fk", "fq"), chunk_terms.chunk_features(batched[c], xc.q, params, cfg), (ref.fk, ref.fq))
        assert (batched[c].fk is None) == (cfg.feature_map == "poly")
        for name, got, want in features:
            torch.testing.assert_close(got, want, rtol=1e-13, atol=1e-14, msg=f"chunk {c}, {name}")
        for name in chunk_terms.ChunkTerms.__dataclass_fields__.keys() - {"fk", "fq"}:
            a, b = getattr(batched[c], name), getattr(ref, name)
            pairs = [(a, b)] if name != "d" else [(getattr(a, f), getattr(b, f)) for f in a.__dataclass_fields__]
            for got, want in pairs:
                assert (got is None) == (want is None), (c, name)
                if got is not None:
                    torch.testing.assert_close(got, want, rtol=1e-13, atol=1e-14, msg=f"chunk {c}, {name}")
        halo = chunk_terms.halo_size(cfg)  # the loop's next halo: the window's last c - 1 tokens
        state = dataclasses.replace(
            state, halo_k=ref.wk[:, :, ref.wk.shape[2] - halo :], halo_v=ref.wv[:, :, ref.wv.shape[2] - halo :],
            halo_gamma=ref.wg[:, :, ref.wg.shape[2] - halo :],
        )  # fmt: skip


@pytest.mark.parametrize("cfg", [BATCHED[0], BATCHED[2]], ids=config_id)
def test_pieces_and_decoding_chain_through_the_batched_terms(cfg):
    """A sequence cut where a chunk does not end, then decoded token by token, equals one call."""
    q, k, v, gates, params = leaf_inputs(cfg, H, B=2, T=29, Dk=D, eta_scale=0.5, requires_grad=False)
    assert_pieces_match_one_call(q, k, v, gates, params, cfg, [(0, 6), (6, 17), (17, 25)], 25, 1e-12)


@pytest.mark.parametrize(
    "cfg",
    [
        MemoryConfig(memory="mlp", window="global", chunk_size=4),
        MemoryConfig(memory="mlp", feature_map="exp", chunk_size=4),
        MemoryConfig(memory="linear", exact_delta=True, feature_map="poly", chunk_size=4),
    ],
    ids=config_id,
)
def test_growing_states_and_the_exact_delta_rule_keep_the_loop(cfg):
    assert not chunk_terms.batched_terms_apply(cfg)


def test_the_batched_terms_run_when_they_should(monkeypatch):
    """memory_chunk_torch builds them for an eligible config by default, not under checkpoint, not compiled, not for
    a sequence shorter than a chunk, not when told not to, and not where the batched linear path runs."""
    calls = []
    real = chunk_terms.batched_chunk_terms

    def spy(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr("atlas_kernels.ops.memory.chunk.batched_chunk_terms", spy)
    cfg = BATCHED[0]
    q, k, v, gates, params = leaf_inputs(cfg, H, T=9, Dk=D, requires_grad=False)
    memory_chunk_torch(q, k, v, gates, params, cfg)
    assert calls == [1]
    memory_chunk_torch(q, k, v, gates, params, cfg, checkpoint=True)
    memory_chunk_torch(q, k, v, gates, params, cfg, batch_terms=False)
    memory_chunk_torch(q[:, :3], k[:, :3], v[:, :3], {n: g[:, :3] for n, g in gates.items()}, params, cfg)
    linear = MemoryConfig(memory="linear", optimizer="gd", bias="dot", chunk_size=4)
    q, k, v, gates, params = leaf_inputs(linear, H, T=9, Dk=D, requires_grad=False)
    memory_chunk_torch(q, k, v, gates, params, linear)  # the batched linear path
    assert calls == [1]


def test_a_halo_of_the_wrong_size_is_refused():
    cfg = BATCHED[3]
    q, k, v, gates, params = leaf_inputs(cfg, H, T=6, Dk=D, requires_grad=False)
    _, state = memory_chunk_torch(q, k, v, gates, params, cfg)
    state.halo_k = state.halo_k[:, :, 1:]
    x = prepare_inputs(q, k, v, gates, params, cfg)
    with pytest.raises(ValueError, match="T=6 and a halo of 5"):
        chunk_terms.batched_chunk_terms(x, state, params, cfg)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_low_precision_is_as_accurate_as_the_loop(dtype):
    """OmegaNet's memory over 8 chunks of 16 (T 127) in float32 and bf16 (computed in float32, returned in bf16): the
    batched terms' largest relative error against float64 on the same rounded inputs (outputs, state, every
    gradient) is within 1.5x the loop's."""
    cfg = MemoryConfig(memory="mlp", optimizer="gd", feature_map="poly", window=8, chunk_size=16)
    run = lambda compute, b: rounded_run(cfg, 4, 127, 16, dtype, compute, checkpoint=False, batch_terms=b)  # noqa: E731
    ref = run(torch.float64, False)
    loop, batched = (max(result_errors(ref, run(dtype, b)).values()) for b in (False, True))
    assert 0 < batched <= 1.5 * loop, (batched, loop)
