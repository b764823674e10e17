"""Newton-Schulz NS_k run on the r x r Gram matrix: the same map as `naive.newton_schulz`, cheaper when r << n.

For a wide Y_0 (r <= n, tall inputs are transposed as in `newton_schulz`) every iterate is Y_j = P_j Y_0 with P_j
an r x r matrix, because each step multiplies from the left by q_j = a I + b A_j + c A_j^2, A_j = Y_j Y_j^T:

    A_0 = Y_0 Y_0^T,  P_0 = I;    P_{j+1} = q_j P_j,    A_{j+1} = Y_{j+1} Y_{j+1}^T = q_j A_j q_j

(q_j is symmetric). The k steps never touch the r x n matrix; it enters twice, in A_0 and in Y_k = P_k Y_0. Exact
in exact arithmetic; per matrix about 4k r^3 + 2 r^2 n multiply-adds against k (2 r^2 n + r^3) (docs/muon.md,
"Newton-Schulz in Gram space"). Plain torch ops, so autograd gives the backward.
"""

from __future__ import annotations

import torch
from torch import Tensor

from atlas_kernels.config import DEFAULT_NS_COEFFS, NsCoeffs
from atlas_kernels.ops.newton_schulz.naive import wide_normalised


def ns_polynomial(gram: torch.Tensor, steps: int, coeffs: NsCoeffs) -> torch.Tensor:
    """P_k with NS_k(Y_0) = P_k Y_0, from the Gram matrix A_0 = Y_0 Y_0^T [..., r, r] of a normalised wide Y_0.

    Also the entry point of the chunk op's low-rank Muon path (`ops/memory/muon_lowrank.py`), which builds A_0
    without ever forming Y_0. steps = 0 gives the identity.
    """
    a, b, c = coeffs
    eye = torch.eye(gram.shape[-1], dtype=gram.dtype, device=gram.device)
    if steps == 0:
        return eye.expand_as(gram)
    poly = None
    for step in range(steps):
        q = a * eye + b * gram + c * (gram @ gram)
        poly = q if poly is None else q @ poly  # P_1 = q_0: skip the product with the identity
        if step + 1 < steps:  # the last step needs no Gram matrix
            gram = q @ gram @ q
    return poly


def newton_schulz_gram(x: Tensor, steps: int = 5, coeffs: NsCoeffs = DEFAULT_NS_COEFFS, eps: float = 1e-7) -> Tensor:
    """`newton_schulz` (same arguments, shapes and dtype; the same result up to rounding), iterating on the Gram
    matrix."""
    y, tall = wide_normalised(x, eps)
    if steps > 0:
        y = ns_polynomial(y @ y.mT, steps, coeffs) @ y
    return y.mT if tall else y


def ns_polynomial_of(x: torch.Tensor, steps: int, coeffs: NsCoeffs, eps: float) -> torch.Tensor:
    """P_k of x (`ns_polynomial` of its normalised Gram matrix, x transposed first when tall): the polynomial that
    `apply_ns_polynomial` applies to other matrices of x's shape (Muon with muon_polynomial="chunk")."""
    y, _ = wide_normalised(x, eps)
    return ns_polynomial(y @ y.mT, steps, coeffs)


def apply_ns_polynomial(x: torch.Tensor, poly: torch.Tensor, eps: float) -> torch.Tensor:
    """P Y_0 for x's own normalised Y_0 (transposed back when x is tall): NS_k(x) when poly = ns_polynomial_of(x)."""
    y, tall = wide_normalised(x, eps)
    y = poly @ y
    return y.mT if tall else y
