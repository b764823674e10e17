"""Pieces every Triton kernel of the package shares: the dot product and the precision policy.

Requires CUDA tensors, or CPU tensors with TRITON_INTERPRET=1 set before triton is imported.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def dot(a, b, PREC: tl.constexpr):
    """a @ b with fp32 accumulation: PREC "bf16" stages the operands in bf16 (GPU, bf16/fp16 inputs: half the
    shared memory and the fast tensor-core path), otherwise fp32/fp64 operands with that input precision."""
    if PREC == "bf16":
        return tl.dot(a.to(tl.bfloat16), b.to(tl.bfloat16))
    else:
        return tl.dot(a, b, input_precision=PREC)


def compute_precision(dtype: torch.dtype, device: torch.device | None = None):
    """(accumulator torch dtype, tile dtype, dot precision) for the input dtype and device.

    GPU: bf16/fp16 inputs stage dot operands in bf16 (fp32 accumulation; half the shared memory of fp32 operands,
    which the memory backward needs to fit in 227 KB at Dk = 128, and the precision Muon runs Newton-Schulz in),
    fp32 inputs use 3xTF32 (about fp32 accuracy on tensor cores; IEEE fp32 dots compile to huge FMA loops).
    CPU (interpreter): fp32/fp64 operands (the interpreter's bf16 dot is wrong, and it ignores the input precision).
    """
    if dtype == torch.float64:
        return torch.float64, tl.float64, "ieee"
    on_gpu = device is not None and torch.device(device).type == "cuda"
    if dtype == torch.float32:
        return torch.float32, tl.float32, "tf32x3" if on_gpu else "ieee"
    return torch.float32, tl.float32, "bf16" if on_gpu else "tf32"
