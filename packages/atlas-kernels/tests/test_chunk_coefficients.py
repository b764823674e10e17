"""The decay factors of one chunk (coefficients.chunk_decays) against cumulative products written out by hand, and
the fields a gd chunk leaves empty.

The chunk-op-vs-oracle tests check these through every output; this pins the ChunkDecays contract itself, which
`make mutants` showed nothing else did (docs/testing.md): a gd chunk carries no momentum factors (None, not a
placeholder a later `is None` check would mistake for a value).
"""

from __future__ import annotations

import torch

from atlas_kernels import MemoryConfig
from atlas_kernels.ops.memory.coefficients import chunk_decays

L = 4


def _gates(seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return 0.5 + 0.5 * torch.rand(1, 2, L, generator=g, dtype=torch.float64)


def _ratios(cum: torch.Tensor) -> torch.Tensor:
    """R[j, n] = cum[j] / cum[n] for n <= j, else 0."""
    out = torch.zeros(*cum.shape, L, dtype=cum.dtype)
    for j in range(L):
        for n in range(j + 1):
            out[..., j, n] = cum[..., j] / cum[..., n]
    return out


def test_gd_decays_are_the_cumulative_retention_and_carry_no_momentum_factors():
    alpha = _gates(0)
    d = chunk_decays(alpha, _gates(1), MemoryConfig(optimizer="gd"))
    A = torch.cumprod(alpha, dim=-1)
    torch.testing.assert_close(d.A, A)
    torch.testing.assert_close(d.LA, _ratios(A))
    assert d.Th is None and d.LTh is None and d.P is None


def test_momentum_decays_add_theta_products_and_the_share_of_the_start_momentum():
    alpha, theta = _gates(2), _gates(3)
    d = chunk_decays(alpha, theta, MemoryConfig(optimizer="momentum"))
    A, Th = torch.cumprod(alpha, dim=-1), torch.cumprod(theta, dim=-1)
    torch.testing.assert_close(d.Th, Th)
    torch.testing.assert_close(d.LTh, _ratios(Th))
    # P[j] = sum_{m <= j} (A_j / A_m) Th_m: how much of S_0 has entered W_j
    P = torch.stack([sum(A[..., j] / A[..., m] * Th[..., m] for m in range(j + 1)) for j in range(L)], dim=-1)
    torch.testing.assert_close(d.P, P)
