"""Correctness check of the Triton MLP memory against the torch op at any shape and dtype.

Shared by the GPU tests (`tests/test_triton_gpu.py`) and the GPU benchmark (`benchmarks/kernels_gpu.py`), like
`triton.checks.check_linear_memory`: the kernel runs in the requested dtype, the torch reference in float32
(float64 on CPU) on the *same* rounded inputs; the result is rms(out - ref) / rms(ref) per tensor (outputs, every
final-state tensor, every input gradient). With `baseline=True` the torch op is also run in the requested dtype,
so that a caller can tell the kernel's error from the error that the precision itself brings (the memory
LayerNorm makes long recurrences sensitive to rounding, see the README's "Numerics").
"""

from __future__ import annotations

import math

import torch

from atlas_kernels.config import MemoryConfig
from atlas_kernels.ops.memory.triton.checks import error_ratios, forward_backward, memory_inputs, upcast_inputs


def mlp_memory_inputs(cfg: MemoryConfig, B, T, H, D, *, dtype, device, seed=0, eta_max=0.1, alpha_low=0.9):
    """Titans-like `memory_inputs` [B, T, H, D]: inner learning rates of Titans / Atlas are small (eta_max = 0.1;
    large ones make the LN-normalised recurrence chaotic); alpha_low = 0.99 for sequences of many chunks."""
    return memory_inputs(
        cfg, B, T, H, D, D, dtype=dtype, device=device, seed=seed, eta_max=eta_max, alpha_low=alpha_low
    )


def check_mlp_memory(
    cfg: MemoryConfig, B, T, H, D, *, dtype, device, seed=0, baseline=False, eta_max=0.1, alpha_low=0.9
):
    """Error ratios of the Triton MLP memory (in `dtype`) against the torch chunk op (float32 on CUDA, float64 on
    CPU): {"o", "state.<tensor>", "grad.<input>"}; with baseline=True, (triton ratios, torch-in-dtype ratios)."""
    from atlas_kernels.ops.memory.chunk import memory_chunk_torch
    from atlas_kernels.ops.memory.triton.mlp import memory_chunk_triton_mlp

    inputs = mlp_memory_inputs(
        cfg, B, T, H, D, dtype=dtype, device=device, seed=seed, eta_max=eta_max, alpha_low=alpha_low
    )
    gen = torch.Generator(device=device).manual_seed(seed + 1)
    w_o = torch.randn(B, T, H, D, generator=gen, device=device) / math.sqrt(B * T * H * D)
    Dh = inputs[4]["W1"].shape[-1]
    w_state = {}
    groups = ("weights", "momentum") if cfg.uses_momentum else ("weights",)
    for name in (f"{g}.{n}" for g in groups for n in cfg.weight_names):
        shape = (B, H, D, Dh) if name.endswith("W1") else (B, H, Dh, D)
        w_state[name] = torch.randn(shape, generator=gen, device=device) / math.sqrt(B * H * D * Dh)
    ref = forward_backward(memory_chunk_torch, *upcast_inputs(inputs, device), cfg, w_o, w_state)
    errs = error_ratios(ref, forward_backward(memory_chunk_triton_mlp, *inputs, cfg, w_o, w_state))
    if not baseline:
        return errs
    return errs, error_ratios(ref, forward_backward(memory_chunk_torch, *inputs, cfg, w_o, w_state))
