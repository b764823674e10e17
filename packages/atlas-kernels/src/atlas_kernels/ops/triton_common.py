"""Pieces every Triton kernel of the package shares: the dot product and the precision policy.

Requires CUDA tensors, or CPU tensors with TRITON_INTERPRET=1 set before triton is imported.
"""

from __future__ import annotations

import contextlib
import os

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


# Hopper warpgroup MMA (wgmma, Triton's "MMA v3") miscompiles the memory kernels under Triton 3.6 on an H200:
# compute-sanitizer reports out-of-bounds shared-memory reads inside their dots, and the results are wrong or the
# launch faults, while the same kernels compiled with MMA v2 match the torch op
# (benchmarks/gpu/results-2026-11-30-h200.md). The kernels hold many small dots per program.
_WGMMA_ENV = "DISABLE_MMA_V3"
_WGMMA_OPT_IN = "ATLAS_KERNELS_WGMMA"


@contextlib.contextmanager
def memory_kernel_compile(device: torch.device):
    """Launch (and so compile) a memory kernel without wgmma on Hopper (compute capability 9.x).

    Triton reads DISABLE_MMA_V3 when it compiles and keys its on-disk cache by it, so the setting only has to be
    present around the launch; the in-process kernel cache is consistent as long as every launch of the kernel goes
    through here. The variable is process-wide while set: another thread compiling a kernel at that instant gets
    MMA v2 too (correct, slower). `ATLAS_KERNELS_WGMMA=1` keeps wgmma (to check a newer Triton).
    """
    device = torch.device(device)
    hopper = device.type == "cuda" and torch.cuda.get_device_capability(device)[0] == 9
    if not hopper or os.environ.get(_WGMMA_OPT_IN) == "1" or os.environ.get(_WGMMA_ENV) is not None:
        yield
        return
    os.environ[_WGMMA_ENV] = "1"
    try:
        yield
    finally:
        os.environ.pop(_WGMMA_ENV, None)
