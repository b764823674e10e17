"""Activation checkpointing of the chunk op (float64): recomputing chunks in the backward changes nothing.

Muon checkpoints by default when a gradient will be taken and one copy of the state per token would exceed
`checkpoint_min_mib` (its per-token weights would otherwise be kept for the backward); `checkpoint=True` / `False`
forces either way for every configuration.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from atlas_kernels import init_memory_params
from atlas_kernels.ops.memory import chunk as chunk_mod
from atlas_kernels.ops.memory.chunk import memory_chunk_torch
from atlas_kernels.testing import config_id, random_inputs, random_loss_grads, result_errors, valid_configs

H, D = 2, 4
EXP = dict(exp_init_keys=2, exp_taylor_degree=14)
MUON = [
    dataclasses.replace(c, window=3, chunk_size=4)
    for c in valid_configs(optimizer="muon", bias="l2")
    if c.feature_map != "exp"  # rejected with muon
] + [
    dataclasses.replace(
        next(valid_configs(memory="mlp", optimizer="muon", feature_map="identity", bias="dot")), window=3, chunk_size=4
    )
]
EVERY = [dataclasses.replace(c, window=3, chunk_size=4) for c in valid_configs(window=1, **EXP)]


def _params(cfg, seed=1):
    g = torch.Generator().manual_seed(seed)
    p = init_memory_params(cfg, H, D, D, dtype=torch.float64, generator=g)
    return {n: t.requires_grad_(True) for n, t in p.items()}


def _run(cfg, T, checkpoint, B=2, state_fn=None):
    """Outputs, final state tensors and the gradients of every input of a loss over outputs and final state."""
    q, k, v, gates = random_inputs(B, T, H, D, seed=T, requires_grad=True, eta_scale=0.3)
    p = _params(cfg)
    inputs = {"q": q, "k": k, "v": v, **{f"gate.{n}": t for n, t in gates.items()}, **p}
    state = None
    if state_fn is not None:  # a state carried from an earlier segment, itself requiring grad
        state, extra = state_fn(p)
        inputs.update(extra)
    o, s = memory_chunk_torch(q, k, v, gates, p, cfg, state, checkpoint=checkpoint)
    return random_loss_grads(o, s, inputs)


def _assert_same(ref, out, tol=1e-12):
    bad = {name: e for name, e in result_errors(ref, out).items() if not e < tol}
    assert not bad, bad


@pytest.mark.parametrize("T", [7, 33])
@pytest.mark.parametrize("cfg", MUON, ids=config_id)
def test_muon_checkpoint_exact(cfg, T):
    """b = 4 with a short last chunk, window 3 across chunk edges: outputs, state and every input gradient."""
    _assert_same(_run(cfg, T, checkpoint=False), _run(cfg, T, checkpoint=True))


@pytest.mark.parametrize("cfg", EVERY, ids=config_id)
def test_forced_checkpoint_exact_every_config(cfg):
    _assert_same(_run(cfg, 7, checkpoint=False), _run(cfg, 7, checkpoint=True))


def test_muon_checkpoint_exact_through_carried_state():
    """Gradients flow into the previous segment through a mid-chunk state (resume + pending tokens)."""
    cfg = MUON[0]

    def first_segment(p):
        q, k, v, gates = random_inputs(2, 6, H, D, seed=99, requires_grad=True, eta_scale=0.3)
        _, s = memory_chunk_torch(q, k, v, gates, p, cfg, checkpoint=False)
        assert s.pending is not None  # 6 = one chunk + 2 pending tokens
        return s, {"seg1.q": q, "seg1.k": k, "seg1.v": v, **{f"seg1.{n}": t for n, t in gates.items()}}

    ref = _run(cfg, 9, checkpoint=False, state_fn=first_segment)
    _assert_same(ref, _run(cfg, 9, checkpoint=True, state_fn=first_segment))


def _saved_bytes(fn):
    """Bytes that autograd keeps for the backward outside of any checkpointed region."""
    saved = {}

    def pack(t):
        saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(saved.values())


GRAM = [
    dataclasses.replace(
        MUON[0],
        memory="mlp",
        feature_map="poly",
        poly_degree=2,
        ns_eval=ns_eval,
        muon_polynomial=poly,
        ns_form="lowrank",
    )  # the factored path keeps (or recomputes) per-token Gram matrices
    for ns_eval, poly in (("matmul", "token"), ("eigh", "token"), ("matmul", "chunk"))
]


_RUN_CHUNKS = chunk_mod._run_chunks


def _gram_recompute(monkeypatch, on: bool) -> None:
    """The op's low-memory mode with the factored Muon path's Gram recomputation forced on or off."""
    monkeypatch.setattr(chunk_mod, "_run_chunks", lambda *a, low_memory, **kw: _RUN_CHUNKS(*a, low_memory=on, **kw))


@pytest.mark.parametrize("cfg", GRAM, ids=lambda c: f"{c.ns_eval}-{c.muon_polynomial}")
def test_low_memory_muon_recomputes_its_gram_matrices_bit_for_bit(cfg, monkeypatch):
    """A checkpointed op rebuilds each chunk's per-token Gram matrices in the backward instead of keeping them: the
    same outputs, state and input gradients bit for bit, and fewer bytes kept for the backward."""
    ref = _run(cfg, 13, checkpoint=True)
    _gram_recompute(monkeypatch, False)
    plain = _run(cfg, 13, checkpoint=True)
    assert torch.equal(ref[0], plain[0])
    assert all(torch.equal(ref[1][n], plain[1][n]) for n in ref[1])
    assert ref[2].keys() == plain[2].keys()
    for name, g in ref[2].items():
        assert (g is None and plain[2][name] is None) or torch.equal(g, plain[2][name]), name

    # inside a chunk (no chunk checkpoint, so that autograd's saved tensors are visible; the per-chunk loop, whose
    # low-memory flag the patch sets): what the backward keeps
    q, k, v, gates = random_inputs(2, 8, H, D, seed=0, requires_grad=True)
    p = _params(cfg)
    run = lambda: memory_chunk_torch(q, k, v, gates, p, cfg, checkpoint=False, batch_terms=False)  # noqa: E731
    kept = _saved_bytes(run)
    _gram_recompute(monkeypatch, True)
    assert _saved_bytes(run) < kept


def test_muon_checkpoints_by_default_when_grad_is_taken():
    cfg = dataclasses.replace(MUON[0], chunk_size=4, checkpoint_min_mib=0)
    q, k, v, gates = random_inputs(2, 32, H, D, seed=0, requires_grad=True)
    p = _params(cfg)
    full = _saved_bytes(lambda: memory_chunk_torch(q, k, v, gates, p, cfg, checkpoint=False))
    auto = _saved_bytes(lambda: memory_chunk_torch(q, k, v, gates, p, cfg))
    assert auto < full / 20
    # the end-of-chunk state owns its storage (a view would keep the chunk's per-token tensors alive)
    _, s = memory_chunk_torch(q, k, v, gates, p, cfg)
    for t in [*s.weights.values(), *s.momentum.values()]:
        assert t._base is None


def test_muon_checkpoints_by_default_only_from_checkpoint_min_mib():
    # The threshold is on T x the bytes of one state: with the threshold under that size the op checkpoints, with it
    # over that size autograd keeps the chunks' intermediates (faster, same values).
    base = dataclasses.replace(MUON[0], chunk_size=4)
    q, k, v, gates = random_inputs(2, 32, H, D, seed=0, requires_grad=True)
    p = _params(base)
    _, s = memory_chunk_torch(q, k, v, gates, p, base)
    per_token = sum(t.numel() * t.element_size() for t in s.tensors().values())
    full = _saved_bytes(lambda: memory_chunk_torch(q, k, v, gates, p, base, checkpoint=False))
    assert _saved_bytes(lambda: memory_chunk_torch(q, k, v, gates, p, base)) == full  # default 256 MiB: far below
    mib = 32 * per_token / 2**20
    below = dataclasses.replace(base, checkpoint_min_mib=math.floor(mib))
    above = dataclasses.replace(base, checkpoint_min_mib=math.ceil(mib))
    assert _saved_bytes(lambda: memory_chunk_torch(q, k, v, gates, p, below)) < full / 20
    assert _saved_bytes(lambda: memory_chunk_torch(q, k, v, gates, p, above)) == full


def test_gd_and_momentum_do_not_checkpoint_by_default():
    cfg = dataclasses.replace(
        next(valid_configs(memory="mlp", optimizer="momentum", feature_map="identity")), chunk_size=4
    )
    q, k, v, gates = random_inputs(2, 16, H, D, seed=0, requires_grad=True)
    p = _params(cfg)
    full = _saved_bytes(lambda: memory_chunk_torch(q, k, v, gates, p, cfg, checkpoint=False))
    assert _saved_bytes(lambda: memory_chunk_torch(q, k, v, gates, p, cfg)) == full
