"""Coefficient matrices of one chunk (docs/chunkwise.md): window band, gamma gates, decays and momentum.

Chunk tokens are j, n, m = 0..L-1; window tokens are w = 0..halo+L-1, the first `halo` being the halo carried
from the previous chunk (c - 1 tokens, `state.halo_size`; every earlier token for the global window), so chunk token
n sits at w = halo + n. Token n's objective covers the window tokens w in [halo + n - (c - 1), halo + n] (all
w <= halo + n for the global window), window token w at offset halo + n - w from n. All matrices are batched
[B, H, ...].
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from atlas_kernels.config import MemoryConfig
from atlas_kernels.ops.memory.state import halo_size


def window_gates(
    gamma_w: torch.Tensor, L: int, halo: int, cfg: MemoryConfig, steps: torch.Tensor | None = None
) -> torch.Tensor:
    """The window x gamma coefficients G [B, H, L, halo + L] of one chunk.

    gamma="token" (steps None): G[n, w] = gamma_w if w is in token n's window else 0, a band times diag(gamma).
    gamma="per_step": gamma_w is the presence of each window token (0 for padding before the sequence start) and
    steps [B, H, L, c] the chunk tokens' own gates; G[n, w] = steps[n, halo + n - w] gamma_w inside the band, a
    general L x (halo + L) matrix that no longer factors into band x diagonal.
    """
    n = torch.arange(L, device=gamma_w.device)[:, None]
    w = torch.arange(halo + L, device=gamma_w.device)[None, :]
    inside = w <= halo + n
    if not cfg.is_global:  # the window reaches halo_size(cfg) = c - 1 tokens back from token n
        inside = inside & (w >= halo + n - halo_size(cfg))
    G = gamma_w[:, :, None, :] * inside.to(gamma_w.dtype)
    if steps is None:
        return G
    offset = (halo + n - w).clamp(0, steps.shape[-1] - 1)  # outside the band the product with `inside` is 0
    return G * steps.gather(-1, offset.expand(*steps.shape[:2], L, halo + L))


def _log_cumprod(g: torch.Tensor, eps: float) -> torch.Tensor:
    return torch.cumsum(torch.log(torch.clamp(g, min=eps)), dim=-1)


def _ratio_matrix(log_cum: torch.Tensor) -> torch.Tensor:
    """R[j, n] = exp(log_cum_j - log_cum_n) for n <= j, else 0 -> [B, H, L, L]."""
    L = log_cum.shape[-1]
    lower = torch.ones(L, L, dtype=torch.bool, device=log_cum.device).tril()
    diff = log_cum[..., :, None] - log_cum[..., None, :]
    return torch.exp(torch.where(lower, diff, torch.full_like(diff, float("-inf"))))


@dataclass
class ChunkDecays:
    """Decay factors of one chunk, [B, H, L] vectors and [B, H, L, L] lower-triangular matrices.

    A[j] = alpha_0..alpha_j, LA[j, n] = A[j] / A[n]; Th and LTh likewise for theta;
    P[j] = sum_{m <= j} LA[j, m] Th[m] (how much of S_0 has entered W_j, momentum only).
    """

    A: torch.Tensor
    LA: torch.Tensor
    Th: torch.Tensor | None = None
    LTh: torch.Tensor | None = None
    P: torch.Tensor | None = None


def chunk_decays(alpha: torch.Tensor, theta: torch.Tensor, cfg: MemoryConfig) -> ChunkDecays:
    log_a = _log_cumprod(alpha, cfg.gate_eps)
    decays = ChunkDecays(A=torch.exp(log_a), LA=_ratio_matrix(log_a))
    if cfg.uses_momentum:
        log_th = _log_cumprod(theta, cfg.gate_eps)
        decays.Th = torch.exp(log_th)
        decays.LTh = _ratio_matrix(log_th)
        decays.P = (decays.LA @ decays.Th.unsqueeze(-1)).squeeze(-1)
    return decays


def update_coefficients(d: ChunkDecays, eta: torch.Tensor, G: torch.Tensor, cfg: MemoryConfig) -> torch.Tensor:
    """C[j, w]: W_j = A_j W_0 - P_j S_0 - sum_w C[j, w] u_w (gd, momentum) -> [B, H, L, halo + L]."""
    etaG = eta.unsqueeze(-1) * G
    if cfg.optimizer == "gd":
        return d.LA @ etaG
    return d.LA @ (d.LTh @ etaG)


def momentum_end_coefficients(d: ChunkDecays, eta: torch.Tensor, G: torch.Tensor) -> torch.Tensor:
    """r[w]: S_L = Th_L S_0 + sum_w r_w u_w for the momentum optimizer -> [B, H, halo + L]."""
    last = d.LTh[..., -1, :]  # Th_L / Th_n
    return ((last * eta).unsqueeze(-2) @ G).squeeze(-2)


def decayed(A: torch.Tensor, w: torch.Tensor, name: str, target) -> torch.Tensor:
    """A W_0 (+ (1 - A) W_init toward a decay target); A broadcasts against the weights w."""
    if target is None or name not in target:
        return A * w
    return A * w + (1.0 - A) * target[name]
