"""Newton-Schulz iteration NS_k: pushes every singular value of a matrix towards 1, keeping the singular vectors.

Muon's quintic X <- a X + (b A + c A^2) X with A = X X^T, after Frobenius pre-normalisation (so that all
singular values start in (0, 1]). Tall matrices are transposed so that A is the smaller Gram matrix.
The quintic (3.4445, -4.7750, 2.0315) trades exactness for speed: after 5 steps singular values that
started above ~1e-2 of the largest lie in a band around 1 (roughly [0.68, 1.13]), not exactly at 1; smaller ones
stay below it (32 x 32, the others at the largest: 1e-2 -> 0.79, 3e-3 -> 0.26, 1e-3 -> 0.09; the threshold moves
with the Frobenius pre-normalisation, i.e. with the rank).
NS is scale-invariant, which is why the inner learning rate multiplies its output (docs/muon.md, "The update").
"""

from __future__ import annotations

import torch
from torch import Tensor

from atlas_kernels.config import DEFAULT_NS_COEFFS, NsCoeffs


def wide_normalised(x: torch.Tensor, eps: float) -> tuple[torch.Tensor, bool]:
    """The start of every Newton-Schulz form: a tall batch is transposed (the Gram matrix is then the smaller
    one) and each matrix divided by its Frobenius norm + eps. Returns (Y_0, whether x was transposed)."""
    if x.dim() < 2:
        raise ValueError(f"x: expected [..., m, n] matrices, got shape {tuple(x.shape)}")
    tall = x.shape[-2] > x.shape[-1]
    y = x.mT if tall else x
    return y / (torch.linalg.matrix_norm(y, keepdim=True) + eps), tall


def newton_schulz(x: Tensor, steps: int = 5, coeffs: NsCoeffs = DEFAULT_NS_COEFFS, eps: float = 1e-7) -> Tensor:
    """Apply `steps` quintic Newton-Schulz iterations to every matrix of a batch.

    Args:
        x: [..., m, n] matrices (any leading batch dims).
        steps: k, the number of iterations (0 returns the normalised input).
        coeffs: (a, b, c) of X <- a X + (b A + c A A) X.
        eps: added to the Frobenius norm in the pre-normalisation (keeps a zero matrix at zero).
    Returns:
        [..., m, n], same dtype as x.
    """
    a, b, c = coeffs
    y, tall = wide_normalised(x, eps)
    for _ in range(steps):
        gram = y @ y.mT
        y = a * y + (b * gram + c * (gram @ gram)) @ y
    return y.mT if tall else y
