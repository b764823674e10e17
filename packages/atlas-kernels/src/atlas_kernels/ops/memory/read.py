"""Read the memory without writing to it: y = f(phi(q); W) at the weights a state holds (after its last token).

Used by the MAC hybrid, whose segments attend over what the memory returns for them before it is updated.
"""

from __future__ import annotations

import torch

from atlas_kernels.config import MemoryConfig
from atlas_kernels.ops.memory.functional import (
    activation,
    exp_kernel,
    explicit_features,
    memory_forward,
    memory_norm,
)
from atlas_kernels.ops.memory.params import initial_state
from atlas_kernels.ops.memory.state import MemoryState


def memory_read(
    q: torch.Tensor, params: dict[str, torch.Tensor], cfg: MemoryConfig, state: MemoryState | None = None
) -> torch.Tensor:
    """q [B, T, H, Dk] -> y [B, T, H, Dv] at the state's weights (W_0 from `params` when state is None).

    The value width comes from the memory's output layer; no gradient step, no Newton-Schulz, any T.
    """
    if not isinstance(q, torch.Tensor) or q.dim() != 4:
        raise ValueError(f"q: expected [B, T, H, Dk], got {getattr(q, 'shape', q)}")
    qh = q.transpose(1, 2)
    if state is None:
        out_name = "W" if cfg.memory == "linear" else "W1"
        if out_name in params:
            value_dim = params[out_name].shape[1]
        else:  # linear memory on exp features: the width of its initial values, or of q
            value_dim = params["init_values.W"].shape[-1] if "init_values.W" in params else q.shape[-1]
        state = initial_state(params, cfg, qh, value_dim, dual_exp=True)
    if cfg.feature_map != "exp" or state.explicit_exp:
        return memory_forward(qh, explicit_features(qh, params, cfg), state.weights, params, cfg).transpose(1, 2)
    kern = exp_kernel(qh @ state.kernel_keys.mT, params, cfg)
    first = {n: kern @ state.weights[n] for n in cfg.feature_input_weights}
    if cfg.memory == "linear":
        return first["W"].transpose(1, 2)
    h = activation(first["W2"], cfg)
    if cfg.memory == "gated_mlp":
        h = h * first["W3"]
    branch = h @ state.weights["W1"].mT
    if cfg.memory_norm:
        branch = memory_norm(branch, params, cfg)
    return (qh + branch if cfg.residual else branch).transpose(1, 2)
