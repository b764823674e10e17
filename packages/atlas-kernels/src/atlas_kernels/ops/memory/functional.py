"""The memory f(x; W) evaluated with explicit weights, and its attentional-bias loss.

Shared by the naive oracle (which differentiates it with autograd) and by the chunk op's Muon path
(which retrieves with per-token weights). Shapes: x [B, H, N, Dk] raw (l2-normalised) inputs,
feats [B, H, N, D] = phi(x), weights [B, H, out, in] (or [B, H, N, out, in] for per-token weights).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from atlas_kernels.config import MemoryConfig
from atlas_kernels.ops.features import exp_taylor_coeffs, poly_features, poly_features_auto


def activation(a: torch.Tensor, cfg: MemoryConfig) -> torch.Tensor:
    return F.gelu(a) if cfg.activation == "gelu" else F.silu(a)


def explicit_features(
    x: torch.Tensor, params: dict[str, torch.Tensor], cfg: MemoryConfig, *, allow_triton: bool = False
) -> torch.Tensor:
    """phi(x) as a finite vector; exp features are truncated at `cfg.exp_taylor_degree` (naive oracle only).

    allow_triton: poly features through `poly_features_auto` (the Triton kernel on CUDA tensors it supports; the
        chunk op), instead of the torch reference `poly_features` (the naive oracle and the readout keep it).
    """
    if cfg.feature_map == "identity":
        return x
    if cfg.feature_map == "poly":
        poly = poly_features_auto if allow_triton else poly_features
        return poly(x, params["feature_coeffs"], cfg.poly_degree)
    coeffs = exp_taylor_coeffs(cfg.exp_taylor_degree, x.dtype).to(x.device)
    return poly_features(x, coeffs, cfg.exp_taylor_degree)


def memory_norm(b: torch.Tensor, params: dict[str, torch.Tensor], cfg: MemoryConfig) -> torch.Tensor:
    """Per-head LayerNorm of the branch output b [B, H, N, Dv] (affine weights [H, Dv])."""
    y = F.layer_norm(b, b.shape[-1:], eps=cfg.norm_eps)
    return y * params["ln_weight"][:, None, :] + params["ln_bias"][:, None, :]


def _apply(w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """W x for shared weights [B, H, o, i] or per-token weights [B, H, N, o, i]; x [B, H, N, i]."""
    if w.dim() == 4:
        return x @ w.mT
    return (w @ x.unsqueeze(-1)).squeeze(-1)


def memory_forward(
    x: torch.Tensor,
    feats: torch.Tensor,
    weights: dict[str, torch.Tensor],
    params: dict[str, torch.Tensor],
    cfg: MemoryConfig,
) -> torch.Tensor:
    """f(x; W) -> [B, H, N, Dv]."""
    if cfg.memory == "linear":
        return _apply(weights["W"], feats)
    h = activation(_apply(weights["W2"], feats), cfg)
    if cfg.memory == "gated_mlp":
        h = h * _apply(weights["W3"], feats)
    branch = _apply(weights["W1"], h)
    if cfg.memory_norm:
        branch = memory_norm(branch, params, cfg)
    return x + branch if cfg.residual else branch


def bias_loss(f: torch.Tensor, v: torch.Tensor, cfg: MemoryConfig) -> torch.Tensor:
    """Per-token attentional bias l(f, v) -> [B, H, N]: l2 = 1/2 ||f - v||^2, dot = -<f, v>."""
    if cfg.bias == "l2":
        return 0.5 * (f - v).pow(2).sum(-1)
    return -(f * v).sum(-1)
