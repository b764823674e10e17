"""Helpers for tests of the memory op (ours and downstream): random inputs, the valid configuration grid,
and flash-linear-attention-style error ratios."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import torch
import torch.nn.functional as F

from atlas_kernels.config import (
    BIAS_KINDS,
    FEATURE_KINDS,
    MEMORY_KINDS,
    OPTIMIZER_KINDS,
    MemoryConfig,
    MemoryConfigError,
)


def random_inputs(
    B: int,
    T: int,
    H: int,
    Dk: int,
    Dv: int | None = None,
    *,
    dtype: torch.dtype = torch.float64,
    seed: int = 0,
    requires_grad: bool = False,
    gate_low: float = 0.5,
    eta_scale: float = 1.0,
):
    """(q, k, v, gates): l2-normalised q, k [B, T, H, Dk]; v [B, T, H, Dv]; gates in [gate_low, 1), eta scaled.

    Large inner learning rates make long recurrences chaotic (a 1e-14 change in v moves outputs by O(1)
    after ~60 tokens); long-sequence comparisons use eta_scale ~0.1, where they are stable.
    """
    g = torch.Generator().manual_seed(seed)
    Dv = Dk if Dv is None else Dv
    q = F.normalize(torch.randn(B, T, H, Dk, generator=g, dtype=dtype), dim=-1)
    k = F.normalize(torch.randn(B, T, H, Dk, generator=g, dtype=dtype), dim=-1)
    v = torch.randn(B, T, H, Dv, generator=g, dtype=dtype)
    gates = {
        name: gate_low + (1 - gate_low) * torch.rand(B, T, H, generator=g, dtype=dtype)
        for name in ("alpha", "eta", "theta", "gamma")
    }
    gates["eta"] = gates["eta"] * eta_scale
    if requires_grad:
        q, k, v = (t.requires_grad_() for t in (q, k, v))
        gates = {n: t.requires_grad_() for n, t in gates.items()}
    return q, k, v, gates


def valid_configs(**fixed) -> Iterator[MemoryConfig]:
    """Every memory x optimizer x feature x bias combination MemoryConfig accepts; `fixed` pins any field."""
    axes = {
        "memory": MEMORY_KINDS,
        "optimizer": OPTIMIZER_KINDS,
        "feature_map": FEATURE_KINDS,
        "bias": BIAS_KINDS,
    }
    choices = {name: (fixed.pop(name),) if name in fixed else kinds for name, kinds in axes.items()}
    for combo in itertools.product(*choices.values()):
        try:
            yield MemoryConfig(**dict(zip(choices, combo)), **fixed)
        except MemoryConfigError:
            continue


def config_id(cfg: MemoryConfig) -> str:
    return f"{cfg.memory}-{cfg.optimizer}-{cfg.feature_map}-{cfg.bias}-c{cfg.window}-b{cfg.chunk_size}"


def rel_err(ref: torch.Tensor, out: torch.Tensor) -> float:
    """max |ref - out| / max |ref| (0 when both are zero or empty)."""
    if ref.shape != out.shape:
        raise AssertionError(f"shape mismatch: {tuple(ref.shape)} vs {tuple(out.shape)}")
    if ref.numel() == 0:
        return 0.0
    scale = ref.abs().max().item()
    diff = (ref - out).abs().max().item()
    return diff / scale if scale > 0 else diff


def assert_pieces_match_one_call(q, k, v, gates, params, cfg: MemoryConfig, cuts, decode_from: int, tol: float):
    """One `memory_chunk` call over [0, T) against the same sequence run in pieces: `memory_chunk` over each
    (a, b) of `cuts` (chaining the state), then `memory_step` token by token from `decode_from` to T. Outputs and
    every final state tensor must agree within `tol` (`rel_err`)."""
    from atlas_kernels.api import memory_chunk, memory_step

    T = q.shape[1]
    o_full, s_full = memory_chunk(q, k, v, gates, params, cfg)
    outs, state = [], None
    for a, b in cuts:
        seg = {n: g[:, a:b] for n, g in gates.items()}
        o, state = memory_chunk(q[:, a:b], k[:, a:b], v[:, a:b], seg, params, cfg, state)
        outs.append(o)
    for t in range(decode_from, T):
        step_gates = {n: g[:, t] for n, g in gates.items()}
        o, state = memory_step(q[:, t], k[:, t], v[:, t], step_gates, params, cfg, state)
        outs.append(o[:, None])
    err = rel_err(o_full, torch.cat(outs, 1))
    assert err < tol, f"outputs differ: {err:.3e}"
    full, pieces = s_full.tensors(), state.tensors()
    assert full.keys() == pieces.keys(), (sorted(full), sorted(pieces))
    for name in full:
        err = rel_err(full[name], pieces[name])
        assert err < tol, f"state {name} differs: {err:.3e}"
