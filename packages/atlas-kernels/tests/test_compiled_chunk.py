"""The torch chunk op under torch.compile: no graph break (fullgraph=True), and `compiled=` equal to the eager op in
float64 (outputs, end state and every input gradient, within 1e-10).

The cheap tests trace with dynamo only (backend "eager") or compile with the "aot_eager" backend (dynamo and AOT
autograd, no code generation); the inductor test generates and compiles C++ (minutes on two cores) and is marked
slow.
"""

from __future__ import annotations

import pytest
import torch
import torch._dynamo

from atlas_kernels import MemoryConfig, api, memory_chunk
from atlas_kernels.ops.features.poly import mark_compile_constants
from atlas_kernels.ops.memory.chunk import memory_chunk_torch
from atlas_kernels.testing import config_id, leaf_inputs, rel_err

H, D = 2, 4
TOL = 1e-10

CONFIGS = [
    # OmegaNet's memory: degree-2 features and a window with its carried halo
    MemoryConfig(memory="mlp", optimizer="gd", feature_map="poly", window=3, chunk_size=2),
    # Atlas++'s memory: the factored Muon path, its Gram matrices under their own checkpoint (checkpoint=True)
    MemoryConfig(memory="gated_mlp", optimizer="muon", feature_map="poly", window=2, chunk_size=2, ns_form="lowrank"),
    # the same with every weight's Gram matrices and polynomials stacked (muon_batch "padded")
    MemoryConfig(
        memory="gated_mlp",
        optimizer="muon",
        feature_map="poly",
        window=2,
        chunk_size=2,
        ns_form="lowrank",
        muon_batch="padded",
    ),  # fmt: skip
    # Atlas's memory at the CPU study shapes: per-token Muon (ns_form "auto" takes the Gram form there)
    MemoryConfig(memory="mlp", optimizer="muon", feature_map="poly", window=2, chunk_size=2, ns_form="auto"),
    # Titans' memory (momentum) and the exact delta rule (WY form)
    MemoryConfig(memory="mlp", optimizer="momentum", chunk_size=2),
    MemoryConfig(memory="linear", exact_delta=True, chunk_size=2),
]


def _inputs(cfg, T):
    q, k, v, gates, params = leaf_inputs(cfg, H, T=T, Dk=D, eta_scale=0.5)
    return q, k, v, gates, params, [q, k, v, *gates.values(), *params.values()]


def _checkpoint(cfg):
    return True if cfg.optimizer == "muon" else None


@pytest.mark.parametrize("cfg", CONFIGS, ids=config_id)
def test_chunk_op_traces_without_graph_break(cfg):
    """fullgraph=True raises on any break. `torch._dynamo.explain` alone is not enough: with torch 2.13 it reported
    one graph and no break for the gates' finite check (a host read), where fullgraph=True fails."""
    q, k, v, gates, params, _ = _inputs(cfg, 7)
    torch._dynamo.reset()
    mark_compile_constants()  # what compiled=True does before it compiles
    traced = torch.compile(memory_chunk_torch, fullgraph=True, backend="eager")
    traced(q, k, v, gates, params, cfg, checkpoint=_checkpoint(cfg))


def _compare(cfg, compiled, T):
    torch._dynamo.reset()
    runs = []
    for mode in (False, compiled):
        q, k, v, gates, params, leaves = _inputs(cfg, T)
        o, state = memory_chunk_torch(q, k, v, gates, params, cfg, checkpoint=_checkpoint(cfg), compiled=mode)
        cotangent = torch.randn(o.shape, generator=torch.Generator().manual_seed(5), dtype=o.dtype)
        grads = torch.autograd.grad(o, leaves, cotangent, allow_unused=True)
        runs.append((o, state.tensors(), grads))
    (o, s, g), (oc, sc, gc) = runs
    assert rel_err(o, oc) <= TOL
    assert s.keys() == sc.keys()
    for name in s:
        assert rel_err(s[name], sc[name]) <= TOL, name
    for i, (a, b) in enumerate(zip(g, gc)):
        assert (a is None) == (b is None), i
        if a is not None:
            assert rel_err(a, b) <= TOL, i


@pytest.mark.parametrize("cfg", CONFIGS, ids=config_id)
def test_compiled_chunks_equal_the_eager_op(cfg):
    # T = 7, b = 2: the first chunk (state from params), two later ones, and the short tail that runs eagerly
    _compare(cfg, "aot_eager", 7)


@pytest.mark.parametrize(
    "cfg",
    [MemoryConfig(memory="mlp", feature_map="exp", exp_init_keys=2, chunk_size=2), MemoryConfig(window="global")],
    ids=config_id,
)
def test_compiled_rejects_a_state_that_grows_with_every_chunk(cfg):
    q, k, v, gates, params, _ = _inputs(cfg, 3)
    with pytest.raises(ValueError, match="compiled: the state grows"):
        memory_chunk_torch(q, k, v, gates, params, cfg, compiled=True)


@pytest.mark.slow
@pytest.mark.parametrize(
    "cfg, T",
    [
        (CONFIGS[0], 7),
        # one-token chunks with features and a window: what inductor's vectorised C++ code miscompiles on a CPU
        (MemoryConfig(memory="linear", feature_map="poly", window=4, chunk_size=1), 5),
        (CONFIGS[1], 7),
    ],
    ids=lambda x: config_id(x) if isinstance(x, MemoryConfig) else f"T{x}",
)
def test_inductor_compiled_chunks_equal_the_eager_op(cfg, T):
    _compare(cfg, True, T)


def test_backend_compiled_runs_the_compiled_torch_op(monkeypatch):
    """memory_chunk(backend="compiled") is the torch op with compiled=True, on any device (no Triton involved)."""
    seen = []
    real = api.memory_chunk_torch
    monkeypatch.setattr(api, "memory_chunk_torch", lambda *a, **kw: seen.append(kw.get("compiled")) or real(*a))
    cfg = CONFIGS[0]
    q, k, v, gates, params, _ = _inputs(cfg, 3)
    assert api.select_backend(q, cfg, "compiled") == "compiled"
    memory_chunk(q, k, v, gates, params, cfg, backend="compiled")
    memory_chunk(q, k, v, gates, params, cfg, backend="torch")
    assert seen == [True, False]


def test_reduce_overhead_is_inductor_with_cuda_graphs(monkeypatch):
    """compiled="reduce-overhead": inductor with its CUDA-graph option (what torch.compile's mode of that name sets;
    a mode cannot be passed beside the CPU's options); True stays inductor without graphs."""
    from atlas_kernels.ops.memory import chunk

    seen = []
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: seen.append(kw) or fn)
    chunk.compiled_chunk_step.cache_clear()
    try:
        chunk.compiled_chunk_step(chunk.CUDA_GRAPHS, "cuda")
        chunk.compiled_chunk_step(chunk.CUDA_GRAPHS, "cpu")
        chunk.compiled_chunk_step(True, "cuda")
    finally:
        chunk.compiled_chunk_step.cache_clear()
    assert [(kw["backend"], kw["options"]) for kw in seen] == [
        ("inductor", {"triton.cudagraphs": True}),
        ("inductor", {"cpp.simdlen": 1, "triton.cudagraphs": True}),
        ("inductor", None),
    ]
    assert all(kw["fullgraph"] and kw["dynamic"] is False for kw in seen)
