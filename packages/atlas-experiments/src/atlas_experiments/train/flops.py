"""Model FLOPs per token and a measured peak, for the MFU estimate shown while training.

FLOPs per trained token = 6 x (parameters in matmuls, embeddings counted once as the LM head) + the attention
score term 12 x n_attention_layers x d_attention x seq_len (forward + backward of QK^T and AV, causal halving
ignored, as in the PaLM appendix). The memory op's inner work (chunk GEMMs, Newton-Schulz) is not counted, so
MFU is a lower bound for memory models. The peak is a dense matmul measured on the device at start-up
(fp32 on CPU, bf16 on CUDA) unless `peak_flops` is configured, so MFU reads "fraction of what this device's
matmul achieves".
"""

from __future__ import annotations

import time

import torch


def matmul_param_count(model: torch.nn.Module) -> int:
    inp = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    out = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    skip = set()
    if inp is not None and out is not None and inp.weight is not out.weight:
        skip.add(id(inp.weight))  # untied: the input lookup is not a matmul
    return sum(p.numel() for p in model.parameters() if p.dim() >= 2 and id(p) not in skip)


def flops_per_token(model: torch.nn.Module, seq_len: int) -> float:
    n = matmul_param_count(model)
    cfg = getattr(model, "config", None)
    n_attn = int(getattr(cfg, "num_attention_layers", 0) or 0) if cfg is not None else 0
    width = int(getattr(cfg, "hidden_size", 0) or 0) if cfg is not None else 0
    window = getattr(cfg, "attention_window", None) if cfg is not None else None
    span = min(seq_len, window) if window else seq_len
    return 6.0 * n + 12.0 * n_attn * width * span


def measure_peak_flops(device: torch.device, size: int | None = None, repeats: int = 3) -> float:
    """Dense matmul FLOP/s on `device` (bf16 on CUDA, fp32 on CPU): the best of a few timed runs."""
    cuda = device.type == "cuda"
    n = size or (8192 if cuda else 1024)
    dtype = torch.bfloat16 if cuda else torch.float32
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    best = float("inf")
    for _ in range(repeats + 1):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        a @ b
        if cuda:
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return 2.0 * n**3 / best
