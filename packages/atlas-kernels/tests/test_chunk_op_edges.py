"""The chunk op where the oracle grid does not reach: SiLU memories, an empty segment, a state in another dtype than
the inputs, and the default recomputation of Muon chunks when only the inputs need a gradient.

Written against the mutants `make mutants` left alive in ops/memory/chunk.py (docs/testing.md).
"""

from __future__ import annotations

import pytest
import torch
import torch.utils.checkpoint

from atlas_kernels import MemoryConfig, init_memory_params, memory_chunk, memory_naive_chunked
from atlas_kernels.ops.memory.chunk import memory_chunk_torch
from atlas_kernels.testing import config_id, random_inputs, rel_err

H, D = 2, 4


def _params(cfg, requires_grad=False, dtype=torch.float64):
    p = init_memory_params(cfg, H, D, D, dtype=dtype, generator=torch.Generator().manual_seed(1))
    return {n: t.requires_grad_(requires_grad) for n, t in p.items()}


SILU = [
    MemoryConfig(memory="mlp", activation="silu", window=3, chunk_size=4),
    MemoryConfig(
        memory="gated_mlp",
        optimizer="momentum",
        feature_map="poly",
        bias="dot",
        activation="silu",
        window=3,
        chunk_size=4,
    ),  # fmt: skip
]


@pytest.mark.parametrize("cfg", SILU, ids=config_id)
def test_silu_memories_equal_the_oracle_with_gradients(cfg):
    # the closed-form inner gradient needs SiLU's derivative; every other chunk-vs-oracle test runs GELU
    q, k, v, gates = random_inputs(1, 11, H, D, seed=3, requires_grad=True)
    p = _params(cfg, requires_grad=True)
    leaves = [q, k, v, *gates.values(), *p.values()]
    results = []
    for op in (memory_naive_chunked, memory_chunk):
        o, s = op(q, k, v, gates, p, cfg)
        grads = torch.autograd.grad(o.square().sum(), leaves, allow_unused=True)
        results.append((o, s, grads))
    (o_ref, s_ref, g_ref), (o, s, g) = results
    assert rel_err(o_ref, o) < 1e-9
    for name, t in s_ref.tensors().items():
        assert rel_err(t, s.tensors()[name]) < 1e-9, name
    for a, b in zip(g_ref, g):
        assert (a is None) == (b is None) or (b is not None and b.abs().max() == 0)
        if a is not None:
            assert rel_err(a, b) < 1e-8


def test_an_empty_segment_returns_no_outputs_and_changes_no_state():
    cfg = MemoryConfig(memory="mlp", optimizer="momentum", window=3, chunk_size=4)
    q, k, v, gates = random_inputs(2, 9, H, D, seed=4)
    p = _params(cfg)
    empty = {n: g[:, :0] for n, g in gates.items()}
    o0, s0 = memory_chunk(q[:, :0], k[:, :0], v[:, :0], empty, p, cfg)
    assert o0.shape == (2, 0, H, D)
    o, s = memory_chunk(q, k, v, gates, p, cfg, state=s0)
    o_ref, s_ref = memory_chunk(q, k, v, gates, p, cfg)
    assert torch.equal(o, o_ref)
    for name, t in s_ref.tensors().items():
        assert torch.equal(t, s.tensors()[name]), name


@pytest.mark.parametrize(
    "cfg",
    [
        MemoryConfig(memory="mlp", optimizer="momentum", window=3, chunk_size=4),
        MemoryConfig(memory="linear", feature_map="exp", exp_init_keys=2, window=2, chunk_size=4),
    ],
    ids=config_id,
)
def test_a_state_in_another_dtype_is_cast_to_the_inputs(cfg):
    # a float64 state (e.g. from an evaluation run) continued by float32 inputs: every state tensor follows the inputs
    q, k, v, gates = random_inputs(1, 13, H, D, seed=5, eta_scale=0.2)
    p = _params(cfg)
    _, s64 = memory_chunk(q[:, :8], k[:, :8], v[:, :8], {n: g[:, :8] for n, g in gates.items()}, p, cfg)
    rest = [t[:, 8:] for t in (q, k, v)]
    gates_rest = {n: g[:, 8:] for n, g in gates.items()}
    o64, _ = memory_chunk(*rest, gates_rest, p, cfg, state=s64)
    f32 = lambda t: t.float()  # noqa: E731
    o32, s32 = memory_chunk(
        *map(f32, rest), {n: f32(g) for n, g in gates_rest.items()}, {n: f32(t) for n, t in p.items()}, cfg, state=s64
    )
    assert o32.dtype == torch.float32
    assert all(t.dtype == torch.float32 for t in s32.tensors().values())
    assert rel_err(o64, o32.double()) < 1e-4


def test_muon_chunks_are_recomputed_when_only_the_inputs_need_a_gradient(monkeypatch):
    cfg = MemoryConfig(memory="mlp", optimizer="muon", window=2, chunk_size=4, checkpoint_min_mib=0, ns_form="lowrank")
    q, k, v, gates = random_inputs(1, 9, H, D, seed=6, requires_grad=True)
    p = _params(cfg)  # parameters (and so the start state) without gradients
    calls = []
    real = torch.utils.checkpoint.checkpoint

    def spy(fn, *args, **kwargs):
        calls.append(fn.__name__)
        return real(fn, *args, **kwargs)

    monkeypatch.setattr(torch.utils.checkpoint, "checkpoint", spy)
    memory_chunk_torch(q, k, v, gates, p, cfg)
    # chunks of 4, 4 and 1; inside each, the low-memory mode's Gram recomputation of W1 and W2
    assert calls.count("_chunk_step") == 3
    assert calls.count("_normalised_gram") == 6
    calls.clear()
    memory_chunk_torch(*(t.detach() for t in (q, k, v)), {n: g.detach() for n, g in gates.items()}, p, cfg)
    assert calls == []
