"""The Gram-space Newton-Schulz polynomial P_k(A) evaluated on A's eigenvalues (MemoryConfig.ns_eval = "eigh").

Every quantity of `gram.ns_polynomial` is a polynomial in the symmetric A = A_0 (q_j, A_j and P_j commute), so with
A = U diag(lam) U^T the k steps act on each eigenvalue alone:

    a_0 = lam, p_0 = 1;   q_j = a + b a_j + c a_j^2,   p_{j+1} = q_j p_j,   a_{j+1} = q_j^2 a_j

and P_k(A) = U diag(p_k(lam)) U^T: one eigendecomposition and one r x r product instead of 4k. The backward is
the Daleckii-Krein formula, dL/dA = U (D o (U^T G U)) U^T with D[i, j] the divided difference
(p_k(lam_i) - p_k(lam_j)) / (lam_i - lam_j) (p_k'(lam_i) where they coincide). D is run through the same k steps
by the product rule for divided differences, so it is exact for repeated and clustered eigenvalues (a rank-deficient
momentum has many zero ones) and never divides. Because P_k(A) is a polynomial in A, this gradient is also the one
autograd gives the matmul form for any G, symmetric or not. docs/muon.md, "Evaluating the polynomial on the
eigenvalues".
"""

from __future__ import annotations

import torch

from atlas_kernels.config import NsCoeffs


def _scalar_polynomial(lam: torch.Tensor, steps: int, coeffs: NsCoeffs) -> torch.Tensor:
    """p_k at every eigenvalue: lam [..., r] -> [..., r]."""
    a, b, c = coeffs
    x, p = lam, torch.ones_like(lam)
    for step in range(steps):
        q = a + b * x + c * x * x
        p = q * p
        if step + 1 < steps:
            x = q * q * x
    return p


def _divided_differences(lam: torch.Tensor, steps: int, coeffs: NsCoeffs) -> torch.Tensor:
    """D[..., i, j] = p_k[lam_i, lam_j], the first divided difference (the derivative on the diagonal).

    With x = lam_i, y = lam_j and f[x, y] the divided difference: q[x, y] = (b + c (a_j(x) + a_j(y))) a_j[x, y],
    (q p)[x, y] = q(x) p[x, y] + p(y) q[x, y], (q^2 a)[x, y] = q(x)^2 a[x, y] + a(y) (q(x) + q(y)) q[x, y].
    The r x r matrices live in four buffers updated in place: each step is a dozen passes over memory that a fresh
    tensor per operation would first have to fault in (most of this function's time on a CPU), with the same
    operations in the same order, so the same rounding.
    """
    a, b, c = coeffs
    ax, ay = lam.unsqueeze(-1), lam.unsqueeze(-2)
    shape = torch.broadcast_shapes(ax.shape, ay.shape)
    da = lam.new_ones(shape)  # a_j[x, y]
    dp = lam.new_zeros(shape)  # p_j[x, y]
    dq, tmp = torch.empty_like(da), torch.empty_like(da)
    py = torch.ones_like(ay)  # p_j(y); p_j(x) is not needed
    for step in range(steps):
        qx, qy = a + b * ax + c * ax * ax, a + b * ay + c * ay * ay
        torch.add(ax, ay, out=dq).mul_(c).add_(b).mul_(da)  # q[x, y]
        dp.mul_(qx).add_(torch.mul(py, dq, out=tmp))  # q(x) p[x, y] + p(y) q[x, y]
        py = qy * py
        if step + 1 < steps:
            da.mul_(qx * qx).add_(torch.add(qx, qy, out=tmp).mul_(ay).mul_(dq))
            ax, ay = qx * qx * ax, qy * qy * ay
    return dp


class _SpectralPolynomial(torch.autograd.Function):
    @staticmethod
    def forward(ctx, gram: torch.Tensor, steps: int, coeffs: NsCoeffs) -> torch.Tensor:
        lam, vec = torch.linalg.eigh(gram)
        ctx.save_for_backward(lam, vec)
        ctx.steps, ctx.coeffs = steps, coeffs
        return (vec * _scalar_polynomial(lam, steps, coeffs).unsqueeze(-2)) @ vec.mT

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        lam, vec = ctx.saved_tensors
        inner = vec.mT @ grad @ vec
        return vec @ _divided_differences(lam, ctx.steps, ctx.coeffs).mul_(inner) @ vec.mT, None, None


def ns_polynomial_spectral(gram: torch.Tensor, steps: int, coeffs: NsCoeffs) -> torch.Tensor:
    """`gram.ns_polynomial` (same arguments and result up to rounding) through one eigendecomposition of the
    symmetric Gram matrix [..., r, r]. Only the symmetric part of `gram` is read (eigh reads one triangle), which
    is all a Gram matrix has."""
    if steps == 0:
        return torch.eye(gram.shape[-1], dtype=gram.dtype, device=gram.device).expand_as(gram)
    return _SpectralPolynomial.apply(gram, steps, tuple(float(x) for x in coeffs))
