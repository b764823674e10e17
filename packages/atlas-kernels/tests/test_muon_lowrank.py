"""Muon without per-token matrices (ns_form="lowrank", `ops/memory/muon_lowrank.py`) == the materialising path.

Float64: outputs, every final state tensor and every input gradient (q, k, v, each gate, each parameter) of a random
loss over outputs and state, on odd lengths that end in a short chunk. The oracle comparisons of the default
(lowrank) path run in the option test files (test_memory_equivalence, test_decay_target, test_gamma_window, ...).

Tolerances: values and states 1e-10, gradients 3e-10. The momenta are rank-deficient and Newton-Schulz lifts their
null directions by up to a^k ~ 490, so the op's gradients amplify rounding: a random 1e-15 relative perturbation of
every Newton-Schulz input of the materialising path alone moves them by up to 5e-11 (linear memory, c = b = 1,
eta 0.5), and the two paths, which round differently (Gram matrix from low-rank factors), differ by up to 1.3e-10
(linear identity l2 global and MLP identity l2 global at eta 0.1; values at most 4e-11).
"""

from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch

from atlas_kernels import MemoryConfig, init_memory_params, memory_chunk
from atlas_kernels.ops.memory.chunk import memory_chunk_torch
from atlas_kernels.testing import config_id, random_inputs, random_loss_grads, result_errors

H = 2
VALUE_TOL, GRAD_TOL = 1e-10, 3e-10


def _run(cfg, T, *, Dk=4, Dv=4, eta_scale=0.1, dtype=torch.float64, gates_fn=None, seed=0):
    """Outputs, state and input gradients (`random_loss_grads`); inputs and parameters are drawn in float64 and cast,
    so that every dtype runs on the same values."""
    q, k, v, gates = random_inputs(2, T, H, Dk, Dv, seed=seed, eta_scale=eta_scale)
    if gates_fn is not None:
        gates = gates_fn(gates)
    params = init_memory_params(cfg, H, Dk, Dv, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    q, k, v = (t.to(dtype) for t in (q, k, v))
    gates = {n: t.to(dtype) for n, t in gates.items()}
    params = {n: t.to(dtype) for n, t in params.items()}
    inputs = {"q": q, "k": k, "v": v, **{f"gate.{n}": t for n, t in gates.items()}, **params}
    for t in inputs.values():
        t.requires_grad_(True)
    o, state = memory_chunk(q, k, v, gates, params, cfg)
    return random_loss_grads(o, state, inputs)


def _assert_same(cfg, T, **kwargs):
    # The materialising path has no Gram-space polynomial, so it always takes the matmul form.
    ref = _run(dataclasses.replace(cfg, ns_form="materialise", ns_eval="matmul"), T, **kwargs)
    out = _run(dataclasses.replace(cfg, ns_form="lowrank"), T, **kwargs)
    errs = result_errors(ref, out)
    bad = {n: e for n, e in errs.items() if not e < (GRAD_TOL if n.startswith("grad") else VALUE_TOL)}
    assert not bad, bad
    return errs


GRID = [
    MemoryConfig(memory=m, optimizer="muon", feature_map=f, bias=b, window=c, chunk_size=4)
    for m, f, b, c in itertools.product(("linear", "mlp", "gated_mlp"), ("identity", "poly"), ("l2", "dot"), (1, 3))
]


@pytest.mark.parametrize("ns_eval", ["matmul", "eigh"])
@pytest.mark.parametrize("cfg", GRID, ids=config_id)
def test_lowrank_equals_materialised(cfg, ns_eval):
    _assert_same(dataclasses.replace(cfg, ns_eval=ns_eval), 13)


MUON = MemoryConfig(memory="mlp", optimizer="muon", feature_map="poly", window=3, chunk_size=4)
VARIANTS = {
    "global-window-33": (dataclasses.replace(MUON, window="global"), dict(T=33)),
    "gated-global-33": (dataclasses.replace(MUON, memory="gated_mlp", window="global"), dict(T=33)),
    "decay-target-init": (dataclasses.replace(MUON, decay_target="init"), dict(T=13)),
    "linear-decay-target-init": (dataclasses.replace(MUON, memory="linear", decay_target="init"), dict(T=13)),
    "norm-readout": (dataclasses.replace(MUON, norm_placement="readout"), dict(T=13)),
    "no-norm-no-residual": (dataclasses.replace(MUON, memory_norm=False, residual=False), dict(T=13)),
    "gelu": (dataclasses.replace(MUON, activation="gelu"), dict(T=13)),
    "gamma-window": (
        dataclasses.replace(MUON, gamma="per_step"),
        dict(T=13, gates_fn=lambda g: {**g, "gamma": g["gamma"][..., None].expand(*g["gamma"].shape, 3) ** 1.5}),
    ),
    "chunk-1": (dataclasses.replace(MUON, chunk_size=1), dict(T=7)),
    "chunk-longer-than-T": (dataclasses.replace(MUON, chunk_size=16), dict(T=7)),
    # linear W [Dv, Dk]: tall (8 x 3) and wide (3 x 8) momenta take the two orientations of the factored form
    "linear-tall": (dataclasses.replace(MUON, memory="linear", feature_map="identity"), dict(T=13, Dk=3, Dv=8)),
    "linear-wide": (dataclasses.replace(MUON, memory="linear", feature_map="identity"), dict(T=13, Dk=8, Dv=3)),
    "mlp-dk-neq-dv": (
        dataclasses.replace(MUON, feature_map="identity", expansion=1, residual=False),
        dict(T=13, Dk=6, Dv=4),
    ),
    "ns-0-steps": (dataclasses.replace(MUON, ns_steps=0), dict(T=13)),
    "ns-1-step": (dataclasses.replace(MUON, ns_steps=1), dict(T=13)),
    "ns-3-steps-other-coeffs": (dataclasses.replace(MUON, ns_steps=3, ns_coeffs=(2.0, -1.5, 0.5)), dict(T=13)),
    "large-eta": (MUON, dict(T=7, eta_scale=0.5)),
}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_lowrank_equals_materialised_variants(name):
    cfg, kwargs = VARIANTS[name]
    _assert_same(cfg, **kwargs)


def test_zero_momentum_keeps_values_and_gradients_finite():
    """gamma = 0 everywhere: every momentum is exactly 0 (the norm is clamped, not differentiated at 0); the weights
    only decay, and values and gradients equal the materialising path's."""
    zero_gamma = lambda g: {**g, "gamma": torch.zeros_like(g["gamma"])}  # noqa: E731
    ref = _run(dataclasses.replace(MUON, ns_form="materialise"), 9, gates_fn=zero_gamma)
    out = _run(MUON, 9, gates_fn=zero_gamma)
    assert all(torch.isfinite(g).all() for g in out[2].values() if g is not None)
    assert out[1]["momentum.W1"].abs().max() == 0
    errs = result_errors(ref, out)
    assert max(errs.values()) < 1e-12, errs


def test_default_form_is_auto():  # "lowrank" where a CPU's per-token form does not pay (test_ns_form_auto.py)
    assert MemoryConfig(optimizer="muon").ns_form == "auto"


def _largest_saved(cfg, T, Dk, Dv):
    """numel of the largest tensor autograd saves for the backward of one run (no chunk checkpointing)."""
    q, k, v, gates = random_inputs(1, T, 1, Dk, Dv, dtype=torch.float32, requires_grad=True)
    params = init_memory_params(cfg, 1, Dk, Dv, generator=torch.Generator().manual_seed(0))
    sizes = [0]
    with torch.autograd.graph.saved_tensors_hooks(lambda t: sizes.append(t.numel()) or t, lambda t: t):
        memory_chunk_torch(q, k, v, gates, params, cfg, checkpoint=False)
    return max(sizes)


def test_lowrank_never_forms_per_token_weights():
    """W2 is 64 x 561 (poly p=2 of 32-dim keys, expansion 2): the materialising path saves per-token stacks of it
    (chunk of 8: 8 x 64 x 561 floats); the factored path saves nothing larger than one weight matrix (the chunk-start
    weights and momentum)."""
    cfg = MemoryConfig(memory="mlp", optimizer="muon", feature_map="poly", expansion=2, window=2, chunk_size=8)
    assert _largest_saved(dataclasses.replace(cfg, ns_form="materialise"), 16, 32, 32) >= 8 * 64 * 561
    assert _largest_saved(cfg, 16, 32, 32) <= 64 * 561


PRECISION_CASES = {  # (T, eta scale, head dim, chunk, window)
    "T21-eta0.3-d4": (21, 0.3, 4, 8, 3),
    "T33-eta0.1-d4": (33, 0.1, 4, 8, 3),
    "T33-eta0.3-d16": (33, 0.3, 16, 16, 2),
}


def _worst_low_precision(dtype, T, eta, dim, chunk, window, **cfg_changes):
    """Worst relative error (outputs, state, every input gradient) against the float64 op on the same values
    (inputs drawn in float64 and cast), of the materialising and the factored path."""
    cfg = dataclasses.replace(MUON, chunk_size=chunk, window=window, **cfg_changes)
    ref = _run(cfg, T, eta_scale=eta, Dk=dim, Dv=dim)
    worst = {}
    for form in ("materialise", "lowrank"):
        out = _run(dataclasses.replace(cfg, ns_form=form), T, eta_scale=eta, Dk=dim, Dv=dim, dtype=dtype)
        worst[form] = max(result_errors(ref, out).values())
    return worst


@pytest.mark.parametrize("case", list(PRECISION_CASES), ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_low_precision_error_no_worse_than_materialised(dtype, case):
    """The factored path's error with float32 / bf16 inputs (the op computes in float32; the factored update in
    float64, muon_float64) is at most 2x the materialising path's. Measured worst ratios in float32: 0.06, 1.8, 0.3
    for the three cases. bf16 inputs: both errors are dominated by the rounding of the inputs themselves."""
    worst = _worst_low_precision(dtype, *PRECISION_CASES[case])
    assert worst["lowrank"] <= 2 * worst["materialise"], worst


def test_float64_accumulation_is_what_closes_the_float32_gap():
    """With muon_float64=False the factored update runs in float32 and its error is many times both the float64-
    accumulated factored path's and the materialising path's at these small heads (the Gram matrix squares the
    momenta's condition number; docs/muon.md, "Precision of the factored path"): the option matters, and the check
    above can fail. The ratios depend on the CPU's float32 kernels: on T33-eta0.1-d4, 50x the float64-accumulated
    error and 40x the materialising path's on an AMD EPYC (2026-12-03); on T21-eta0.3-d4 the latter was 9x on an
    Intel Xeon but 3.4x on the EPYC, so that case does not carry the check."""
    case = PRECISION_CASES["T33-eta0.1-d4"]
    f32 = _worst_low_precision(torch.float32, *case, muon_float64=False)
    f64 = _worst_low_precision(torch.float32, *case)
    assert f32["lowrank"] > 4 * f64["lowrank"], (f32, f64)
    assert f32["lowrank"] > 4 * f32["materialise"], f32


@pytest.mark.parametrize("muon_float64", [True, False])
def test_float64_inputs_do_not_depend_on_the_accumulation_option(muon_float64):
    """In float64 the option changes nothing: both settings compute the same thing in the same dtype."""
    _assert_same(dataclasses.replace(MUON, muon_float64=muon_float64), 13)
