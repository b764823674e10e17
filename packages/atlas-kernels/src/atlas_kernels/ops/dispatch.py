"""Which implementation a sub-op of the torch chunk op runs: its Triton kernel or the torch reference.

The torch chunk op (`ops/memory/chunk.py`) computes Newton-Schulz (Muon) through `newton_schulz_auto` and the
polynomial features through `poly_features_auto`. Each picks its Triton kernel for CUDA tensors that are not
float64 when triton imports and the kernel's own argument check accepts the shape and dtype, and the torch
reference otherwise (CPU, float64, shapes over the kernel limits, no triton). The Triton modules are imported only
once a CUDA tensor passes the first checks, so atlas_kernels imports without triton.

`ATLAS_KERNELS_TRITON_SUBOPS=0` in the environment turns the sub-op kernels off (the torch references everywhere),
so that `memory_chunk(backend="torch")` can be made pure PyTorch, e.g. to rule the kernels out when debugging.
It is read at every call, so a checkpointed chunk's recomputation in the backward follows the same rule as its
forward.
"""

from __future__ import annotations

import os

import torch

SUBOPS_ENV = "ATLAS_KERNELS_TRITON_SUBOPS"


def triton_available() -> bool:
    """True when the `triton` package imports (a Linux dependency of atlas-kernels; absent elsewhere)."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def _on_kernel_device(x: torch.Tensor) -> bool:
    """x lives where the Triton kernels run: CUDA (tests replace it to check the rest of the rule on CPU)."""
    return x.is_cuda


def subops_enabled() -> bool:
    """False when the environment sets ATLAS_KERNELS_TRITON_SUBOPS to 0 (or an empty string)."""
    return os.environ.get(SUBOPS_ENV, "1") not in ("", "0")


def triton_candidate(x: torch.Tensor) -> bool:
    """The part of the selection rule every sub-op shares: sub-op kernels enabled, a CUDA tensor, not float64,
    triton installed."""
    if not (subops_enabled() and isinstance(x, torch.Tensor) and _on_kernel_device(x)):
        return False
    return x.dtype != torch.float64 and triton_available()
