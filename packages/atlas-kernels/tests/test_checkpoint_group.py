"""Two-level checkpointing of the chunk op (`MemoryConfig.checkpoint_group`, docs/chunkwise.md "Checkpointing").

Grouping chunks changes no value (float64: outputs, every state tensor, every input gradient against G = 1) and
keeps only every G-th chunk-boundary state alive between forward and backward, and a graph node per group, not the
chunks' graphs.
"""

from __future__ import annotations

import dataclasses
import functools
import gc

import pytest
import torch
from torch.multiprocessing.reductions import StorageWeakRef

from atlas_kernels import MemoryConfig, MemoryConfigError, init_memory_params
from atlas_kernels.ops.memory import chunk as chunk_mod
from atlas_kernels.ops.memory.chunk import memory_chunk_torch
from atlas_kernels.testing import config_id, random_inputs, random_loss_grads, result_errors

H, D = 2, 4
# checkpoint_min_mib=0: these tiny segments checkpoint as long ones do by default (the subject of these tests)
BASE = MemoryConfig(memory="mlp", optimizer="muon", feature_map="poly", window=3, chunk_size=4, checkpoint_min_mib=0)
CONFIGS = [
    BASE,
    dataclasses.replace(BASE, memory="linear", feature_map="identity", window=1),
    dataclasses.replace(BASE, memory="gated_mlp", window="global", ns_form="materialise"),
    dataclasses.replace(BASE, optimizer="momentum", bias="dot"),
]


def _run(cfg, T, group, checkpoint=True):
    cfg = dataclasses.replace(cfg, checkpoint_group=group)
    q, k, v, gates = random_inputs(2, T, H, D, seed=T, requires_grad=True, eta_scale=0.3)
    g = torch.Generator().manual_seed(1)
    p = {n: t.requires_grad_() for n, t in init_memory_params(cfg, H, D, D, dtype=torch.float64, generator=g).items()}
    inputs = {"q": q, "k": k, "v": v, **{f"gate.{n}": t for n, t in gates.items()}, **p}
    o, s = memory_chunk_torch(q, k, v, gates, p, cfg, checkpoint=checkpoint)
    return random_loss_grads(o, s, inputs)


def _assert_same(ref, out, tol=0.0):
    bad = {name: e for name, e in result_errors(ref, out).items() if not e <= tol}
    assert not bad, bad


@functools.cache
def _ungrouped(cfg, T):
    """The G = 1 reference, computed once per configuration and length."""
    return _run(cfg, T, 1)


@pytest.mark.parametrize(("T", "group"), [(33, 3), (35, 4), (33, 9)])
@pytest.mark.parametrize("cfg", CONFIGS, ids=config_id)
def test_grouped_checkpoint_changes_nothing(cfg, T, group):
    """T = 33 / 35 at b = 4: 9 chunks, the last short (a resume state and pending tokens in the final state);
    groups that divide the chunks (3), leave a short last group (4 + 4 + 1), or hold them all (9)."""
    _assert_same(_ungrouped(cfg, T), _run(cfg, T, group))


def test_group_without_checkpointing_is_the_plain_op():
    _assert_same(_run(BASE, 17, 1, checkpoint=False), _run(BASE, 17, 4, checkpoint=False), tol=0.0)


def test_grouped_chunks_are_twice_differentiable():
    """Under create_graph a group differentiates the graph it rebuilds on its inputs themselves: second derivatives
    equal G = 1's up to rounding (not bit for bit: the second-order sums run in another order)."""

    def second(group):
        cfg = dataclasses.replace(BASE, checkpoint_group=group)
        q, k, v, gates = random_inputs(1, 33, H, D, seed=0, requires_grad=True, eta_scale=0.3)
        p = init_memory_params(cfg, H, D, D, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
        o, _ = memory_chunk_torch(q, k, v, gates, p, cfg)
        (g,) = torch.autograd.grad(o.pow(2).sum(), q, create_graph=True)
        return torch.autograd.grad(g.sum(), k)[0]

    out, ref = second(3), second(1)
    assert (out - ref).norm() <= 1e-12 * ref.norm()


def _alive_boundaries(cfg, T):
    """How many chunk-boundary states the forward leaves alive for the backward, and how many chunks ran."""
    made, calls = [], [0]
    step = chunk_mod._chunk_step

    def spy(xc, state, params, cfg, *flags):
        calls[0] += 1  # before the step: a recompute stops inside it once it has what the backward needs
        y, new = step(xc, state, params, cfg, *flags)
        # the storage: a group hands on detached tensors (other objects) of the chunks' states
        made.append(StorageWeakRef(next(iter(new.weights.values())).untyped_storage()))
        return y, new

    q, k, v, gates = random_inputs(1, T, H, D, seed=0, requires_grad=True)
    p = init_memory_params(cfg, H, D, D, dtype=torch.float64)
    chunk_mod._chunk_step = spy
    try:
        o, s = memory_chunk_torch(q, k, v, gates, p, cfg)
        del s  # the final state is the caller's, not kept for the backward
        gc.collect()
        alive = sum(not r.expired() for r in made)
        o.sum().backward()
    finally:
        chunk_mod._chunk_step = step
    return alive, calls[0]


def test_grouping_keeps_every_group_th_boundary_only():
    """64 chunks: G = 1 keeps the 63 boundary states between them (the final one is the caller's), G = 8 the 7
    between groups. Calls: 64 forward + 64 recomputed in the backward; with groups each group's backward reruns its
    8 chunks, the last keeping its intermediates (it is differentiated first), the other 7 recomputed once more."""
    cfg = dataclasses.replace(BASE, memory="linear", feature_map="identity", window=1)
    alive, calls = _alive_boundaries(cfg, 256)
    assert (alive, calls) == (63, 128)
    alive, calls = _alive_boundaries(dataclasses.replace(cfg, checkpoint_group=8), 256)
    assert (alive, calls) == (7, 64 + 8 * 7 + 64)


def _graph_nodes(t):
    seen, todo = set(), [t.grad_fn]
    while todo:
        node = todo.pop()
        if node is not None and node not in seen:
            seen.add(node)
            todo.extend(f for f, _ in node.next_functions)
    return len(seen)


def test_grouping_keeps_a_graph_node_per_group():
    """Besides the states, the forward leaves autograd's graph for the backward. An outer torch checkpoint kept every
    chunk's (hundreds of nodes and saved-tensor holders per chunk: ~21 MiB per 1k positions at B=2, H=4, D=32);
    grouped chunks are one node each: 64 -> 128 chunks at G = 8 adds the 8 groups' nodes."""
    cfg = dataclasses.replace(BASE, memory="linear", feature_map="identity", window=1, checkpoint_group=8)
    p = init_memory_params(cfg, H, D, D, dtype=torch.float64)

    def nodes(T):
        q, k, v, gates = random_inputs(1, T, H, D, seed=0, requires_grad=True)
        return _graph_nodes(memory_chunk_torch(q, k, v, gates, p, cfg)[0])

    assert nodes(512) - nodes(256) == 8


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_checkpoint_group_must_be_a_positive_int(bad):
    with pytest.raises(MemoryConfigError, match="checkpoint_group"):
        MemoryConfig(checkpoint_group=bad)
