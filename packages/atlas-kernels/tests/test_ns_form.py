"""MemoryConfig.ns_form: every way of computing Muon's Newton-Schulz gives the op's values and gradients (float64).

"gram" runs NS_k on the Gram matrix of each materialised momentum; "lowrank" (the default) never forms per-token
momenta or weights in the chunk op (`ops/memory/muon_lowrank.py`). Both against "materialise", the textbook map.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from atlas_kernels import MemoryConfig, init_memory_params, memory_chunk, memory_naive
from atlas_kernels.config import MemoryConfigError
from atlas_kernels.ops.memory import chunk as chunk_module
from atlas_kernels.testing import random_inputs, random_loss_grads, result_errors

H, D = 2, 4
# poly features: phi(k) has C(6, 2) = 15 entries, so W2 is 16 x 15 (tall) and W1 4 x 16 (wide).
MUON_POLY = MemoryConfig(
    memory="mlp", optimizer="muon", feature_map="poly", poly_degree=2, chunk_size=4, ns_form="materialise"
)


def _run(op, cfg, T):
    """Outputs, final state and the gradient of every input of a random loss over outputs and final state."""
    q, k, v, gates = random_inputs(2, T, H, D, seed=T, requires_grad=True, eta_scale=0.1)
    g = torch.Generator().manual_seed(1)
    params = {
        n: t.requires_grad_(True) for n, t in init_memory_params(cfg, H, D, D, dtype=torch.float64, generator=g).items()
    }
    inputs = {"q": q, "k": k, "v": v, **{f"gate.{n}": t for n, t in gates.items()}, **params}
    o, state = op(q, k, v, gates, params, cfg)
    return random_loss_grads(o, state, inputs)


FORM_TOL = 5e-10  # rounding amplified by Newton-Schulz, measured on two CPUs (test docstring)

# The token oracle at T = 33 repeats T = 7's path 33 times (slow); the chunk op's T = 33 crosses chunk edges.
OPS_AND_LENGTHS = [
    pytest.param(memory_chunk, 7, id="chunk-7"),
    pytest.param(memory_chunk, 33, id="chunk-33"),
    pytest.param(memory_naive, 7, id="naive-7"),
    pytest.param(memory_naive, 33, id="naive-33", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("form", ["gram", "lowrank"])
@pytest.mark.parametrize("window", [1, 3])
@pytest.mark.parametrize(("op", "T"), OPS_AND_LENGTHS)
def test_gram_forms_equal_materialised(op, T, window, form):
    """Outputs, final state and every input gradient agree to FORM_TOL (max-abs relative).

    The momenta are rank-deficient (W1's through the LayerNorm backward, early tokens' by their count), and Newton-
    Schulz lifts their null directions by up to a^k ~ 490, so rounding is amplified: at eta_scale 0.1 a random
    1e-15 relative perturbation of every Newton-Schulz input moves the gradients by up to 1e-11. How far the forms'
    rounding lands apart depends on the CPU's BLAS kernels: at T = 33, c = 1 the largest gradient difference was
    2.3e-11 on the machine this test was written on and 1.1e-10 ("gram") / 2.1e-10 ("lowrank") on an AMD EPYC
    with MKL 2024.2 (docs/muon.md, "Precision"). A wrong term in a form moves them by 1e-3 or more.
    """
    base = dataclasses.replace(MUON_POLY, window=window)
    errs = result_errors(_run(op, base, T), _run(op, dataclasses.replace(base, ns_form=form), T))
    bad = {name: e for name, e in errs.items() if not e < FORM_TOL}
    assert not bad, bad


def test_ns_form_is_checked_and_round_trips():
    assert MemoryConfig().ns_form == "auto"
    with pytest.raises(
        MemoryConfigError, match="ns_form: expected one of materialise, gram, lowrank, auto, got 'dense'"
    ):
        MemoryConfig(ns_form="dense")
    for form in ("gram", "lowrank"):
        cfg = dataclasses.replace(MUON_POLY, ns_form=form)
        assert MemoryConfig.from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize(("form", "expected"), [("materialise", "auto"), ("gram", "gram"), ("auto", "gram")])
def test_chunk_op_runs_the_form_it_names(monkeypatch, form, expected):
    """The forms agree in value (above), so only the calls tell them apart: "gram" iterates on Gram matrices
    (`newton_schulz_gram`), "materialise" on the momenta (`newton_schulz_auto`, Triton on a GPU)."""
    calls = []
    for name in ("newton_schulz_auto", "newton_schulz_gram"):
        real = getattr(chunk_module, name)
        monkeypatch.setattr(chunk_module, name, lambda *a, _real=real, _n=name: calls.append(_n) or _real(*a))
    _run(memory_chunk, dataclasses.replace(MUON_POLY, ns_form=form), 7)
    assert calls and set(calls) == {f"newton_schulz_{expected}"}, calls
