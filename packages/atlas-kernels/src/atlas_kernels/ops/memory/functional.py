"""The memory f(x; W) evaluated with explicit weights, and its attentional-bias loss.

Shared by the naive oracle (which differentiates it with autograd) and by the chunk op's Muon path
(which retrieves with per-token weights). Shapes: x [B, H, N, Dk] raw (l2-normalised) inputs,
feats [B, H, N, D] = phi(x), weights [B, H, out, in] (or [B, H, N, out, in] for per-token weights).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from atlas_kernels.config import MemoryConfig
from atlas_kernels.ops.features import exp_taylor_coeffs, poly_features, poly_features_auto, poly_kernel


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
    coeffs, degree = exp_taylor_features_coeffs(params, cfg, x)
    return poly_features(x, coeffs, degree)


def feature_kernel(scores: torch.Tensor, params: dict[str, torch.Tensor], cfg: MemoryConfig) -> torch.Tensor:
    """phi(x) . phi(y) from the inner products x . y: identity, sum_i a_i s^i, or exp(tau s)."""
    if cfg.feature_map == "identity":
        return scores
    if cfg.feature_map == "poly":
        return poly_kernel(scores, params["feature_coeffs"])
    return exp_kernel(scores, params, cfg)


def exp_temperature(params: dict[str, torch.Tensor], cfg: MemoryConfig) -> torch.Tensor | None:
    """tau of the exp kernel exp(tau x.y): [H] or [1] (broadcast over heads), or None for tau = 1."""
    return params["feature_coeffs"][..., 0] if cfg.learned_temperature else None


def exp_kernel(scores: torch.Tensor, params: dict[str, torch.Tensor], cfg: MemoryConfig) -> torch.Tensor:
    """exp(tau s) for scores s [B, H, N, M] of unit-norm vectors."""
    tau = exp_temperature(params, cfg)
    return torch.exp(scores if tau is None else tau[:, None, None] * scores)


def exp_taylor_features_coeffs(
    params: dict[str, torch.Tensor], cfg: MemoryConfig, like: torch.Tensor
) -> tuple[torch.Tensor, int]:
    """Taylor coefficients tau^i / i! ([H, n + 1], or [n + 1] at tau = 1) and the degree n of the oracle's phi*.

    n >= cfg.exp_taylor_degree grows with tau so that the truncation error tau^(n+1) / (n+1)! of unit vectors
    stays below the documented 1 / (exp_taylor_degree + 1)! (tau = sqrt(Dk) = 2 at Dk = 4: n = 19 for 14).
    """
    tau = exp_temperature(params, cfg)
    n = cfg.exp_taylor_degree
    base = exp_taylor_coeffs(n, like.dtype).to(like.device)
    if tau is None:
        return base, n
    top = max(float(tau.detach().max()), 1.0)
    bound = math.lgamma(n + 2)  # -log of the allowed error 1 / (n + 1)!
    while (n + 1) * math.log(top) - math.lgamma(n + 2) > -bound:
        n += 1
    powers = torch.arange(n + 1, device=like.device, dtype=like.dtype)
    coeffs = tau.to(like.dtype)[..., None] ** powers * exp_taylor_coeffs(n, like.dtype).to(like.device)
    return coeffs, n


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
    *,
    inner: bool = False,
) -> torch.Tensor:
    """f(x; W) -> [B, H, N, Dv]: the read-out, or with `inner` the memory the inner objective sees (the two
    differ under norm_placement="readout", where the LayerNorm acts on the read-out only)."""
    norm = cfg.inner_norm if inner else cfg.memory_norm
    return compose_memory(lambda name, inp: _apply(weights[name], inp), x, feats, params, cfg, norm=norm)


def compose_memory(layer, x: torch.Tensor, feats: torch.Tensor, params, cfg: MemoryConfig, *, norm: bool):
    """The memory's architecture around its weight layers: `layer(name, input)` gives W input for each weight
    (explicit weights in `memory_forward`, the chunk's factored Muon update in `muon_lowrank`); `norm` applies the
    memory LayerNorm to the branch."""
    if cfg.memory == "linear":
        return layer("W", feats)
    h = activation(layer("W2", feats), cfg)
    if cfg.memory == "gated_mlp":
        h = h * layer("W3", feats)
    branch = layer("W1", h)
    if norm:
        branch = memory_norm(branch, params, cfg)
    return x + branch if cfg.residual else branch


def bias_loss(f: torch.Tensor, v: torch.Tensor, cfg: MemoryConfig) -> torch.Tensor:
    """Per-token attentional bias l(f, v) -> [B, H, N]: l2 = 1/2 ||f - v||^2, dot = -<f, v>."""
    if cfg.bias == "l2":
        return 0.5 * (f - v).pow(2).sum(-1)
    return -(f * v).sum(-1)
