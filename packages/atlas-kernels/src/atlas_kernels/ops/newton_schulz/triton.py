"""Batched Newton-Schulz in Triton: many small matrices [..., m, n] (min(m, n) <= 128, max(m, n) <= 256; float32
on GPU: padded tile <= 64 x 64).

One program per matrix; the whole matrix lives in one register tile (padded to powers of two >= 16).
Tall matrices are transposed through their strides (no copy), so the Gram matrix A = X X^T is the small one.

Forward (as `naive.newton_schulz`): Y_0 = X / (||X||_F + eps); k times Y <- a Y + (b A + c A^2) Y, A = Y Y^T.
Backward (vector-Jacobian product, G = dL/dY_{i+1}; B = b A + c A^2 is symmetric):
    dY_i = a G + B G + (dA + dA^T) Y_i,   dA = b dB + c (dB A + A dB),   dB = G Y_i^T;
    normalisation, s = ||X|| + eps:  dX = dY_0 / s - <dY_0, X> X / (s^2 ||X||)   (0 for the second term at X = 0).
The backward kernel recomputes the iterates Y_0..Y_{k-1}: into a per-matrix fp32 scratch when that is small
(`scratch_limit_bytes`), otherwise from Y_0 again for every step (O(k^2 / 2) extra steps, no extra memory).

Precision: tiles are fp32 (fp64 for fp64 inputs) with fp32 accumulation; dot operands are bf16 on GPU for
fp16/bf16 inputs, 3xTF32 on GPU for fp32 inputs, fp32/fp64 under the interpreter (whose bf16 dot is wrong); the
output has the input dtype. Requires CUDA tensors, or CPU tensors with TRITON_INTERPRET=1 set before this module is
imported. Kernels launch with num_stages = 1 (multi-buffering doubles the backward's shared memory).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from atlas_kernels.config import DEFAULT_NS_COEFFS, NsCoeffs
from atlas_kernels.ops.triton_common import compute_precision, dot

MAX_SMALL_DIM = 128
MAX_LARGE_DIM = 256
# float32 on GPU (3xTF32 operands) fits shared memory up to a 64 x 64 padded tile (sm_90 compile, backward).
MAX_FP32_GPU_TILE = 64 * 64
# Backward scratch (the stored iterates) is used while it stays below this size; above it, recompute.
scratch_limit_bytes = 256 * 2**20


@triton.jit
def _ns_step(y, ca, cb, cc, PREC: tl.constexpr):
    a = dot(y, tl.trans(y), PREC)
    b = cb * a + cc * dot(a, a, PREC)
    return ca * y + dot(b, y, PREC)


@triton.jit
def _ns_tile(pid, s_b, s_m, s_n, M, N, BM: tl.constexpr, BN: tl.constexpr):
    """Offsets and mask of matrix pid's padded [BM, BN] tile in a batch with strides (s_b, s_m, s_n)."""
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    return pid * s_b + rm[:, None] * s_m + rn[None, :] * s_n, mask


@triton.jit
def _ns_load(ptr, pid, s_b, s_m, s_n, M, N, BM: tl.constexpr, BN: tl.constexpr, ACC: tl.constexpr):
    offs, mask = _ns_tile(pid, s_b, s_m, s_n, M, N, BM, BN)
    return tl.load(ptr + offs, mask=mask, other=0.0).to(ACC)


@triton.jit
def _ns_store(ptr, x, pid, s_b, s_m, s_n, M, N, BM: tl.constexpr, BN: tl.constexpr):
    offs, mask = _ns_tile(pid, s_b, s_m, s_n, M, N, BM, BN)
    tl.store(ptr + offs, x.to(ptr.dtype.element_ty), mask=mask)


@triton.jit
def _ns_normalised(x_ptr, pid, s_b, s_m, s_n, M, N, eps, BM: tl.constexpr, BN: tl.constexpr, ACC: tl.constexpr):
    """X, ||X||_F, s = ||X||_F + eps and Y_0 = X / s."""
    x = _ns_load(x_ptr, pid, s_b, s_m, s_n, M, N, BM, BN, ACC)
    norm = tl.sqrt(tl.sum(tl.sum(x * x, axis=1), axis=0))
    s = norm + eps
    return x, norm, s, x / s


@triton.jit
def _ns_fwd_kernel(
    x_ptr,
    y_ptr,
    sx_b,
    sx_m,
    sx_n,
    sy_b,
    sy_m,
    sy_n,
    M,
    N,
    eps,
    ca,
    cb,
    cc,
    STEPS: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    ACC: tl.constexpr,
    PREC: tl.constexpr,
):
    pid = tl.program_id(0).to(tl.int64)
    x, norm, s, y = _ns_normalised(x_ptr, pid, sx_b, sx_m, sx_n, M, N, eps, BM, BN, ACC)
    for _ in range(STEPS):
        y = _ns_step(y, ca, cb, cc, PREC)
    _ns_store(y_ptr, y, pid, sy_b, sy_m, sy_n, M, N, BM, BN)


@triton.jit
def _ns_bwd_kernel(
    x_ptr,
    dy_ptr,
    dx_ptr,
    ws_ptr,
    sx_b,
    sx_m,
    sx_n,
    sg_b,
    sg_m,
    sg_n,
    sd_b,
    sd_m,
    sd_n,
    M,
    N,
    eps,
    ca,
    cb,
    cc,
    STEPS: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    ACC: tl.constexpr,
    PREC: tl.constexpr,
    USE_SCRATCH: tl.constexpr,
):
    pid = tl.program_id(0).to(tl.int64)
    tile = tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :]
    x, norm, s, y0 = _ns_normalised(x_ptr, pid, sx_b, sx_m, sx_n, M, N, eps, BM, BN, ACC)
    if USE_SCRATCH:
        y = y0
        for i in range(STEPS):
            tl.store(ws_ptr + (pid * STEPS + i) * BM * BN + tile, y)
            y = _ns_step(y, ca, cb, cc, PREC)
    g = _ns_load(dy_ptr, pid, sg_b, sg_m, sg_n, M, N, BM, BN, ACC)
    for t in range(STEPS):
        i = STEPS - 1 - t
        if USE_SCRATCH:
            y = tl.load(ws_ptr + (pid * STEPS + i) * BM * BN + tile)
        else:
            y = y0
            for _ in range(i):
                y = _ns_step(y, ca, cb, cc, PREC)
        a = dot(y, tl.trans(y), PREC)
        b = cb * a + cc * dot(a, a, PREC)
        db = dot(g, tl.trans(y), PREC)
        da = cb * db + cc * (dot(db, a, PREC) + dot(a, db, PREC))
        g = ca * g + dot(b, g, PREC) + dot(da + tl.trans(da), y, PREC)
    inner = tl.sum(tl.sum(g * x, axis=1), axis=0)
    coef = tl.where(norm > 0, inner / (s * s * tl.maximum(norm, 1e-30)), 0.0)
    _ns_store(dx_ptr, g / s - coef * x, pid, sd_b, sd_m, sd_n, M, N, BM, BN)


def _block(n: int) -> int:
    return max(16, triton.next_power_of_2(n))


def _oriented(t: torch.Tensor, tall: bool):
    """[N, m, n] -> (strides b, rows, cols) of the wide view (transposed through the strides when tall)."""
    sb, sm, sn = t.stride()
    return (sb, sn, sm) if tall else (sb, sm, sn)


def _check(x: torch.Tensor, steps: int) -> None:
    if not isinstance(x, torch.Tensor) or x.dim() < 2:
        raise ValueError(f"x: expected [..., m, n] matrices, got shape {tuple(getattr(x, 'shape', ()))}")
    if x.dtype not in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        raise ValueError(f"x: dtype {x.dtype} is not supported (float16, bfloat16, float32, float64)")
    m, n = x.shape[-2:]
    if min(m, n) > MAX_SMALL_DIM or max(m, n) > MAX_LARGE_DIM:
        raise ValueError(
            f"x: matrices {m}x{n} exceed the Triton kernel's limits "
            f"(min(m, n) <= {MAX_SMALL_DIM}, max(m, n) <= {MAX_LARGE_DIM}); use the torch newton_schulz"
        )
    if x.is_cuda and x.dtype == torch.float32 and _block(min(m, n)) * _block(max(m, n)) > MAX_FP32_GPU_TILE:
        raise ValueError(
            f"x: float32 matrices {m}x{n} exceed the GPU kernel's float32 limit (padded tile <= {MAX_FP32_GPU_TILE} "
            "elements: 3xTF32 operands of larger tiles overflow shared memory); pass bfloat16 (as Muon does) or "
            "use the torch newton_schulz"
        )
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps: expected an int >= 0, got {steps!r}")


def _num_warps(BM: int, BN: int) -> int:
    return 4 if BM * BN <= 64 * 64 else 8


def _launch(x: torch.Tensor, steps: int, coeffs, eps: float):
    """What the forward and the backward launch alike: x as a [count, m, n] batch, whether it is tall (every
    matrix is then read through transposed strides, so that the kernels see M = min(m, n) rows), the trailing
    runtime arguments and the compile-time ones."""
    m, n = x.shape[-2:]
    tall = m > n
    M, N = (n, m) if tall else (m, n)
    BM, BN = _block(M), _block(N)
    _, acc, prec = compute_precision(x.dtype, x.device)
    scalars = (M, N, float(eps), *(float(c) for c in coeffs))
    meta = {"STEPS": steps, "BM": BM, "BN": BN, "ACC": acc, "PREC": prec}
    return x.reshape(-1, m, n), tall, scalars, meta | {"num_warps": _num_warps(BM, BN), "num_stages": 1}


def ns_forward(x: torch.Tensor, steps: int, coeffs, eps: float) -> torch.Tensor:
    x3, tall, scalars, meta = _launch(x, steps, coeffs, eps)
    y3 = torch.empty_like(x3, memory_format=torch.contiguous_format)
    count = x3.shape[0]
    if count > 0:
        _ns_fwd_kernel[(count,)](x3, y3, *_oriented(x3, tall), *_oriented(y3, tall), *scalars, **meta)
    return y3.reshape(x.shape)


def ns_backward(x: torch.Tensor, dy: torch.Tensor, steps: int, coeffs, eps: float) -> torch.Tensor:
    x3, tall, scalars, meta = _launch(x, steps, coeffs, eps)
    g3 = dy.reshape(x3.shape)
    dx3 = torch.empty_like(x3, memory_format=torch.contiguous_format)
    count = x3.shape[0]
    if count == 0:
        return dx3.reshape(x.shape)
    tile = meta["BM"] * meta["BN"]
    itemsize = 8 if x.dtype == torch.float64 else 4
    use_scratch = steps > 0 and count * steps * tile * itemsize <= scratch_limit_bytes
    ws_dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    ws = torch.empty(count * steps * tile if use_scratch else 1, dtype=ws_dtype, device=x.device)
    _ns_bwd_kernel[(count,)](
        x3, g3, dx3, ws, *_oriented(x3, tall), *_oriented(g3, tall), *_oriented(dx3, tall), *scalars,
        USE_SCRATCH=use_scratch, **meta,
    )  # fmt: skip
    return dx3.reshape(x.shape)


class NewtonSchulzFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, steps, coeffs, eps):
        ctx.save_for_backward(x)
        ctx.args = (steps, coeffs, eps)
        return ns_forward(x, steps, coeffs, eps)

    @staticmethod
    def backward(ctx, dy):
        (x,) = ctx.saved_tensors
        return ns_backward(x, dy, *ctx.args), None, None, None


def newton_schulz_triton(x: Tensor, steps: int = 5, coeffs: NsCoeffs = DEFAULT_NS_COEFFS, eps: float = 1e-7) -> Tensor:
    """`newton_schulz` (same arguments and result) as Triton kernels, differentiable with respect to x.

    Args:
        x: [..., m, n] matrices, min(m, n) <= 128 and max(m, n) <= 256; fp16, bf16, fp32 or fp64.
        steps, coeffs, eps: as `atlas_kernels.newton_schulz`.
    Returns:
        [..., m, n] in the dtype of x.
    """
    _check(x, steps)
    if len(coeffs) != 3:
        raise ValueError(f"coeffs: expected three floats (a, b, c), got {coeffs!r}")
    return NewtonSchulzFunction.apply(x, steps, tuple(float(c) for c in coeffs), float(eps))
