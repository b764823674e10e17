"""Public entry points of the memory op, with backend dispatch."""

from __future__ import annotations

from typing import Literal

import torch

from atlas_kernels.config import MemoryConfig
from atlas_kernels.ops.memory.chunk import memory_chunk_torch
from atlas_kernels.ops.memory.state import MemoryState

Backend = Literal["auto", "torch"]


def memory_chunk(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    gates: dict[str, torch.Tensor],
    params: dict[str, torch.Tensor],
    cfg: MemoryConfig,
    state: MemoryState | None = None,
    backend: Backend = "auto",
) -> tuple[torch.Tensor, MemoryState]:
    """Run the memory over a segment, chunkwise-parallel (chunk size cfg.chunk_size).

    Args:
        q, k: [B, T, H, Dk] queries and keys, l2-normalised by the caller (the feature map is applied here).
        v: [B, T, H, Dv] values.
        gates: dict of [B, T, H] tensors: "eta" (inner learning rate, >= 0; required), "alpha" (retention in
            (0, 1]; default 1), "theta" (momentum decay in [0, 1); required for momentum/muon), "gamma"
            (window gate of each token in [0, 1]; default 1). Values are used as given (no clamping).
        params: outer-loop parameters of the layer (`init_memory_params` makes them):
            "W" [H, Dv, D] (linear) or "W1" [H, Dv, Dh], "W2" [H, Dh, D] (+ "W3" [H, Dh, D] gated): the
            initial inner weights W_0, with D = cfg.feature_dim(Dk); "ln_weight", "ln_bias" [H, Dv] when
            cfg.memory_norm (MLP memories); "feature_coeffs" [H, p + 1] or [p + 1] (a_i >= 0) for poly features;
            for exp features the first layer has no explicit W_0: "init_keys" [H, P, Dk] and
            "init_values.<name>" [H, P, out] give W_0 phi*(x) = sum_p values_p exp(keys_p . x)
            (P = cfg.exp_init_keys; absent when P = 0, i.e. W_0 = 0 on that layer).
        cfg: the MemoryConfig.
        state: the `MemoryState` returned by a previous call (segments chain exactly), or None to start
            from W_0, S_0 = 0 and an empty window.
        backend: "auto" (the PyTorch chunk op; Triton kernels plug in here) or "torch".
    Returns:
        (o [B, T, H, Dv] in the dtype of v, the MemoryState after the last token).
    """
    if backend not in ("auto", "torch"):
        raise ValueError(f"backend: expected 'auto' or 'torch', got {backend!r}")
    return memory_chunk_torch(q, k, v, gates, params, cfg, state)


def memory_step(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    gates: dict[str, torch.Tensor],
    params: dict[str, torch.Tensor],
    cfg: MemoryConfig,
    state: MemoryState | None = None,
) -> tuple[torch.Tensor, MemoryState]:
    """Decode one token: q, k [B, H, Dk], v [B, H, Dv], gates [B, H] -> (o [B, H, Dv], state).

    Equal to `memory_chunk` on a length-1 segment: with chunk size b > 1 the state keeps the current chunk's
    start weights and its tokens so far, so decoding reproduces the chunked forward exactly at O(b) work
    per token; memory stays constant in the sequence length (except exp features, whose dual-form first
    layer grows like a KV cache).
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 3:
            raise ValueError(
                f"{name}: expected [B, H, D] for one decoding step, got {getattr(t, 'shape', t)}"
            )
    step_gates = {n: g.unsqueeze(1) for n, g in gates.items() if g is not None}
    o, state = memory_chunk(q.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1), step_gates, params, cfg, state)
    return o.squeeze(1), state
