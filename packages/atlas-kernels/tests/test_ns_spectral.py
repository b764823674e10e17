"""The Newton-Schulz polynomial on the Gram matrix's eigenvalues (ns_eval="eigh", `newton_schulz/spectral.py`).

Against the matmul form (`gram.ns_polynomial`, the k steps as r x r products) in float64: values and gradients, for
full-rank, rank-deficient (many zero eigenvalues) and exactly repeated spectra; against `torch.autograd.gradcheck`;
and the choice of "auto". The chunk op's factored Muon with either evaluation against the materialising path (which
never forms a Gram matrix) is test_muon_lowrank.py; here, the approximate Muon's polynomial both ways.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from atlas_kernels import MemoryConfig, MemoryConfigError, init_memory_params, memory_chunk
from atlas_kernels.config import DEFAULT_NS_COEFFS
from atlas_kernels.ops.memory import muon_lowrank
from atlas_kernels.ops.newton_schulz.gram import ns_polynomial
from atlas_kernels.ops.newton_schulz.spectral import _divided_differences, ns_polynomial_spectral
from atlas_kernels.testing import random_inputs, random_loss_grads, result_errors

VALUE_TOL, GRAD_TOL = 1e-10, 3e-10


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm()).item()


def _gram(r: int, n: int, seed: int) -> torch.Tensor:
    """A normalised Gram matrix Y Y^T of a random r x n Y (trace 1: the spectrum Newton-Schulz starts from)."""
    y = torch.randn(3, r, n, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    g = y @ y.mT
    return g / torch.diagonal(g, dim1=-2, dim2=-1).sum(-1)[..., None, None]


def _both(gram: torch.Tensor, steps: int, coeffs) -> tuple[float, float]:
    """Relative differences of values and of the gradient of a random linear loss, eigh against matmul."""
    upstream = torch.randn(gram.shape, dtype=gram.dtype, generator=torch.Generator().manual_seed(7))
    out = {}
    for name, fn in (("matmul", ns_polynomial), ("eigh", ns_polynomial_spectral)):
        a = gram.clone().requires_grad_(True)
        p = fn(a, steps, coeffs)
        (p * upstream).sum().backward()
        out[name] = (p.detach(), a.grad)
    return _rel(out["eigh"][0], out["matmul"][0]), _rel(out["eigh"][1], out["matmul"][1])


SPECTRA = {
    "full-rank-7x19": lambda: _gram(7, 19, 0),
    "rank-deficient-9x3": lambda: _gram(9, 3, 1),  # six zero eigenvalues
    "rank-one-5x1": lambda: _gram(5, 1, 2),
    "repeated-eigenvalues": lambda: (
        torch.block_diag(torch.eye(3), 2 * torch.eye(2), torch.zeros(2, 2)).double().expand(2, 7, 7) / 7
    ),
    "clustered-eigenvalues": lambda: _gram(6, 40, 3) * 1e-3 + torch.eye(6, dtype=torch.float64) / 6,
}


@pytest.mark.parametrize("spectrum", list(SPECTRA))
@pytest.mark.parametrize("steps, coeffs", [(5, DEFAULT_NS_COEFFS), (1, DEFAULT_NS_COEFFS), (3, (2.0, -1.5, 0.5))])
def test_spectral_equals_matmul(spectrum, steps, coeffs):
    values, grads = _both(SPECTRA[spectrum](), steps, coeffs)
    assert values < VALUE_TOL and grads < GRAD_TOL, (values, grads)


def _divided_differences_out_of_place(lam: torch.Tensor, steps: int, coeffs) -> torch.Tensor:
    """The product-rule recursion of `spectral._divided_differences` with a new tensor per operation."""
    a, b, c = coeffs
    ax, ay = lam.unsqueeze(-1), lam.unsqueeze(-2)
    da, dp = torch.ones_like(ax * ay), torch.zeros_like(ax * ay)
    py = torch.ones_like(ay)
    for step in range(steps):
        qx, qy = a + b * ax + c * ax * ax, a + b * ay + c * ay * ay
        dq = (b + c * (ax + ay)) * da
        dp = qx * dp + py * dq
        py = qy * py
        if step + 1 < steps:
            da = qx * qx * da + ay * (qx + qy) * dq
            ax, ay = qx * qx * ax, qy * qy * ay
    return dp


@pytest.mark.parametrize("spectrum", list(SPECTRA))
@pytest.mark.parametrize("steps, coeffs", [(5, DEFAULT_NS_COEFFS), (1, DEFAULT_NS_COEFFS), (0, DEFAULT_NS_COEFFS),
                                           (3, (2.0, -1.5, 0.5))])  # fmt: skip
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_in_place_divided_differences_equal_the_out_of_place_recursion_bit_for_bit(spectrum, steps, coeffs, dtype):
    lam = torch.linalg.eigvalsh(SPECTRA[spectrum]()).to(dtype)
    expected = _divided_differences_out_of_place(lam, steps, coeffs)
    assert torch.equal(_divided_differences(lam, steps, coeffs), expected)


def test_divided_differences_are_the_derivative_on_the_diagonal_and_the_slope_off_it():
    lam = torch.tensor([0.0, 0.05, 0.3, 0.3, 0.9], dtype=torch.float64)
    d = _divided_differences(lam, 5, DEFAULT_NS_COEFFS)
    p = lambda x: ns_polynomial_spectral(torch.diag(x), 5, DEFAULT_NS_COEFFS).diagonal()  # noqa: E731
    slope = (p(lam[[1]]) - p(lam[[2]])) / (lam[1] - lam[2])
    derivative = torch.autograd.functional.jacobian(p, lam[[4]])[0, 0]
    assert torch.allclose(d[1, 2], slope[0], rtol=1e-12) and torch.allclose(d[4, 4], derivative, rtol=1e-12)
    assert torch.allclose(d, d.mT, rtol=1e-12) and d[2, 3] == d[2, 2]  # repeated eigenvalues: no 0 / 0


def test_zero_steps_is_the_identity():
    gram = _gram(4, 9, 4)
    assert torch.equal(ns_polynomial_spectral(gram, 0, DEFAULT_NS_COEFFS), torch.eye(4).double().expand(3, 4, 4))


def test_gradcheck():
    # eigh reads one triangle, so finite differences see a symmetric matrix: symmetrise the free input first. Full
    # rank: at zero eigenvalues p_k has derivatives of order 1e6, beyond finite differences (the matmul comparison
    # above covers rank-deficient spectra)
    x = _gram(4, 9, 5)[:1].clone().requires_grad_(True)
    fn = lambda m: ns_polynomial_spectral((m + m.mT) / 2, 5, DEFAULT_NS_COEFFS)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (x,), eps=1e-7, atol=1e-7, rtol=1e-6)


def test_gradient_of_a_non_symmetric_upstream_matches_matmul():
    # the chunk op's Gram matrix is assembled from pieces, so its upstream gradient need not be symmetric
    gram = _gram(6, 4, 6)
    upstream = torch.triu(torch.randn(gram.shape, dtype=gram.dtype, generator=torch.Generator().manual_seed(8)))
    grads = []
    for fn in (ns_polynomial, ns_polynomial_spectral):
        a = gram.clone().requires_grad_(True)
        (fn(a, 5, DEFAULT_NS_COEFFS) * upstream).sum().backward()
        grads.append(a.grad)
    assert _rel(grads[1], grads[0]) < GRAD_TOL
    assert not torch.allclose(grads[0], grads[0].mT)


# ---- the chunk op


def _run(cfg: MemoryConfig, T: int, *, Dk: int = 4, Dv: int = 4) -> dict[str, torch.Tensor]:
    q, k, v, gates = random_inputs(2, T, 2, Dk, Dv, seed=0, eta_scale=0.1)
    params = init_memory_params(cfg, 2, Dk, Dv, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    inputs = {"q": q, "k": k, "v": v, **{f"gate.{n}": t for n, t in gates.items()}, **params}
    for t in inputs.values():
        t.requires_grad_(True)
    o, state = memory_chunk(q, k, v, gates, params, cfg)
    return random_loss_grads(o, state, inputs)


def _assert_close(ref: dict, out: dict, grad_tol: float = GRAD_TOL) -> None:
    errs = result_errors(ref, out)
    bad = {n: e for n, e in errs.items() if not e < (grad_tol if n.startswith("grad") else VALUE_TOL)}
    assert not bad, bad


def test_approximate_muon_takes_the_same_polynomial():
    approx = MemoryConfig(memory="mlp", optimizer="muon", feature_map="poly", window=3, chunk_size=4,
                          muon_polynomial="chunk")  # fmt: skip
    # One polynomial per chunk lifts the directions its first momentum lacks by up to a^k ~ 490 (docs/muon.md), so
    # the two evaluations' rounding of P lands further apart in the gradients: 6.4e-10 measured on an AMD EPYC with
    # MKL 2024.2. A wrong polynomial moves them by 1e-3 or more.
    matmul, eigh = (_run(dataclasses.replace(approx, ns_eval=e), 13) for e in ("matmul", "eigh"))
    _assert_close(matmul, eigh, grad_tol=2e-9)


@pytest.mark.parametrize(
    "ns_eval, muon_float64, expected",
    [("auto", True, "eigh"), ("auto", False, "matmul"), ("matmul", True, "matmul"), ("eigh", False, "eigh")],
)
def test_auto_takes_eigh_for_float64_on_a_cpu(monkeypatch, ns_eval, muon_float64, expected):
    calls = []
    for name in ("ns_polynomial", "ns_polynomial_spectral"):
        real = getattr(muon_lowrank, name)
        monkeypatch.setattr(muon_lowrank, name, lambda *a, _real=real, _n=name: calls.append(_n) or _real(*a))
    cfg = MemoryConfig(
        memory="linear", optimizer="muon", chunk_size=4, ns_eval=ns_eval, muon_float64=muon_float64, ns_form="lowrank"
    )  # ns_eval is the factored path's (auto takes a per-token form here)
    q, k, v, gates = random_inputs(1, 5, 2, 4, 4, seed=0)
    params = init_memory_params(cfg, 2, 4, 4)
    memory_chunk(q.float(), k.float(), v.float(), {n: t.float() for n, t in gates.items()}, params, cfg)
    assert calls and set(calls) == {"ns_polynomial_spectral" if expected == "eigh" else "ns_polynomial"}


@pytest.mark.parametrize(
    "kwargs",
    [dict(optimizer="gd"), dict(optimizer="momentum"), dict(optimizer="muon", ns_form="materialise")],
    ids=["gd", "momentum", "materialise"],
)
def test_only_the_factored_muon_path_takes_the_option(kwargs):
    with pytest.raises(MemoryConfigError, match="ns_eval"):
        MemoryConfig(ns_eval="eigh", **kwargs)


def test_unknown_value_names_the_key():
    with pytest.raises(MemoryConfigError, match="ns_eval: expected one of auto, matmul, eigh"):
        MemoryConfig(optimizer="muon", ns_eval="svd")
