"""Correctness checks of the Triton kernels against the torch ops at any shape and dtype.

Shared by the GPU tests (`tests/test_triton_gpu.py`) and the GPU benchmark (`benchmarks/kernels_gpu.py`). Every
check runs the kernel in the requested dtype and the torch reference in float32 (float64 on CPU) on the *same*
rounded inputs, and returns flash-linear-attention-style error ratios rms(out - ref) / rms(ref) per tensor
(outputs, final state, every input gradient).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from atlas_kernels.config import MemoryConfig
from atlas_kernels.ops.memory.params import init_memory_params


def err_ratio(ref: torch.Tensor, out: torch.Tensor) -> float:
    """rms(out - ref) / rms(ref) (0 when both vanish or are empty); NaN/inf in `out` give inf."""
    ref, out = ref.detach().double(), out.detach().double()
    if ref.shape != out.shape:
        raise AssertionError(f"shape mismatch: {tuple(ref.shape)} vs {tuple(out.shape)}")
    if ref.numel() == 0:  # e.g. the halo of window c = 1: the mean of nothing would be NaN and fail every check
        return 0.0
    if not torch.isfinite(out).all():
        return math.inf
    num = (out - ref).pow(2).mean().sqrt().item()
    den = ref.pow(2).mean().sqrt().item()
    return num / den if den > 0 else num


def _reference_dtype(device) -> torch.dtype:
    return torch.float32 if torch.device(device).type == "cuda" else torch.float64


def memory_inputs(
    cfg: MemoryConfig, B, T, H, Dk, Dv, *, dtype, device, seed=0, eta_max=1.0, momentum_eta=1.0, alpha_low=0.9
):
    """Stable random inputs at any size: l2-normalised q, k; v ~ N(0, 1); alpha in [alpha_low, 1); eta in
    [0, eta_max / c) (a step over a window of c stays contractive), times `momentum_eta` with momentum; gamma in
    [0.5, 1]; with momentum theta in [0, 0.9) (the momentum sum stays bounded). Params from `init_memory_params`.
    Drawn in float32, then cast to `dtype` on `device`. Over many chunks the LayerNorm-ed MLP memory at alpha in
    [0.9, 1) is ill-conditioned: at T = 2048, head dim 64, chunk 64 the torch op in float32 drifts from float64 by
    x10 every 4 chunks to an error ratio 0.5-0.8 by chunk 30 (docs/kernels.md, "Conditioning of the checks");
    alpha_low = 0.99 keeps it at 5e-6. Long-sequence checks use that."""
    g = torch.Generator(device=device).manual_seed(seed)
    rand = lambda *s: torch.rand(*s, generator=g, device=device, dtype=torch.float32)  # noqa: E731
    randn = lambda *s: torch.randn(*s, generator=g, device=device, dtype=torch.float32)  # noqa: E731
    q = F.normalize(randn(B, T, H, Dk), dim=-1)
    k = F.normalize(randn(B, T, H, Dk), dim=-1)
    v = randn(B, T, H, Dv)
    gates = {
        "alpha": alpha_low + (1.0 - alpha_low) * rand(B, T, H),
        "eta": eta_max * rand(B, T, H) / cfg.window,
        "gamma": 0.5 + 0.5 * rand(B, T, H),
    }
    if cfg.uses_momentum:
        gates["theta"] = 0.9 * rand(B, T, H)
        gates["eta"] = gates["eta"] * momentum_eta
    p = init_memory_params(
        cfg, H, Dk, Dv, dtype=torch.float32, device="cpu", generator=torch.Generator().manual_seed(seed)
    )
    cast = lambda t: t.to(device=device, dtype=dtype)  # noqa: E731
    return cast(q), cast(k), cast(v), {n: cast(t) for n, t in gates.items()}, {n: cast(t) for n, t in p.items()}


def linear_memory_inputs(cfg: MemoryConfig, B, T, H, Dk, Dv, *, dtype, device, seed=0):
    """`memory_inputs` of the linear memory: eta in [0, 1/c), [0, 0.1/c) with momentum."""
    return memory_inputs(cfg, B, T, H, Dk, Dv, dtype=dtype, device=device, seed=seed, momentum_eta=0.1)


def forward_backward(op, q, k, v, gates, params, cfg, w_o, w_state):
    """Outputs, state and the gradient of every input of loss = <o, w_o> + sum_name <state[name], w_state[name]>
    (state tensors by `MemoryState.tensors()` name; names absent from w_state do not enter the loss)."""
    leaves = {"q": q, "k": k, "v": v, **{f"gates.{n}": t for n, t in gates.items()}, **params}
    leaves = {n: t.detach().clone().requires_grad_() for n, t in leaves.items()}
    g = {n: leaves[f"gates.{n}"] for n in gates}
    p = {n: leaves[n] for n in params}
    o, s = op(leaves["q"], leaves["k"], leaves["v"], g, p, cfg)
    loss = (o.float() * w_o).sum()
    for name, t in s.tensors().items():
        if name in w_state:
            loss = loss + (t.float() * w_state[name]).sum()
    grads = torch.autograd.grad(loss, list(leaves.values()))
    return o, s, dict(zip(leaves, grads))


def error_ratios(ref, out) -> dict[str, float]:
    """{"o", "state.<tensor>", "grad.<input>"}: `err_ratio` of each, from two `forward_backward` results."""
    (o_ref, s_ref, g_ref), (o, s, g) = ref, out
    errs = {"o": err_ratio(o_ref, o)}
    t_ref, t_out = s_ref.tensors(), s.tensors()
    errs.update({f"state.{n}": err_ratio(t_ref[n], t_out[n]) for n in t_ref})
    errs.update({f"grad.{n}": err_ratio(g_ref[n], g[n]) for n in g_ref})
    return errs


def cast_inputs(inputs, dtype):
    """The same inputs (q, k, v, gates, params) in `dtype`."""
    up = lambda t: t.to(dtype)  # noqa: E731
    q, k, v, gates, p = inputs
    return up(q), up(k), up(v), {n: up(t) for n, t in gates.items()}, {n: up(t) for n, t in p.items()}


def upcast_inputs(inputs, device):
    """The same inputs in the reference dtype (float32 on CUDA, float64 on CPU)."""
    return cast_inputs(inputs, _reference_dtype(device))


def check_linear_memory(cfg: MemoryConfig, B, T, H, Dk, Dv, *, dtype, device, seed=0) -> dict[str, float]:
    """Error ratios of the Triton linear memory (in `dtype`) against the torch chunk op (float32 on CUDA,
    float64 on CPU) on the same inputs: "o", "state.<tensor>" and "grad.<input>"."""
    from atlas_kernels.ops.memory.chunk import memory_chunk_torch
    from atlas_kernels.ops.memory.triton.linear import memory_chunk_triton

    inputs = linear_memory_inputs(cfg, B, T, H, Dk, Dv, dtype=dtype, device=device, seed=seed)
    gen = torch.Generator(device=device).manual_seed(seed + 1)
    w_o = torch.randn(B, T, H, Dv, generator=gen, device=device) / math.sqrt(B * T * H * Dv)
    w_s = torch.randn(B, H, Dv, Dk, generator=gen, device=device) / math.sqrt(B * H * Dv * Dk)
    w_state = {"weights.W": w_s, "momentum.W": w_s.flip(-1)}
    ref = forward_backward(memory_chunk_torch, *upcast_inputs(inputs, device), cfg, w_o, w_state)
    return error_ratios(ref, forward_backward(memory_chunk_triton, *inputs, cfg, w_o, w_state))


def check_newton_schulz(shape, *, dtype, device, steps=5, seed=0) -> dict[str, float]:
    """Error ratios of the Triton Newton-Schulz (output, input gradient) against the torch reference."""
    from atlas_kernels.ops.newton_schulz.naive import newton_schulz
    from atlas_kernels.ops.newton_schulz.triton import newton_schulz_triton

    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(*shape, generator=gen, device=device).to(dtype)
    w = torch.randn(*shape, generator=gen, device=device)
    out = {}
    for name, fn, xin in (
        ("ref", newton_schulz, x.to(_reference_dtype(device))),
        ("tri", newton_schulz_triton, x),
    ):
        xin = xin.detach().clone().requires_grad_()
        y = fn(xin, steps=steps)
        (gx,) = torch.autograd.grad((y.float() * w).sum(), xin)
        out[name] = (y, gx)
    return {"o": err_ratio(out["ref"][0], out["tri"][0]), "grad.x": err_ratio(out["ref"][1], out["tri"][1])}


def check_poly_features(shape, degree, *, dtype, device, seed=0) -> dict[str, float]:
    """Error ratios of the Triton phi(l2norm(x)) (features, gradients to x and a) against torch."""
    from atlas_kernels.ops.features import poly_features
    from atlas_kernels.ops.features.triton import poly_features_l2norm_triton

    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(*shape, generator=gen, device=device).to(dtype)
    a = 0.1 + torch.rand(shape[-3], degree + 1, generator=gen, device=device)
    ref_dtype = _reference_dtype(device)
    out = {}
    for name, fn, xin, ain in (
        ("ref", lambda x, a, p: poly_features(F.normalize(x, dim=-1), a, p), x.to(ref_dtype), a.to(ref_dtype)),
        ("tri", poly_features_l2norm_triton, x, a),
    ):
        xin = xin.detach().clone().requires_grad_()
        ain = ain.detach().clone().requires_grad_()
        y = fn(xin, ain, degree)
        w = torch.randn(y.shape, generator=torch.Generator(device=device).manual_seed(seed + 1), device=device)
        gx, ga = torch.autograd.grad((y.float() * w).sum(), (xin, ain))
        out[name] = (y, gx, ga)
    return {
        "o": err_ratio(out["ref"][0], out["tri"][0]),
        "grad.x": err_ratio(out["ref"][1], out["tri"][1]),
        "grad.a": err_ratio(out["ref"][2], out["tri"][2]),
    }
