"""muon_batch="padded": the factored Muon path's Gram matrices and polynomials of all the weights in one stacked set
of operations (`muon_lowrank._orthogonalise_padded`), against independent paths in float64.

The reference is the materialising path (per-token momenta, every Newton-Schulz step on the r x n iterate), which
shares no code with the padding: outputs, every final state tensor and every input gradient, tolerances as in
test_muon_lowrank.py (why there). The weights' oriented factors differ in shape with degree-2 features (W2
[16, 15] tall against W1 [4, 16] wide at Dk = Dv = 4, expansion 4: r padded from 4 to 15) and in the Dk != Dv
variant (n padded from 4 to 6); with identity features they stack unpadded, in opposite orientations. The
chunk-polynomial approximation is compared with its per-weight twin, which its own tests check against a literal
oracle.
"""

from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch

from atlas_kernels import MemoryConfig, init_memory_params, memory_chunk
from atlas_kernels.config import MemoryConfigError
from atlas_kernels.ops.memory import muon_lowrank
from atlas_kernels.ops.memory.chunk import memory_chunk_torch
from atlas_kernels.testing import config_id, leaf_inputs, random_inputs, random_loss_grads, result_errors

H = 2
VALUE_TOL, GRAD_TOL = 1e-10, 3e-10  # as test_muon_lowrank.py (why there)
GRID = [
    MemoryConfig(memory=m, optimizer="muon", feature_map=f, window=c, chunk_size=4, muon_batch="padded")
    for m, f, c in itertools.product(("mlp", "gated_mlp"), ("identity", "poly"), (1, 3))
]


def _run(cfg, T, Dk=4, eta_scale=0.1):
    """(outputs, state, {leaf: gradient}) of a random loss over outputs and state, float64."""
    q, k, v, gates, params = leaf_inputs(cfg, H, B=2, T=T, Dk=Dk, Dv=4, eta_scale=eta_scale)
    o, state = memory_chunk(q, k, v, gates, params, cfg)
    inputs = {"q": q, "k": k, "v": v, **{f"gate.{n}": t for n, t in gates.items()}, **params}
    return random_loss_grads(o, state, inputs)


def _errors(ref_cfg, cfg, T, **kwargs):
    return result_errors(_run(ref_cfg, T, **kwargs), _run(cfg, T, **kwargs))


def _assert_close(errs):
    bad = {n: e for n, e in errs.items() if not e < (GRAD_TOL if n.startswith("grad") else VALUE_TOL)}
    assert not bad, bad


@pytest.mark.parametrize("ns_eval", ["matmul", "eigh"])
@pytest.mark.parametrize("cfg", GRID, ids=config_id)
def test_padded_equals_materialised(cfg, ns_eval):
    ref = dataclasses.replace(cfg, ns_form="materialise", ns_eval="matmul", muon_batch="per_weight")
    _assert_close(_errors(ref, dataclasses.replace(cfg, ns_form="lowrank", ns_eval=ns_eval), 13))


@pytest.mark.parametrize(
    "change, T",
    [
        (dict(window="global"), 33),  # odd length, short last chunk
        (dict(memory="gated_mlp", decay_target="init"), 7),
        (dict(feature_map="identity", expansion=1, residual=False), 13),  # W1 [4, 6] tall, W2 [6, 6] square
        (dict(chunk_size=1), 7),
        (dict(checkpoint_min_mib=0), 13),  # the stacked Gram matrices recomputed in the backward
    ],
    ids=["global-33", "gated-decay-init-7", "dk-neq-dv", "chunk-1", "checkpointed"],
)
def test_padded_equals_materialised_variants(change, T):
    cfg = dataclasses.replace(GRID[3], **change)
    dk = 6 if "expansion" in change else 4
    ref = dataclasses.replace(cfg, ns_form="materialise", ns_eval="matmul", muon_batch="per_weight")
    _assert_close(_errors(ref, dataclasses.replace(cfg, ns_form="lowrank"), T, Dk=dk))


@pytest.mark.parametrize("memory", ["mlp", "gated_mlp"])
def test_padded_chunk_polynomial_equals_per_weight(memory):
    cfg = MemoryConfig(
        memory=memory, optimizer="muon", feature_map="poly", window=3, chunk_size=4, muon_polynomial="chunk",
        ns_form="lowrank", ns_eval="matmul",
    )  # fmt: skip
    errs = _errors(cfg, dataclasses.replace(cfg, muon_batch="padded"), 13, eta_scale=0.5)
    assert max(errs.values()) < 1e-10, errs


def test_one_stacked_gram_per_chunk(monkeypatch):
    """The padded path builds the Gram matrices of W1 and W2 in one call per chunk (the per-weight path: two)."""
    calls = []
    real = muon_lowrank._normalised_gram

    def spy(s0, *args):
        calls.append(tuple(s0.shape))
        return real(s0, *args)

    monkeypatch.setattr(muon_lowrank, "_normalised_gram", spy)
    cfg = dataclasses.replace(GRID[3], ns_form="lowrank", checkpoint_min_mib=10**6)
    q, k, v, gates = random_inputs(1, 9, 2, 4, seed=3)
    params = init_memory_params(cfg, 2, 4, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    memory_chunk_torch(q, k, v, gates, params, cfg)
    assert len(calls) == 3  # chunks of 4, 4 and 1
    assert all(shape[0] == 2 and len(shape) == 5 for shape in calls), calls
    calls.clear()
    memory_chunk_torch(q, k, v, gates, params, dataclasses.replace(cfg, muon_batch="per_weight"))
    assert len(calls) == 6 and all(len(shape) == 4 for shape in calls), calls


def test_linear_memory_has_one_weight_and_takes_the_per_weight_path():
    cfg = MemoryConfig(memory="linear", optimizer="muon", window=3, chunk_size=4, ns_form="lowrank", ns_eval="matmul")
    errs = _errors(cfg, dataclasses.replace(cfg, muon_batch="padded"), 9)
    assert max(errs.values()) == 0, errs


@pytest.mark.parametrize(
    "change",
    [dict(optimizer="gd"), dict(optimizer="momentum"), dict(optimizer="muon", ns_form="gram"),
     dict(optimizer="muon", ns_form="materialise")],
    ids=["gd", "momentum", "gram", "materialise"],
)  # fmt: skip
def test_padded_outside_the_factored_path_is_refused(change):
    with pytest.raises(MemoryConfigError, match="muon_batch"):
        MemoryConfig(memory="mlp", muon_batch="padded", **change)


def test_unknown_batch_mode_names_the_field():
    with pytest.raises(MemoryConfigError, match="muon_batch: expected one of per_weight, padded"):
        MemoryConfig(optimizer="muon", muon_batch="stacked")


def test_default_is_per_weight():
    assert MemoryConfig(optimizer="muon").muon_batch == "per_weight"
    assert MemoryConfig.from_dict(MemoryConfig(optimizer="muon", muon_batch="padded").to_dict()).muon_batch == "padded"
