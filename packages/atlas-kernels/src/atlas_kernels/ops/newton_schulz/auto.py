"""Newton-Schulz with backend selection: the Triton kernel where it applies, the torch reference elsewhere."""

from __future__ import annotations

import torch
from torch import Tensor

from atlas_kernels.config import DEFAULT_NS_COEFFS, NsCoeffs
from atlas_kernels.ops.dispatch import triton_candidate
from atlas_kernels.ops.newton_schulz.naive import newton_schulz


def _use_triton(x: torch.Tensor, steps: int) -> bool:
    """The selection rule (`ops/dispatch.py`): a CUDA tensor, not float64, triton installed, and the kernel's
    own check (`triton._check`: matrix sizes, float32 tile limit on GPU, steps) passes. Tests replace it."""
    if not triton_candidate(x):
        return False
    from atlas_kernels.ops.newton_schulz.triton import _check

    try:
        _check(x, steps)
    except ValueError:
        return False
    return True


def newton_schulz_auto(x: Tensor, steps: int = 5, coeffs: NsCoeffs = DEFAULT_NS_COEFFS, eps: float = 1e-7) -> Tensor:
    """`newton_schulz` (same arguments and result), run by `newton_schulz_triton` when `_use_triton(x, steps)`."""
    if _use_triton(x, steps):
        from atlas_kernels.ops.newton_schulz.triton import newton_schulz_triton

        return newton_schulz_triton(x, steps, coeffs, eps)
    return newton_schulz(x, steps, coeffs, eps)
