"""The polynomial feature map fused with l2 normalisation, phi(l2norm(x)), in Triton (forward and backward).

    n = x / max(||x||, eps)                                  (torch.nn.functional.normalize)
    phi(n)_f = sqrt(a_{deg f}) * s_f * prod_{j < deg f} n[idx_f, j]

with the feature layout of `poly.poly_features`: blocks by degree 0..p, inside a block the symmetric monomials
(itertools.combinations_with_replacement order), s_f = sqrt(multinomial coefficient). A table of monomial
indices (-1 = no factor), degrees and scales drives one kernel for every (d, p).

Forward: grid (row blocks, feature blocks); each program normalises its rows and gathers the factors.
Backward: grid (row blocks); loops over the feature blocks and scatters the monomial derivatives
d mono / d n[k] = sum_{j: idx_j = k} prod_{j' != j} n[idx_j'] into dn with a one-hot matmul, then goes back
through the normalisation: dx = (dn - n <n, dn>) / ||x|| (dn / eps when ||x|| <= eps). The gradient of
sqrt(a_i) is reduced per row by the kernel and summed per head by torch, which also differentiates the sqrt
(so a_i = 0 gives the same inf/nan gradient as the torch reference).
Tiles are fp32 (fp64 for fp64 inputs) with IEEE dots; the output has the dtype of x.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from atlas_kernels.ops.features.poly import _monomials

MAX_DIM = 256
_TABLES: dict[tuple[int, int, str], tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}


def feature_table(dim: int, degree: int, device: torch.device):
    """(idx [F, p] int32 with -1 padding, deg [F] int32, scale [F] float64) in `poly_features` order."""
    key = (dim, degree, str(device))
    if key not in _TABLES:
        idx_blocks = [torch.full((1, degree), -1, dtype=torch.int32)]
        deg_blocks = [torch.zeros(1, dtype=torch.int32)]
        scale_blocks = [torch.ones(1, dtype=torch.float64)]
        for i in range(1, degree + 1):
            index, scale = _monomials(dim, i)
            pad = torch.full((index.shape[0], degree - i), -1, dtype=torch.int32)
            idx_blocks.append(torch.cat([index.to(torch.int32), pad], dim=1))
            deg_blocks.append(torch.full((index.shape[0],), i, dtype=torch.int32))
            scale_blocks.append(scale)
        _TABLES[key] = (
            torch.cat(idx_blocks).contiguous().to(device),
            torch.cat(deg_blocks).to(device),
            torch.cat(scale_blocks).to(device),
        )
    return _TABLES[key]


@triton.jit
def _row_scale(x_ptr, rows, R, D, eps, BR: tl.constexpr, BD: tl.constexpr, ACC: tl.constexpr):
    rd = tl.arange(0, BD)
    mask = (rows[:, None] < R) & (rd[None, :] < D)
    x = tl.load(x_ptr + rows[:, None] * D + rd[None, :], mask=mask, other=0.0).to(ACC)
    norm = tl.sqrt(tl.sum(x * x, axis=1))
    return x, norm, 1.0 / tl.maximum(norm, eps)


@triton.jit
def _factor(x_ptr, rows, R, D, idx, inv, ACC: tl.constexpr):
    """n[row, idx] for every (row, feature); 1 where idx < 0 (no factor)."""
    ok = (rows[:, None] < R) & (idx[None, :] >= 0)
    xg = tl.load(x_ptr + rows[:, None] * D + idx[None, :], mask=ok, other=0.0).to(ACC)
    return tl.where(idx[None, :] >= 0, xg * inv[:, None], 1.0)


@triton.jit
def _poly_fwd_kernel(
    x_ptr,
    root_ptr,
    idx_ptr,
    deg_ptr,
    scale_ptr,
    out_ptr,
    R,
    D,
    F,
    T,
    H,
    eps,
    P: tl.constexpr,
    BR: tl.constexpr,
    BD: tl.constexpr,
    BF: tl.constexpr,
    ACC: tl.constexpr,
):
    i_r = tl.program_id(0).to(tl.int64)
    i_f = tl.program_id(1)
    rows = i_r * BR + tl.arange(0, BR)
    feats = i_f * BF + tl.arange(0, BF)
    fmask = feats < F
    _, _, inv = _row_scale(x_ptr, rows, R, D, eps, BR, BD, ACC)
    mono = tl.full((BR, BF), 1.0, ACC)
    for j in tl.static_range(P):
        idx = tl.load(idx_ptr + feats * P + j, mask=fmask, other=-1)
        mono *= _factor(x_ptr, rows, R, D, idx, inv, ACC)
    deg = tl.load(deg_ptr + feats, mask=fmask, other=0)
    scale = tl.load(scale_ptr + feats, mask=fmask, other=0.0).to(ACC)
    head = (rows // T) % H
    rmask = rows < R
    root = tl.load(
        root_ptr + head[:, None] * (P + 1) + deg[None, :], mask=rmask[:, None] & fmask[None, :], other=0.0
    ).to(ACC)
    out = root * scale[None, :] * mono
    tl.store(
        out_ptr + rows[:, None] * F + feats[None, :],
        out.to(out_ptr.dtype.element_ty),
        mask=rmask[:, None] & fmask[None, :],
    )


@triton.jit
def _poly_bwd_kernel(
    x_ptr,
    root_ptr,
    idx_ptr,
    deg_ptr,
    scale_ptr,
    dout_ptr,
    dx_ptr,
    droot_ptr,
    R,
    D,
    F,
    T,
    H,
    eps,
    P: tl.constexpr,
    BR: tl.constexpr,
    BD: tl.constexpr,
    BF: tl.constexpr,
    BP: tl.constexpr,
    ACC: tl.constexpr,
):
    i_r = tl.program_id(0).to(tl.int64)
    rows = i_r * BR + tl.arange(0, BR)
    rmask = rows < R
    rd = tl.arange(0, BD)
    rp = tl.arange(0, BP)
    head = (rows // T) % H
    x, norm, inv = _row_scale(x_ptr, rows, R, D, eps, BR, BD, ACC)
    dn = tl.zeros((BR, BD), dtype=ACC)
    droot = tl.zeros((BR, BP), dtype=ACC)
    for f0 in range(0, F, BF):
        feats = f0 + tl.arange(0, BF)
        fmask = feats < F
        m2 = rmask[:, None] & fmask[None, :]
        g = tl.load(dout_ptr + rows[:, None] * F + feats[None, :], mask=m2, other=0.0).to(ACC)
        deg = tl.load(deg_ptr + feats, mask=fmask, other=0)
        scale = tl.load(scale_ptr + feats, mask=fmask, other=0.0).to(ACC)
        root = tl.load(root_ptr + head[:, None] * (P + 1) + deg[None, :], mask=m2, other=0.0).to(ACC)
        gs = g * scale[None, :]
        mono = tl.full((BR, BF), 1.0, ACC)
        for j in tl.static_range(P):
            idx = tl.load(idx_ptr + feats * P + j, mask=fmask, other=-1)
            mono *= _factor(x_ptr, rows, R, D, idx, inv, ACC)
        # d root_i: sum of g * scale * mono over the features of degree i
        contrib = gs * mono
        for i in tl.static_range(P + 1):
            part = tl.sum(tl.where(deg[None, :] == i, contrib, 0.0), axis=1)
            droot += tl.where(rp[None, :] == i, part[:, None], 0.0)
        # d n: for each factor position j, the product of the other factors, scattered to column idx_j
        grs = gs * root
        for j in tl.static_range(P):
            idx_j = tl.load(idx_ptr + feats * P + j, mask=fmask, other=-1)
            others = tl.full((BR, BF), 1.0, ACC)
            for jj in tl.static_range(P):
                if jj != j:
                    idx_o = tl.load(idx_ptr + feats * P + jj, mask=fmask, other=-1)
                    others *= _factor(x_ptr, rows, R, D, idx_o, inv, ACC)
            c = tl.where(idx_j[None, :] >= 0, grs * others, 0.0)
            onehot = (idx_j[:, None] == rd[None, :]).to(ACC)
            dn += tl.dot(c, onehot, input_precision="ieee")
    n = x * inv[:, None]
    proj = tl.sum(n * dn, axis=1)
    dx = tl.where((norm > eps)[:, None], (dn - n * proj[:, None]) * inv[:, None], dn * inv[:, None])
    dmask = rmask[:, None] & (rd[None, :] < D)
    tl.store(dx_ptr + rows[:, None] * D + rd[None, :], dx.to(dx_ptr.dtype.element_ty), mask=dmask)
    tl.store(droot_ptr + rows[:, None] * (P + 1) + rp[None, :], droot, mask=rmask[:, None] & (rp[None, :] < P + 1))


_BR, _BF = 16, 64


def _acc(dtype: torch.dtype):
    return tl.float64 if dtype == torch.float64 else tl.float32


def _layout(x: torch.Tensor, root: torch.Tensor):
    """(R, T, H): rows, rows per head block, number of heads (heads on dim -3 when root is per head)."""
    d = x.shape[-1]
    R = x.numel() // d if d else 0
    if root.dim() == 2:
        return R, x.shape[-2], root.shape[0]
    return R, max(R, 1), 1


class PolyL2Function(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, root, degree, eps):
        d = x.shape[-1]
        x2 = x.reshape(-1, d).contiguous()
        root_c = root.detach().contiguous()
        idx, deg, scale = feature_table(d, degree, x.device)
        F = idx.shape[0]
        R, T, H = _layout(x, root)
        out = torch.empty(R, F, dtype=x.dtype, device=x.device)
        if R > 0:
            grid = (triton.cdiv(R, _BR), triton.cdiv(F, _BF))
            _poly_fwd_kernel[grid](
                x2, root_c, idx, deg, scale, out, R, d, F, T, H, float(eps),
                P=degree, BR=_BR, BD=max(16, triton.next_power_of_2(d)), BF=_BF, ACC=_acc(x.dtype),
            )  # fmt: skip
        ctx.save_for_backward(x2, root_c)
        ctx.args = (degree, eps, x.shape, root.shape)
        return out.reshape(*x.shape[:-1], F)

    @staticmethod
    def backward(ctx, dout):
        x2, root = ctx.saved_tensors
        degree, eps, x_shape, root_shape = ctx.args
        R, d = x2.shape
        idx, deg, scale = feature_table(d, degree, x2.device)
        F = idx.shape[0]
        T, H = (x_shape[-2], root_shape[0]) if len(root_shape) == 2 else (max(R, 1), 1)
        dx = torch.empty_like(x2)
        acc_dtype = torch.float64 if x2.dtype == torch.float64 else torch.float32
        droot_rows = torch.empty(R, degree + 1, dtype=acc_dtype, device=x2.device)
        if R > 0:
            _poly_bwd_kernel[(triton.cdiv(R, _BR),)](
                x2, root, idx, deg, scale, dout.reshape(R, F).contiguous(), dx, droot_rows, R, d, F, T, H,
                float(eps), P=degree, BR=_BR, BD=max(16, triton.next_power_of_2(d)), BF=_BF,
                BP=max(2, triton.next_power_of_2(degree + 1)), ACC=_acc(x2.dtype),
            )  # fmt: skip
        if len(root_shape) == 2:
            droot = droot_rows.reshape(-1, H, T, degree + 1).sum(dim=(0, 2))
        else:
            droot = droot_rows.sum(0)
        return dx.reshape(x_shape), droot.to(root.dtype), None, None


def _check(x: torch.Tensor, coeffs: torch.Tensor, degree: int) -> None:
    """The arguments and limits of `poly_features_l2norm_triton` (ValueError naming the argument)."""
    if not isinstance(x, torch.Tensor) or x.dim() < 1:
        raise ValueError(f"x: expected a tensor [..., d], got {type(x).__name__}")
    if isinstance(degree, bool) or not isinstance(degree, int) or degree < 1:
        raise ValueError(f"degree: expected an int >= 1, got {degree!r}")
    if coeffs.shape[-1] != degree + 1 or coeffs.dim() not in (1, 2):
        raise ValueError(f"coeffs: expected [p + 1] or [H, p + 1] with p = {degree}, got {tuple(coeffs.shape)}")
    if coeffs.dim() == 2 and (x.dim() < 3 or x.shape[-3] != coeffs.shape[0]):
        raise ValueError(f"x: per-head coeffs {tuple(coeffs.shape)} need x [..., H, T, d], got {tuple(x.shape)}")
    if x.shape[-1] > MAX_DIM:
        raise ValueError(f"x: feature dim {x.shape[-1]} exceeds the kernel limit {MAX_DIM}")
    if x.dtype not in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        raise ValueError(f"x: dtype {x.dtype} is not supported")


def poly_features_l2norm_triton(x: torch.Tensor, coeffs: torch.Tensor, degree: int, eps: float = 1e-12):
    """phi(l2norm(x)): `poly_features(F.normalize(x, dim=-1, eps=eps), coeffs, degree)` in one kernel each way.

    Args:
        x: [..., H, T, d] (heads on dim -3) when `coeffs` is [H, p + 1], or any [..., d] with shared coeffs
            [p + 1]; d <= 256; fp16, bf16, fp32 or fp64.
        coeffs: a_i >= 0, [p + 1] or [H, p + 1]; differentiable (through sqrt(a_i), as the reference).
        degree: p >= 1.
        eps: the normalisation floor of F.normalize.
    Returns:
        [..., C(d + p, p)] in the dtype of x, blocks ordered by degree 0..p.
    """
    _check(x, coeffs, degree)
    root = coeffs.to(torch.float64 if x.dtype == torch.float64 else torch.float32).sqrt()
    return PolyL2Function.apply(x, root, degree, float(eps))
