"""Triton Newton-Schulz == the torch reference (`naive.newton_schulz`): outputs and input gradients.

Runs under the Triton interpreter on CPU (conftest); float64 checks the derivation to round-off, float32 and the
half types check the precision policy through error ratios against a float64 reference.
"""

import pytest
import torch

from atlas_kernels import newton_schulz
from atlas_kernels.testing import rel_err

pytest.importorskip("triton")
from atlas_kernels.ops.newton_schulz import triton as ns_triton  # noqa: E402

pytestmark = pytest.mark.usefixtures("nan_empty")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _grads(fn, x, w, **kw):
    x = x.detach().clone().requires_grad_()
    y = fn(x, **kw)
    (g,) = torch.autograd.grad((y.double() * w).sum(), x)
    return y, g


@pytest.mark.parametrize("shape", [(7, 13), (33, 5), (1, 16, 16), (3, 2, 7, 13), (5, 33, 5), (2, 1, 3)])
@pytest.mark.parametrize("scratch", [True, False], ids=["stored-iterates", "recompute"])
def test_float64_matches_reference(shape, scratch, monkeypatch):
    monkeypatch.setattr(ns_triton, "scratch_limit_bytes", 2**30 if scratch else 0)
    g = torch.Generator().manual_seed(sum(shape))
    x = torch.randn(*shape, generator=g, dtype=torch.float64).to(DEVICE)
    w = torch.randn(*shape, generator=g, dtype=torch.float64).to(DEVICE)
    y_ref, g_ref = _grads(newton_schulz, x, w)
    y, gx = _grads(ns_triton.newton_schulz_triton, x, w)
    assert y.shape == x.shape and y.dtype == x.dtype
    assert rel_err(y_ref, y) < 1e-12
    assert rel_err(g_ref, gx) < 1e-10


@pytest.mark.parametrize("steps,coeffs", [(0, (3.4445, -4.7750, 2.0315)), (2, (1.5, -0.5, 0.0)), (7, (2.0, -1.5, 0.5))])
def test_steps_and_coefficients(steps, coeffs):
    x = torch.randn(3, 9, 6, generator=torch.Generator().manual_seed(steps), dtype=torch.float64).to(DEVICE)
    w = torch.randn_like(x)
    y_ref, g_ref = _grads(newton_schulz, x, w, steps=steps, coeffs=coeffs)
    y, gx = _grads(ns_triton.newton_schulz_triton, x, w, steps=steps, coeffs=coeffs)
    assert rel_err(y_ref, y) < 1e-12
    assert rel_err(g_ref, gx) < 1e-10


@pytest.mark.parametrize(
    "dtype,tol",
    [(torch.float32, 1e-4), (torch.float16, 2e-2), (torch.bfloat16, 4e-2)],
    ids=["fp32", "fp16", "bf16"],
)
def test_low_precision_error_ratio(dtype, tol):
    """Error against a float64 reference on the same (rounded) input; the torch op in the same dtype is shown
    for scale: the kernel (fp32 tiles) must not be worse than it by more than a small factor."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(6, 24, 40, generator=g).to(dtype).to(DEVICE)
    w = torch.randn(6, 24, 40, generator=g, dtype=torch.float64).to(DEVICE)
    y64, g64 = _grads(newton_schulz, x.double(), w)
    y, gx = _grads(ns_triton.newton_schulz_triton, x, w)
    assert y.dtype == dtype
    err_y, err_g = rel_err(y64, y.double()), rel_err(g64, gx.double())
    assert err_y < tol and err_g < tol, (err_y, err_g)
    if dtype != torch.float32:  # the torch reference in the same half dtype, for the ratio
        y_t, g_t = _grads(newton_schulz, x, w)
        assert err_y <= 2 * rel_err(y64, y_t.double()) + 1e-3


def test_zero_matrix_stays_zero_with_finite_gradient():
    x = torch.zeros(2, 4, 6, dtype=torch.float64, device=DEVICE)
    w = torch.ones_like(x)
    y, gx = _grads(ns_triton.newton_schulz_triton, x, w)
    _, g_ref = _grads(newton_schulz, x, w)
    assert y.abs().max() == 0
    assert torch.isfinite(gx).all() and rel_err(g_ref, gx) < 1e-12


def test_rejects_unsupported_inputs():
    with pytest.raises(ValueError, match="x: expected"):
        ns_triton.newton_schulz_triton(torch.ones(3, device=DEVICE))
    with pytest.raises(ValueError, match="limits"):
        ns_triton.newton_schulz_triton(torch.ones(2, 129, 130, device=DEVICE))
    with pytest.raises(ValueError, match="dtype"):
        ns_triton.newton_schulz_triton(torch.ones(2, 3, 3, dtype=torch.int32, device=DEVICE))
