"""Outer-loop parameters of the memory (initial inner weights, feature coefficients, LayerNorm) and the
initial state they define."""

from __future__ import annotations

import math

import torch

from atlas_kernels.config import MemoryConfig
from atlas_kernels.ops.features import poly_features, poly_init_coeffs
from atlas_kernels.ops.memory.functional import exp_taylor_features_coeffs
from atlas_kernels.ops.memory.inputs import expected_param_shapes
from atlas_kernels.ops.memory.state import MemoryState, halo_size


def init_memory_params(
    cfg: MemoryConfig,
    num_heads: int,
    key_dim: int,
    value_dim: int,
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
    generator: torch.Generator | None = None,
    init_scale: float = 1.0,
) -> dict[str, torch.Tensor]:
    """Fresh parameters for one memory layer: weights ~ N(0, init_scale^2 / fan_in), a_i = 1/i!, LN = (1, 0),
    exp temperature tau = sqrt(key_dim) (see MemoryConfig.exp_temperature).

    Returns a dict with exactly the keys `memory_chunk`/`memory_naive` expect (see `expected_param_shapes`).
    """
    hidden = cfg.expansion * value_dim
    shapes = expected_param_shapes(cfg, num_heads, key_dim, value_dim, hidden)
    params: dict[str, torch.Tensor] = {}
    for name, shape in shapes.items():
        if name == "feature_coeffs" and cfg.feature_map == "exp":
            # tau_0 = sqrt(Dk): q.k / sqrt(Dk) of attention on q, k of unit RMS (norm sqrt(Dk)) is sqrt(Dk) cos
            params[name] = torch.full(shape, math.sqrt(key_dim), dtype=dtype, device=device)
        elif name == "feature_coeffs":
            params[name] = poly_init_coeffs(cfg.poly_degree, dtype).to(device).expand(shape).clone()
        elif name == "ln_weight":
            params[name] = torch.ones(shape, dtype=dtype, device=device)
        elif name == "ln_bias":
            params[name] = torch.zeros(shape, dtype=dtype, device=device)
        elif name == "init_keys":
            keys = torch.randn(shape, dtype=dtype, device=device, generator=generator)
            params[name] = keys / keys.norm(dim=-1, keepdim=True)
        else:
            fan_in = shape[-1] if not name.startswith("init_values") else max(cfg.exp_init_keys, 1)
            w = torch.randn(shape, dtype=dtype, device=device, generator=generator)
            params[name] = w * (init_scale / math.sqrt(fan_in))
    return params


def initial_state(
    params: dict[str, torch.Tensor],
    cfg: MemoryConfig,
    like: torch.Tensor,
    value_dim: int,
    *,
    dual_exp: bool = True,
) -> MemoryState:
    """The state at the start of a sequence: W_0 from `params`, S_0 = 0, an all-zero halo with gamma = 0.

    Args:
        params: the layer's outer-loop parameters (may be empty: linear memory on exp features, P = 0).
        like: keys [B, H, T, Dk] (heads-first) whose batch, heads, dtype and device the state takes.
        value_dim: Dv.
        dual_exp: for feature_map="exp", hold the first-layer weights in dual form (chunk op, decoder:
            coefficients over `kernel_keys`) or as explicit truncated-Taylor matrices (naive oracle).
    """
    batch_size, H, _, key_dim = like.shape
    hidden = params["W1"].shape[-1] if "W1" in params else 0
    weights: dict[str, torch.Tensor] = {}
    kernel_keys = None
    for name in cfg.weight_names:
        if cfg.feature_map == "exp" and name in cfg.feature_input_weights:
            continue
        weights[name] = params[name].unsqueeze(0).expand(batch_size, *params[name].shape)
    if cfg.feature_map == "exp":
        P = cfg.exp_init_keys
        keys = params["init_keys"] if P > 0 else like.new_zeros(H, 0, key_dim)
        for name in cfg.feature_input_weights:
            out_dim = value_dim if name == "W" else hidden
            values = params[f"init_values.{name}"] if P > 0 else like.new_zeros(H, 0, out_dim)
            if not dual_exp:
                coeffs, degree = exp_taylor_features_coeffs(params, cfg, like)
                values = torch.einsum("hpo,hpd->hod", values, poly_features(keys, coeffs, degree))
            weights[name] = values.unsqueeze(0).expand(batch_size, *values.shape)
        if dual_exp:
            kernel_keys = keys.unsqueeze(0).expand(batch_size, *keys.shape)
    momentum = {n: torch.zeros_like(w) for n, w in weights.items()} if cfg.uses_momentum else None
    halo = halo_size(cfg)
    return MemoryState(
        weights=weights,
        momentum=momentum,
        halo_k=like.new_zeros(batch_size, H, halo, key_dim),
        halo_v=like.new_zeros(batch_size, H, halo, value_dim),
        halo_gamma=like.new_zeros(batch_size, H, halo),
        kernel_keys=kernel_keys,
        explicit_exp=cfg.feature_map == "exp" and not dual_exp,
    )
