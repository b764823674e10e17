import math

import pytest
import torch
import torch.nn.functional as F

from atlas_kernels import poly_feature_dim, poly_features, poly_init_coeffs, poly_kernel


@pytest.mark.parametrize("d,p", [(3, 1), (4, 2), (5, 3)])
def test_feature_inner_product_is_the_kernel(d, p):
    g = torch.Generator().manual_seed(d)
    x, y = (F.normalize(torch.randn(2, 3, 7, d, generator=g, dtype=torch.float64), dim=-1) for _ in range(2))
    a = torch.rand(3, p + 1, generator=g, dtype=torch.float64)  # per head
    fx, fy = poly_features(x, a, p), poly_features(y, a, p)
    assert fx.shape[-1] == poly_feature_dim(d, p) == math.comb(d + p, p)
    torch.testing.assert_close((fx * fy).sum(-1), poly_kernel((x * y).sum(-1, keepdim=True), a).squeeze(-1))


def test_init_coefficients_are_taylor_and_approach_exp():
    a = poly_init_coeffs(12, torch.float64)
    assert torch.allclose(a, torch.tensor([1 / math.factorial(i) for i in range(13)], dtype=torch.float64))
    s = torch.linspace(-1, 1, 11, dtype=torch.float64)
    assert (poly_kernel(s, a) - s.exp()).abs().max() < 1e-9


def test_degree_one_coefficients_give_identity_features():
    x = torch.randn(4, 6, dtype=torch.float64)
    f = poly_features(x, torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64), 2)
    torch.testing.assert_close(f[..., 1:7], x)
    assert f[..., 0].abs().max() == 0 and f[..., 7:].abs().max() == 0


def test_coefficient_shape_is_checked():
    with pytest.raises(ValueError, match="coeffs"):
        poly_features(torch.randn(3, 4), torch.ones(2), 2)
