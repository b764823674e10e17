"""The learnable polynomial feature map of ATLAS (Eq. 5) and the truncated exp kernel.

phi(x) = concat_{i=0..p} sqrt(a_i) * m_i(x), where m_i(x) holds the symmetric monomials of degree i,
each scaled by the square root of its multinomial coefficient, so that m_i(x) . m_i(y) = (x . y)^i and

    phi(x) . phi(y) = sum_i a_i (x . y)^i,         dim phi = C(d + p, p).

a_i are learnable and initialised to 1/i! (the Taylor coefficients of exp); a = (0, 1, 0, ...) gives
phi(x) = (0, x, 0, ...), i.e. identity features padded with zeros. a_i must be >= 0 (the model
parametrises them positively); a_i = 0 is fine in the forward pass, its gradient through sqrt is not.
With a_i = 1/i! and p -> infinity this is phi*, the exp kernel: phi*(x) . phi*(y) = exp(x . y).
"""

from __future__ import annotations

import itertools
import math
from functools import lru_cache

import torch


def poly_feature_dim(dim: int, degree: int) -> int:
    """C(dim + degree, degree): the number of monomials of total degree <= `degree`."""
    return math.comb(dim + degree, degree)


def poly_init_coeffs(degree: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The paper's initialisation a_i = 1/i!, i = 0..degree. Shape [degree + 1]."""
    return torch.tensor([1.0 / math.factorial(i) for i in range(degree + 1)], dtype=dtype)


exp_taylor_coeffs = poly_init_coeffs


def _monomials(dim: int, degree: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Index tuples [M, degree] of the degree-`degree` monomials and sqrt of their multinomial coefficients.

    Constants of (dim, degree): `mark_compile_constants` marks this function as having a constant result (the
    compiled chunk op calls it), so torch.compile takes it as such instead of tracing the Python enumeration.
    Marking it here, at import, would import torch._dynamo with every import of the package (1.7 s).
    """
    return _monomial_table(dim, degree)


def mark_compile_constants() -> None:
    """Tell torch.compile that `_monomials` returns constants of its arguments. Call it before compiling code that
    builds polynomial features (it imports torch._dynamo, which the package avoids at import)."""
    torch.compiler.assume_constant_result(_monomials)


@lru_cache(maxsize=64)
def _monomial_table(dim: int, degree: int) -> tuple[torch.Tensor, torch.Tensor]:
    combos = list(itertools.combinations_with_replacement(range(dim), degree))
    index = torch.tensor(combos, dtype=torch.long).reshape(len(combos), degree)
    scale = []
    for combo in combos:
        counts = [combo.count(j) for j in set(combo)]
        multinomial = math.factorial(degree) // math.prod(math.factorial(c) for c in counts)
        scale.append(math.sqrt(multinomial))
    return index, torch.tensor(scale, dtype=torch.float64)


def poly_features(x: torch.Tensor, coeffs: torch.Tensor, degree: int) -> torch.Tensor:
    """Explicit features phi(x).

    Args:
        x: [..., H, T, d] inputs (heads on dim -3) or [..., d] with `coeffs` of shape [p + 1].
        coeffs: a_i, shape [p + 1] (shared) or [H, p + 1] (per head, broadcast over dim -3 of x).
        degree: p.
    Returns:
        [..., C(d + p, p)] features, blocks ordered by degree 0..p.
    """
    if coeffs.shape[-1] != degree + 1:
        raise ValueError(f"coeffs: expected last dim {degree + 1} for degree {degree}, got {tuple(coeffs.shape)}")
    d = x.shape[-1]
    root = coeffs.sqrt()
    if root.dim() == 2:  # [H, p+1] -> [H, 1, p+1] to broadcast over T of x[..., H, T, d]
        root = root[:, None, :]
    blocks = [root[..., 0:1].expand(*x.shape[:-1], 1)]
    for i in range(1, degree + 1):
        index, scale = _monomials(d, i)
        index = index.to(x.device)
        mono = x[..., index].prod(dim=-1) * scale.to(device=x.device, dtype=x.dtype)
        blocks.append(root[..., i : i + 1] * mono)
    return torch.cat(blocks, dim=-1)


def poly_kernel(scores: torch.Tensor, coeffs: torch.Tensor) -> torch.Tensor:
    """sum_i a_i s^i for s = x . y, without building features (Horner's scheme).

    Args:
        scores: [..., H, T, S] inner products (heads on dim -3) or any shape with shared `coeffs` [p + 1].
        coeffs: [p + 1] or [H, p + 1].
    """
    if coeffs.dim() == 2:
        coeffs = coeffs[:, None, None, :]
    out = torch.zeros_like(scores) + coeffs[..., -1]
    for i in range(coeffs.shape[-1] - 2, -1, -1):
        out = out * scores + coeffs[..., i]
    return out
