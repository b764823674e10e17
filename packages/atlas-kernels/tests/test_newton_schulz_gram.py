import pytest
import torch

from atlas_kernels import newton_schulz
from atlas_kernels.ops.newton_schulz import newton_schulz_gram

SHAPES = [(7, 33), (33, 7), (8, 45), (16, 136), (13, 13), (1, 9)]


def _rel(u, v):
    return ((u.double() - v.double()).norm() / v.double().norm()).item()


def _value_and_grad(fn, x, cotangent, **kwargs):
    x = x.detach().requires_grad_()
    y = fn(x, **kwargs)
    (gx,) = torch.autograd.grad(y, x, cotangent)
    return y.detach(), gx


def _pair(x, seed, **kwargs):
    cotangent = torch.randn(x.shape, generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64)
    cotangent = cotangent.to(x.dtype)
    return (
        _value_and_grad(newton_schulz, x, cotangent, **kwargs),
        _value_and_grad(newton_schulz_gram, x, cotangent, **kwargs),
    )


@pytest.mark.parametrize("steps", [1, 3, 5])
@pytest.mark.parametrize("shape", SHAPES)
def test_float64_equals_materialised(shape, steps):
    x = torch.randn(2, 3, *shape, generator=torch.Generator().manual_seed(steps), dtype=torch.float64)
    (y_ref, g_ref), (y, g) = _pair(x, steps, steps=steps)
    assert y.shape == x.shape and y.dtype == x.dtype
    assert _rel(y, y_ref) < 1e-10
    assert _rel(g, g_ref) < 1e-10


@pytest.mark.parametrize("lead", [(), (5,), (2, 1, 3)])
@pytest.mark.parametrize("steps", [0, 2])
def test_leading_dims_steps_and_coefficients(lead, steps):
    x = torch.randn(*lead, 6, 20, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    # Classic cubic Newton-Schulz (c = 0) as well as the quintic default.
    for coeffs in [(3.4445, -4.7750, 2.0315), (1.5, -0.5, 0.0)]:
        (y_ref, g_ref), (y, g) = _pair(x, 7, steps=steps, coeffs=coeffs, eps=1e-3)
        assert _rel(y, y_ref) < 1e-10
        assert _rel(g, g_ref) < 1e-10


@pytest.mark.parametrize("shape", [(7, 33), (33, 7)])
def test_near_zero_and_zero_input(shape):
    """The eps of the pre-normalisation dominates: near zero the output is small, at zero it is zero."""
    x = 1e-9 * torch.randn(3, *shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    (y_ref, g_ref), (y, g) = _pair(x, 3)
    assert _rel(y, y_ref) < 1e-10
    assert _rel(g, g_ref) < 1e-10
    (y_ref, g_ref), (y, g) = _pair(torch.zeros_like(x), 3)
    assert y.abs().max() == 0
    assert _rel(g, g_ref) < 1e-10


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(16, 136), (48, 320), (96, 24)])
def test_low_precision_error_at_most_twice_materialised(dtype, shape):
    """Against a float64 reference, the Gram path in low precision loses no more than the materialised one (2x)."""
    x = torch.randn(4, *shape, generator=torch.Generator().manual_seed(11), dtype=torch.float64)
    cotangent = torch.randn(x.shape, generator=torch.Generator().manual_seed(12), dtype=torch.float64)
    y_ref, g_ref = _value_and_grad(newton_schulz, x, cotangent)
    y_mat, g_mat = _value_and_grad(newton_schulz, x.to(dtype), cotangent.to(dtype))
    y_gram, g_gram = _value_and_grad(newton_schulz_gram, x.to(dtype), cotangent.to(dtype))
    assert y_gram.dtype == dtype
    assert _rel(y_gram, y_ref) <= 2 * _rel(y_mat, y_ref)
    assert _rel(g_gram, g_ref) <= 2 * _rel(g_mat, g_ref)


def test_rejects_vectors():
    with pytest.raises(ValueError, match="x: expected"):
        newton_schulz_gram(torch.ones(3))
