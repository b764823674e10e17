"""Triton phi(l2norm(x)) == poly_features(F.normalize(x)) (torch): features and gradients to x and a."""

import pytest
import torch
import torch.nn.functional as F

from atlas_kernels import poly_features
from atlas_kernels.testing import rel_err

pytest.importorskip("triton")
from atlas_kernels.ops.features.triton import poly_features_l2norm_triton  # noqa: E402

pytestmark = pytest.mark.usefixtures("nan_empty")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _run(fn, x, a, p, w):
    x = x.detach().clone().requires_grad_()
    a = a.detach().clone().requires_grad_()
    y = fn(x, a, p)
    gx, ga = torch.autograd.grad((y.double() * w).sum(), (x, a))
    return y, gx, ga


def _reference(x, a, p):
    return poly_features(F.normalize(x, dim=-1), a, p)


@pytest.mark.parametrize(
    "shape,p,per_head",
    [
        ((2, 3, 5, 4), 2, True),  # [B, H, T, d], per-head a
        ((1, 2, 33, 7), 3, True),  # odd T, odd d, degree 3
        ((7, 13), 2, False),  # rows with shared a, d = 13
        ((2, 2, 3, 16), 1, True),  # degree 1: (sqrt(a0), sqrt(a1) n)
        ((3, 1, 9, 5), 4, True),
    ],
)
def test_float64_matches_reference(shape, p, per_head):
    g = torch.Generator().manual_seed(p * 10 + shape[-1])
    x = torch.randn(*shape, generator=g, dtype=torch.float64).to(DEVICE)
    a_shape = (shape[-3], p + 1) if per_head else (p + 1,)
    a = (0.1 + torch.rand(*a_shape, generator=g, dtype=torch.float64)).to(DEVICE)
    y_ref = _reference(x, a, p)
    w = torch.randn(y_ref.shape, generator=g, dtype=torch.float64).to(DEVICE)
    y_ref, gx_ref, ga_ref = _run(_reference, x, a, p, w)
    y, gx, ga = _run(poly_features_l2norm_triton, x, a, p, w)
    assert y.shape == y_ref.shape and y.dtype == x.dtype
    assert rel_err(y_ref, y) < 1e-12
    assert rel_err(gx_ref, gx) < 1e-11
    assert rel_err(ga_ref, ga) < 1e-11


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 1e-2)], ids=["fp32", "bf16"])
def test_low_precision(dtype, tol):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(1, 2, 17, 8, generator=g).to(dtype).to(DEVICE)
    a = torch.tensor([[1.0, 1.0, 0.5], [0.3, 2.0, 0.1]], device=DEVICE)
    w = torch.randn(1, 2, 17, 45, generator=g, dtype=torch.float64).to(DEVICE)
    y_ref, gx_ref, ga_ref = _run(_reference, x.double(), a.double(), 2, w)
    y, gx, ga = _run(poly_features_l2norm_triton, x, a, 2, w)
    assert y.dtype == dtype and gx.dtype == dtype
    for ref, out in ((y_ref, y), (gx_ref, gx), (ga_ref, ga)):
        assert rel_err(ref, out.double()) < tol


def test_small_and_zero_rows_follow_normalize():
    x = torch.zeros(2, 1, 3, 4, dtype=torch.float64, device=DEVICE)
    x[0, 0, 1] = torch.tensor([1e-14, 0.0, -2e-14, 0.0])  # below the eps of F.normalize: x / eps
    x[1, 0, 2] = torch.tensor([0.5, -1.0, 2.0, 0.25])
    a = torch.tensor([[1.0, 0.5, 0.25]], dtype=torch.float64, device=DEVICE)
    w = torch.randn(2, 1, 3, 15, generator=torch.Generator().manual_seed(0), dtype=torch.float64).to(DEVICE)
    ref = _run(_reference, x, a, 2, w)
    out = _run(poly_features_l2norm_triton, x, a, 2, w)
    for r, o in zip(ref, out):  # eps reaches the kernel as an fp32 scalar: 1e-12 carries a 2e-8 relative error
        assert rel_err(r, o) < 1e-7


def test_identity_coefficients_give_normalised_input():
    x = torch.randn(1, 2, 5, 6, dtype=torch.float64, device=DEVICE)
    a = torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64, device=DEVICE)
    f = poly_features_l2norm_triton(x, a, 2)
    torch.testing.assert_close(f[..., 1:7], F.normalize(x, dim=-1))
    assert f[..., 0].abs().max() == 0 and f[..., 7:].abs().max() == 0


def test_rejects_bad_arguments():
    x = torch.randn(2, 3, 4, device=DEVICE)
    with pytest.raises(ValueError, match="coeffs"):
        poly_features_l2norm_triton(x, torch.ones(2, device=DEVICE), 2)
    with pytest.raises(ValueError, match="degree"):
        poly_features_l2norm_triton(x, torch.ones(1, device=DEVICE), 0)
    with pytest.raises(ValueError, match="per-head"):
        poly_features_l2norm_triton(x, torch.ones(5, 3, device=DEVICE), 2)
