"""Two-level checkpointing of the chunk op (`MemoryConfig.checkpoint_group`, docs/chunkwise.md "Checkpointing").

Grouping chunks under an outer checkpoint changes no value (float64: outputs, every state tensor, every input
gradient against G = 1) and keeps only every G-th chunk-boundary state alive between forward and backward.
"""

from __future__ import annotations

import dataclasses
import gc
import weakref

import pytest
import torch

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


@pytest.mark.parametrize("group", [3, 9])
@pytest.mark.parametrize("T", [33, 35])
@pytest.mark.parametrize("cfg", CONFIGS, ids=config_id)
def test_grouped_checkpoint_changes_nothing(cfg, T, group):
    """T = 33 / 35 at b = 4: 9 chunks, the last short (a resume state and pending tokens in the final state);
    groups that divide the chunks, leave a short last group, or hold them all."""
    _assert_same(_run(cfg, T, 1), _run(cfg, T, group))


def test_group_without_checkpointing_is_the_plain_op():
    _assert_same(_run(BASE, 17, 1, checkpoint=False), _run(BASE, 17, 4, checkpoint=False), tol=0.0)


def _alive_boundaries(cfg, T):
    """How many chunk-boundary states the forward leaves alive for the backward, and how many chunks ran."""
    made, calls = [], [0]
    step = chunk_mod._chunk_step

    def spy(xc, state, params, cfg):
        calls[0] += 1  # before the step: a recompute stops inside it once it has what the backward needs
        y, new = step(xc, state, params, cfg)
        made.append(weakref.ref(next(iter(new.weights.values()))))
        return y, new

    q, k, v, gates = random_inputs(1, T, H, D, seed=0, requires_grad=True)
    p = init_memory_params(cfg, H, D, D, dtype=torch.float64)
    chunk_mod._chunk_step = spy
    try:
        o, s = memory_chunk_torch(q, k, v, gates, p, cfg)
        del s  # the final state is the caller's, not kept for the backward
        gc.collect()
        alive = sum(r() is not None for r in made)
        o.sum().backward()
    finally:
        chunk_mod._chunk_step = step
    return alive, calls[0]


def test_grouping_keeps_every_group_th_boundary_only():
    """64 chunks: G = 1 keeps the 63 boundary states between them (the final one is the caller's), G = 8 the 7
    between groups. Calls: 64 forward + 64 recomputed in the backward, and with groups also the first 7 chunks of
    each group once more (the group's recompute stops once it has the last boundary its chunks need)."""
    cfg = dataclasses.replace(BASE, memory="linear", feature_map="identity", window=1)
    alive, calls = _alive_boundaries(cfg, 256)
    assert (alive, calls) == (63, 128)
    alive, calls = _alive_boundaries(dataclasses.replace(cfg, checkpoint_group=8), 256)
    assert (alive, calls) == (7, 64 + 8 * 7 + 64)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_checkpoint_group_must_be_a_positive_int(bad):
    with pytest.raises(MemoryConfigError, match="checkpoint_group"):
        MemoryConfig(checkpoint_group=bad)
