"""Polynomial features with backend selection: the fused Triton kernel where it applies, `poly_features` elsewhere.

The Triton kernel computes phi_a(x / max(||x||, eps)) (l2 normalisation fused in), the memory op phi_a(x) on
inputs the caller normalised. The two agree exactly through the identity

    phi_a(x) = phi_a'(x / s),    a'_i = a_i s^(2i)    (every degree-i monomial scales by s^-i),

for any s > 0: with s a power of two >= 2 max ||x|| (taken without gradient: the identity holds at every fixed s)
and eps = 1, every row of x / s has norm <= 1/2 < eps, so the kernel's normalisation is the identity map in the
forward (x / eps) and in the backward (dn / eps). Powers of two keep x / s and a_i s^(2i) exact.
"""

from __future__ import annotations

import torch

from atlas_kernels.ops.dispatch import triton_candidate
from atlas_kernels.ops.features.poly import poly_features


def _use_triton(x: torch.Tensor, coeffs: torch.Tensor, degree: int) -> bool:
    """The selection rule (`ops/dispatch.py`): a CUDA tensor, not float64, triton installed, non-empty, and the
    kernel's own check (`triton._check`: feature dim, coefficient shape, dtype) passes. Tests replace it."""
    if not triton_candidate(x) or x.numel() == 0:
        return False
    from atlas_kernels.ops.features.triton import _check

    try:
        _check(x, coeffs, degree)
    except ValueError:
        return False
    return True


def _power_of_two_bound(x: torch.Tensor) -> torch.Tensor:
    """k >= 0 (int tensor, on x's device, no sync) with 2^k >= 2 max ||x|| over the rows of x, or k = 0."""
    norm = torch.linalg.vector_norm(x.detach().float(), dim=-1).amax()
    _, exponent = torch.frexp(norm)  # norm = m 2^e with m in [0.5, 1): norm < 2^e
    return (exponent + 1).clamp(min=0)


def poly_features_auto(x: torch.Tensor, coeffs: torch.Tensor, degree: int) -> torch.Tensor:
    """`poly_features(x, coeffs, degree)` (same arguments, result and gradients), run by
    `poly_features_l2norm_triton` on x / s with a_i s^(2i) when `_use_triton(x, coeffs, degree)` (module docstring).
    """
    if not _use_triton(x, coeffs, degree):
        return poly_features(x, coeffs, degree)
    from atlas_kernels.ops.features.triton import poly_features_l2norm_triton

    k = _power_of_two_bound(x)
    scale = torch.exp2(-k.to(x.dtype))
    powers = torch.arange(degree + 1, device=coeffs.device, dtype=coeffs.dtype)
    return poly_features_l2norm_triton(x * scale, coeffs * torch.exp2(2 * powers * k.to(coeffs.dtype)), degree, eps=1.0)
