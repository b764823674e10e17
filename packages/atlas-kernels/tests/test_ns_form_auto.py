"""ns_form="auto" (`muon_lowrank.resolve_ns_form`): the chunk op runs a per-token Muon path (the Newton-Schulz steps
on the Gram matrix) on a CPU when every weight Muon updates has fewer than FACTORED_MIN_WEIGHT entries, the factored
path otherwise, and its results are bit for bit those of the form it picks. Also ns_eval="auto", which every
optimizer and form accepts.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from atlas_kernels import MemoryConfig, init_memory_params, memory_chunk
from atlas_kernels.config import MemoryConfigError
from atlas_kernels.ops.memory import chunk
from atlas_kernels.ops.memory.muon_lowrank import (
    AUTO_PER_TOKEN_FORM,
    FACTORED_MIN_WEIGHT,
    resolve_ns_form,
    uses_factored_path,
)
from atlas_kernels.testing import random_inputs

H = 2


def _counted_run(monkeypatch, cfg, Dk, Dv, T=9):
    """(outputs, final state, calls) of a float64 chunk op run; calls counts the factored and materialising chunks."""
    calls = {"factored": 0, "materialised": 0}
    for module, name, key in ((chunk, "lowrank_muon_chunk", "factored"), (chunk, "_muon_chunk", "materialised")):
        real = getattr(module, name)
        monkeypatch.setattr(
            module, name, lambda *a, _r=real, _k=key, **kw: calls.__setitem__(_k, calls[_k] + 1) or _r(*a, **kw)
        )
    q, k, v, gates = random_inputs(1, T, H, Dk, Dv, seed=0, eta_scale=0.1)
    params = init_memory_params(cfg, H, Dk, Dv, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    o, state = memory_chunk(q, k, v, gates, params, cfg)
    return o, state, calls


@pytest.mark.parametrize(
    "out, inp, factored",
    [(64, 64, True), (63, 65, False), (65, 64, True), (16, 45, False), (128, 32, True)],
    ids=["64x64", "63x65", "65x64", "16x45", "128x32"],
)
def test_auto_switches_at_the_threshold_on_a_cpu(out, inp, factored):
    cfg = MemoryConfig(memory="linear", optimizer="muon", ns_form="auto")
    assert FACTORED_MIN_WEIGHT == 4096
    assert uses_factored_path(cfg, [(out, inp)], torch.device("cpu")) is factored
    # away from a CPU the factored path always: the threshold was measured on CPUs only
    assert uses_factored_path(cfg, [(out, inp)], torch.device("cuda")) is True


def test_auto_takes_the_gram_form_below_the_threshold_and_explicit_forms_stay():
    assert AUTO_PER_TOKEN_FORM == "gram"
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    auto = MemoryConfig(memory="mlp", optimizer="muon", ns_form="auto")
    assert resolve_ns_form(auto, [(16, 45), (8, 16)], cpu) == "gram"
    assert resolve_ns_form(auto, [(16, 45), (64, 64)], cpu) == "lowrank"
    assert resolve_ns_form(auto, [(16, 45)], cuda) == "lowrank"
    for form in ("materialise", "gram", "lowrank"):
        cfg = dataclasses.replace(auto, ns_form=form)
        assert resolve_ns_form(cfg, [(16, 45)], cpu) == form
        assert resolve_ns_form(cfg, [(64, 128)], cuda) == form
    chunk = dataclasses.replace(auto, ns_form="gram", muon_polynomial="chunk")
    assert resolve_ns_form(chunk, [(16, 45)], cpu) == "lowrank"  # the approximation is factored only


def test_auto_reads_the_largest_weight():
    cfg = MemoryConfig(memory="mlp", optimizer="muon", ns_form="auto")
    small = [(8, 16), (16, 8)]
    assert not uses_factored_path(cfg, small, torch.device("cpu"))
    assert uses_factored_path(cfg, [small[0], (32, 128)], torch.device("cpu"))


@pytest.mark.parametrize(
    "kwargs, factored",
    [
        (dict(ns_form="lowrank"), True),
        (dict(ns_form="materialise"), False),
        (dict(ns_form="gram"), False),
        (dict(ns_form="materialise", muon_polynomial="chunk"), True),  # the approximation is factored only
    ],
    ids=["lowrank", "materialise", "gram", "chunk-polynomial"],
)
def test_explicit_forms_ignore_the_size(kwargs, factored):
    cfg = MemoryConfig(memory="linear", optimizer="muon", **kwargs)
    for out, inp in ((4, 4), (64, 128)):
        assert uses_factored_path(cfg, [(out, inp)], torch.device("cpu")) is factored


@pytest.mark.parametrize(
    "memory, Dk, Dv, picks",
    [("linear", 5, 7, "gram"), ("linear", 64, 64, "lowrank"), ("mlp", 4, 4, "gram")],
    ids=["linear-5x7", "linear-64x64", "mlp-4"],
)
def test_auto_runs_the_form_it_picks_bit_for_bit(monkeypatch, memory, Dk, Dv, picks):
    cfg = MemoryConfig(memory=memory, optimizer="muon", window=3, chunk_size=4, ns_form="auto")
    o, state, calls = _counted_run(monkeypatch, cfg, Dk, Dv)
    n_chunks = 3  # T = 9, chunk 4
    expected = (
        {"factored": n_chunks, "materialised": 0} if picks == "lowrank" else {"factored": 0, "materialised": n_chunks}
    )
    assert calls == expected
    o_ref, state_ref, _ = _counted_run(monkeypatch, dataclasses.replace(cfg, ns_form=picks), Dk, Dv)
    assert torch.equal(o, o_ref)
    for name, t in state.tensors().items():
        assert torch.equal(t, state_ref.tensors()[name]), name


def test_the_per_token_branch_of_auto_matches_the_factored_path_in_float64(monkeypatch):
    cfg = MemoryConfig(memory="mlp", optimizer="muon", feature_map="poly", window=3, chunk_size=4, ns_form="auto")
    o, state, calls = _counted_run(monkeypatch, cfg, 4, 4, T=11)
    assert calls["materialised"] and not calls["factored"]
    o_ref, state_ref, _ = _counted_run(monkeypatch, dataclasses.replace(cfg, ns_form="lowrank"), 4, 4, T=11)
    results = {"o": (o, o_ref), **{name: (t, state_ref.tensors()[name]) for name, t in state.tensors().items()}}
    for name, (got, ref) in results.items():  # relative to the tensor's largest entry (momenta reach ~100)
        assert (got - ref).abs().max() <= 1e-10 * ref.abs().max(), name


@pytest.mark.parametrize(
    "kwargs",
    [dict(optimizer="gd"), dict(optimizer="momentum"), dict(optimizer="muon", ns_form="materialise"), dict()],
    ids=["gd", "momentum", "materialise", "defaults"],
)
def test_every_optimizer_and_form_takes_ns_eval_auto(kwargs):
    assert MemoryConfig(**kwargs).ns_eval == "auto"  # the default
    assert MemoryConfig(ns_eval="matmul", **kwargs).ns_eval == "matmul"


def test_eigh_is_still_refused_off_the_factored_path():
    with pytest.raises(MemoryConfigError, match="ns_eval: 'eigh'"):
        MemoryConfig(optimizer="muon", ns_form="gram", ns_eval="eigh")
    MemoryConfig(optimizer="muon", ns_form="auto", ns_eval="eigh")


def test_unknown_form_names_the_key():
    with pytest.raises(MemoryConfigError, match="ns_form: expected one of materialise, gram, lowrank, auto"):
        MemoryConfig(optimizer="muon", ns_form="svd")
