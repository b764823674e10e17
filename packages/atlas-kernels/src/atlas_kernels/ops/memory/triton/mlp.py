"""Chunkwise MLP memory in Triton: forward and backward kernels, host side (docs/chunkwise.md, "Inner gradients").

Supported: memory="mlp" (f(x) = x + g(W1 s(W2 x)), g = the memory LayerNorm when cfg.memory_norm, residual on or
off, s = gelu | silu) and memory="gated_mlp" (x + g(W1 (s(W2 x) * W3 x))), feature_map="identity", optimizer
"gd" | "momentum", bias l2 | dot, a finite window c >= 1 (c - 1 <= 64) with gamma gates and the carried halo, alpha
(and theta) decay as log-space cumulative products clamped at cfg.gate_eps, toward 0 or toward W_init
(decay_target), chunk size b <= 128, any T, Dk <= 256, any hidden width (blocked). Everything else (muon, poly /
exp features, window="global") is refused with a ValueError naming the field; the api falls back to the torch op
under backend="auto". This is the Titans / OmegaNet family of configurations (with identity features).

Forward kernel: one program per (batch, head), chunks in sequence. Per chunk of L <= b tokens, the window tile
holds the halo = c - 1 halo tokens followed by the chunk (read from the sequence, or from the incoming state's halo
before the sequence start), so window token w covers position s - halo + w and chunk token n sits at w = halo + n:
    G[n, w] = gamma_w for n <= w <= n + halo;   C = LA diag(eta) G (gd) | (LA LT) diag(eta) G (momentum)
    pass 1 (hidden blocks): a0 = W2 k_w, h0 = s(a0), b0 = W1 h0;  f0 = k_w + LN(b0);  e = f0 - v_w (l2) | -v_w
        eb = LN backprop of e at b0 (= e without the norm): the signal of W1, whose input is h0
    pass 2 (hidden blocks): ds = (W1^T eb) * s'(a0): the signal of W2, whose input is k_w
        a_j = A_j W2 q_j - P_j S2 q_j - sum_w C[j, w] ds_w (k_w . q_j),  h_j = s(a_j)
        b_j += A_j W1 h_j - P_j S1 h_j;  scores[j, w] += h_j . h0_w
        W_next = A_L W - P_L S - sum_w C[L, w] signal_w input_w^T;  S_next = Th_L S + sum_w r_w signal_w input_w^T
    y_j = q_j + LN(b_j - sum_w (C * scores)[j, w] eb_w)
exactly what `chunk.py` (`_gradient_factors`, `_dual_chunk`) computes. The states (W1, W2 and with momentum S1, S2)
do not fit in registers at real shapes (2 x 64 x 256 fp32 per head at 340M), so they live in a global buffer
[B, H, NT + 1, ...] (fp32; fp64 for fp64 inputs): slot i is the start state of chunk i, slot NT the final state.
The kernel reads slot i and writes slot i + 1 one hidden block at a time; a barrier orders those writes before
the next chunk's reads (other threads of the program read them).

Backward (`triton/mlp_bwd.py`): a Triton kernel that walks the chunks in reverse, rebuilds each from its stored
start state and backpropagates through it by hand, second-order terms of the inner gradient included (s'' of the
activation, the LayerNorm's backprop differentiated); the gates' gradients follow from the kernel's coefficient
gradients through the torch coefficient code (`mlp_memory_backward` here). Only chunk-start states are kept between
forward and backward (no per-token weights, no per-chunk activations). Kernels: `triton/mlp_kernels.py` (forward
and shared pieces), on the stages shared with the linear kernels (`triton/stages.py`).

Tiles are fp32 (fp64 for fp64 inputs) with fp32 accumulation; dot operands follow `triton_common.compute_precision`
(bf16 on GPU for bf16/fp16 inputs, 3xTF32 for fp32, IEEE under the interpreter). The window tile is padded to a
power of two >= b + c - 1 (b = 64, c = 4 -> 128 rows): simple and correct, not yet fast.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton

from atlas_kernels.config import MemoryConfig
from atlas_kernels.ops.memory.coefficients import (
    chunk_decays,
    momentum_end_coefficients,
    update_coefficients,
    window_gates,
)
from atlas_kernels.ops.memory.state import MemoryState, halo_size
from atlas_kernels.ops.memory.triton.mlp_bwd import _mlp_bwd_kernel
from atlas_kernels.ops.memory.triton.mlp_kernels import _mlp_fwd_kernel
from atlas_kernels.ops.memory.triton.support import call_state, common_unsupported, incoming_halo, start_call
from atlas_kernels.ops.triton_common import compute_precision, memory_kernel_compile

HIDDEN_BLOCK = 32
# Largest window x key tile (BW * BK) per dtype that fits the 227 KB of shared memory of an sm_90 block, from
# offline sm_90 compiles of the momentum variant (num_warps 8, num_stages 1): bf16 operands 147 KB at 128 x 128;
# 3xTF32 (fp32 inputs, hidden block 16) 139 KB at 64 x 64 but 229-262 KB at 128 x 64; fp64 not measured (tests).
GPU_TILE_LIMIT = {torch.bfloat16: 128 * 128, torch.float16: 128 * 128, torch.float32: 64 * 64, torch.float64: 32 * 32}


def _blocks(chunk: int, halo: int, K: int, V: int, DH: int, block_h: int | None, prec: str = "ieee"):
    p2 = lambda n: max(16, triton.next_power_of_2(max(n, 1)))  # noqa: E731  (tl.dot needs dims >= 16)
    # 3xTF32 operands take twice the shared memory of bf16 ones: a narrower hidden block keeps them in 227 KB
    BD = block_h or min(16 if prec == "tf32x3" else HIDDEN_BLOCK, p2(DH))
    return p2(chunk), p2(chunk + halo), p2(K), p2(V), BD


def _num_warps(BW: int, BK: int) -> int:
    return 4 if max(BW, BK) <= 32 else 8


# state tensors in the order the Function takes and returns them; absent ones (W3 without gated_mlp, the S
# without momentum) are empty placeholders
STATE_ORDER = (("weights", "W1"), ("weights", "W2"), ("weights", "W3"), ("momentum", "W1"), ("momentum", "W2"),
               ("momentum", "W3"))  # fmt: skip


def state_present(cfg: MemoryConfig) -> list[bool]:
    gated, momentum = cfg.memory == "gated_mlp", cfg.optimizer == "momentum"
    return [True, True, gated, momentum, momentum, momentum and gated]


class MLPMemoryFunction(torch.autograd.Function):
    """Inputs: q, k [B, T, H, Dk]; v [B, T, H, Dv]; alpha, eta, gamma, theta [B, T, H]; the six state tensors of
    `STATE_ORDER` (W1 [B, H, Dv, Dh], W2 and W3 [B, H, Dh, Dk], S likewise; placeholders where absent);
    W_init for W1, W2, W3 [H, ...] (decay_target="init" only, else placeholders);
    ln_weight, ln_bias [H, Dv] (memory_norm only); halo_k/v/gamma [B, H, halo(, D)]; cfg; block_h.
    Outputs: y [B, T, H, Dv], the six state tensors after the last token, the six at the last chunk start."""

    @staticmethod
    def forward(ctx, q, k, v, alpha, eta, gamma, theta, w1, w2, w3, s1, s2, s3, wi1, wi2, wi3, lnw, lnb, halo_k,
                halo_v, halo_gamma, cfg, block_h):  # fmt: skip
        B, T, H, K = k.shape
        V, DH, halo = v.shape[-1], w1.shape[-1], halo_k.shape[2]
        NT = triton.cdiv(T, cfg.chunk_size)
        present = state_present(cfg)
        acc_torch, acc, prec = compute_precision(k.dtype, k.device)
        BT, BW, BK, BV, BD = _blocks(cfg.chunk_size, halo, K, V, DH, block_h, prec)
        bufs = []
        for t, there in zip((w1, w2, w3, s1, s2, s3), present):
            buf = torch.empty(B, H, NT + 1, *t.shape[2:], dtype=acc_torch, device=k.device) if there else None
            if there:
                buf[:, :, 0] = t
            bufs.append(buf)
        ptrs = [buf if buf is not None else bufs[0] for buf in bufs]  # placeholders are never read
        y = torch.empty(B, T, H, V, dtype=v.dtype, device=k.device)
        launch = dict(
            BT=BT, BW=BW, BK=BK, BV=BV, BD=BD, L2=cfg.bias == "l2", MOMENTUM=present[3], NORM=cfg.memory_norm,
            RESIDUAL=cfg.residual, SILU=cfg.activation == "silu", GATED=present[2],
            INIT=cfg.decay_target == "init", ACC=acc, PREC=prec,
            num_warps=_num_warps(BW, BK), num_stages=1,
        )  # fmt: skip
        with memory_kernel_compile(k.device):
            _mlp_fwd_kernel[(B * H,)](
                q, k, v, alpha, eta, gamma, theta, halo_k, halo_v, halo_gamma, lnw, lnb, *ptrs, wi1, wi2, wi3, y,
                T, H, K, V, DH, halo, cfg.chunk_size, NT, float(cfg.gate_eps), float(cfg.norm_eps), **launch,
            )  # fmt: skip
        ctx.save_for_backward(
            q, k, v, alpha, eta, gamma, theta, lnw, lnb, halo_k, halo_v, halo_gamma, wi1, wi2, wi3, *ptrs
        )
        ctx.cfg = cfg
        ctx.blocks = (BT, BW, BK, BV, BD)
        ctx.launch = launch
        ctx.state_dtypes = [t.dtype for t in (w1, w2, w3, s1, s2, s3)]

        def slot(i):  # copies: views would keep the whole buffer alive with the returned state
            return [buf[:, :, i].clone() if buf is not None else y.new_zeros(0) for buf in bufs]

        return (y, *slot(NT), *slot(NT - 1))

    @staticmethod
    def backward(ctx, dy, *dstates):
        grads = mlp_memory_backward(ctx.saved_tensors, ctx.cfg, dy, dstates[:6], dstates[6:], ctx.blocks, ctx.launch)
        dw = [g if g is None else g.to(dt) for g, dt in zip(grads[7:13], ctx.state_dtypes)]
        return (*grads[:7], *dw, *grads[13:], None, None)


def mlp_memory_backward(saved, cfg: MemoryConfig, dy, d_end, d_resume, blocks, launch):
    """Gradients of `MLPMemoryFunction` (same order as its forward arguments) from the saved forward tensors.

    saved: (q, k, v, alpha, eta, gamma, theta, ln_weight, ln_bias, halo_k, halo_v, halo_gamma, W_init of W1, W2,
    W3, then the six state buffers of `STATE_ORDER`); d_end / d_resume: gradients of the returned end /
    last-chunk-start states (six each, None where unused);
    blocks: the forward's (BT, BW, BK, BV, BD); launch: kwargs of the kernel launch (constexprs, num_warps).
    """
    q, k, v, alpha, eta, gamma, theta, lnw, lnb, halo_k, halo_v, halo_gamma, wi1, wi2, wi3, *bufs = saved
    B, T, H, K = k.shape
    V, DH, halo, b = v.shape[-1], bufs[0].shape[-1], halo_k.shape[2], cfg.chunk_size
    NT = triton.cdiv(T, b)
    BT, BW, BK, BV, BD = blocks
    momentum, gated, init = launch["MOMENTUM"], launch["GATED"], launch["INIT"]
    present = [True, True, gated, momentum, momentum, momentum and gated]
    acc, dev = bufs[0].dtype, k.device

    def slots(d, buf):  # [B, H, 2, ...]: slot 0 starts as the gradient of the end state
        out = buf.new_zeros(B, H, 2, *buf.shape[3:])
        if d is not None:
            out[:, :, 0] = d
        return out

    def resume(d, buf):
        return buf.new_zeros(B, H, *buf.shape[3:]) if d is None else d.to(acc).contiguous()

    # absent states get the W1 buffers as unread placeholders
    grads = [slots(d, buf) if there else None for d, buf, there in zip(d_end, bufs, present)]
    resumes = [resume(d, buf) if there else None for d, buf, there in zip(d_resume, bufs, present)]
    # W_init gradients per (batch, head), summed over the batch below (placeholders without decay_target="init")
    gi = [buf.new_zeros(B, H, *buf.shape[3:]) if init and there else bufs[0] for buf, there in zip(bufs, present[:3])]
    dq = torch.empty(B, T, H, K, dtype=acc, device=dev)
    dk = torch.zeros(B, H, halo + T, K, dtype=acc, device=dev)
    dv = torch.zeros(B, H, halo + T, V, dtype=acc, device=dev)
    dC = torch.empty(B, H, NT, BT, BW, dtype=acc, device=dev)
    dA = torch.empty(B, H, NT, BT, dtype=acc, device=dev)
    dP = torch.empty_like(dA) if momentum else dA
    dr = torch.empty(B, H, NT, BW, dtype=acc, device=dev) if momentum else dA
    dth = torch.empty(B, H, NT, dtype=acc, device=dev) if momentum else dA
    dlnw = torch.empty(B, H, V, dtype=acc, device=dev)
    dlnb = torch.empty_like(dlnw)
    scratch = torch.empty(B, H, BW, DH, dtype=acc, device=dev)
    scratch_gate = torch.empty_like(scratch) if gated else scratch
    dy = torch.zeros(B, T, H, V, dtype=acc, device=dev) if dy is None else dy.contiguous()
    with memory_kernel_compile(dev):
        _mlp_bwd_kernel[(B * H,)](
            q, k, v, alpha, eta, gamma, theta, halo_k, halo_v, halo_gamma, lnw, lnb, *bufs, wi1, wi2, wi3, dy,
            *[g if g is not None else grads[0] for g in grads], *[r if r is not None else resumes[0] for r in resumes],
            *gi,
            dq, dk, dv, dC, dA, dP, dr, dth, dlnw, dlnb, scratch, scratch_gate,
            T, H, K, V, DH, halo, b, NT, float(cfg.gate_eps), float(cfg.norm_eps), **launch,
        )  # fmt: skip
    d_gates = _gate_grads(alpha, eta, theta, gamma, halo_gamma, dC, dA, dP, dr, dth, cfg, NT)
    public = lambda t, like: t.transpose(1, 2).to(like.dtype)  # noqa: E731  heads-first -> [B, T, H, ...]
    d_states = [g[:, :, NT % 2] if g is not None else None for g in grads]
    dnorm = (dlnw.sum(0).to(lnw.dtype), dlnb.sum(0).to(lnb.dtype)) if cfg.memory_norm else (None, None)
    d_init = [g.sum(0).to(w.dtype) if init and there else None for g, w, there in zip(gi, (wi1, wi2, wi3), present)]
    return (
        dq.to(q.dtype), public(dk[:, :, halo:], k), public(dv[:, :, halo:], v),
        d_gates["alpha"].to(alpha.dtype), d_gates["eta"].to(eta.dtype), d_gates["gamma"].to(gamma.dtype),
        d_gates["theta"].to(theta.dtype) if momentum else None,
        *d_states, *d_init, *dnorm,
        dk[:, :, :halo].to(halo_k.dtype), dv[:, :, :halo].to(halo_v.dtype), d_gates["halo_gamma"].to(halo_gamma.dtype),
    )  # fmt: skip


def _gate_grads(alpha, eta, theta, gamma, halo_gamma, dC, dA, dP, dr, dth, cfg: MemoryConfig, NT: int):
    """Gate gradients from the kernel's coefficient gradients, by autograd through the torch coefficient code
    batched over all chunks (the sequence padded to NT chunks with alpha = theta = 1, eta = gamma = 0, exactly the
    kernel's padding). alpha, eta, gamma, theta: [B, T, H]; halo_gamma: [B, H, halo]. Returns {name: gradient},
    same layouts."""
    B, T, H = alpha.shape
    b, halo = cfg.chunk_size, halo_gamma.shape[2]
    X = B * H * NT
    momentum = cfg.optimizer == "momentum"
    acc = dC.dtype
    with torch.enable_grad():
        gates = {"alpha": alpha, "eta": eta, "gamma": gamma, "theta": theta, "halo_gamma": halo_gamma}
        leaves = {n: t.detach().to(acc).requires_grad_() for n, t in gates.items()}
        chunked = lambda t, fill: F.pad(t.transpose(1, 2), (0, NT * b - T), value=fill).reshape(X, 1, b)  # noqa: E731
        a, e, th = chunked(leaves["alpha"], 1.0), chunked(leaves["eta"], 0.0), chunked(leaves["theta"], 1.0)
        ext = F.pad(torch.cat([leaves["halo_gamma"], leaves["gamma"].transpose(1, 2)], 2), (0, NT * b - T))
        G = window_gates(ext.unfold(2, b + halo, b).reshape(X, 1, b + halo), b, halo, cfg)
        d = chunk_decays(a, th, cfg)
        outs = [update_coefficients(d, e, G, cfg), d.A]
        douts = [dC[..., :b, : b + halo].reshape(X, 1, b, b + halo), dA[..., :b].reshape(X, 1, b)]
        if momentum:
            outs += [d.P, momentum_end_coefficients(d, e, G), d.Th[..., -1]]
            douts += [dP[..., :b].reshape(X, 1, b), dr[..., : b + halo].reshape(X, 1, b + halo), dth.reshape(X, 1)]
        names = [n for n in leaves if momentum or n != "theta"]
        grads = torch.autograd.grad(outs, [leaves[n] for n in names], douts, allow_unused=True)
    return {n: torch.zeros_like(leaves[n]) if g is None else g for n, g in zip(names, grads)}


def triton_unsupported(cfg: MemoryConfig, q: torch.Tensor | None = None):
    """None when the Triton MLP-memory op covers this call, else (field, reason) of the first unsupported setting."""
    common = common_unsupported(
        cfg, q, memory=("mlp", "gated_mlp"), op="the Triton MLP op", decay_targets=("zero", "init")
    )
    if common is not None:
        return common
    if q is not None and q.is_cuda and q.dim() == 4 and not gpu_tiles_fit(cfg, q.shape[-1], q.dtype):
        return "q", (
            f"dtype {q.dtype} with chunk_size={cfg.chunk_size}, window={cfg.window}, key dim {q.shape[-1]}: the "
            "window x key tile exceeds the GPU shared memory (use bf16 inputs or a smaller chunk_size)"
        )
    return None


def gpu_tiles_fit(cfg: MemoryConfig, key_dim: int, dtype: torch.dtype) -> bool:
    """Whether the forward kernel's window x key tile fits an sm_90 block's shared memory (`GPU_TILE_LIMIT`)."""
    _, BW, BK, _, _ = _blocks(cfg.chunk_size, halo_size(cfg), key_dim, key_dim, 16, None)
    return GPU_TILE_LIMIT.get(dtype, 0) >= BW * BK


def memory_chunk_triton_mlp(q, k, v, gates, params, cfg: MemoryConfig, state: MemoryState | None = None, block_h=None):
    """The chunkwise MLP memory in Triton. Arguments and returns as `atlas_kernels.memory_chunk`.

    States interoperate with the torch op both ways (same `MemoryState` fields and dtypes), pending tokens of a
    sequence that ended inside a chunk included. `block_h` overrides the hidden block (tests; default 32).
    """
    q, k, v, x, state, n_pending = start_call(q, k, v, gates, params, cfg, state, triton_unsupported(cfg, q))
    B, H, T, K, V = x.shape
    acc_torch = compute_precision(k.dtype)[0]
    halo = halo_size(cfg)
    momentum = cfg.optimizer == "momentum"
    present = state_present(cfg)
    names = [name for (_, name), there in zip(STATE_ORDER[:3], present[:3]) if there]
    if state is None:
        weights = [params[n].expand(B, *params[n].shape) if n in names else None for n in ("W1", "W2", "W3")]
        zeros = [w.new_zeros(w.shape) if w is not None and momentum else None for w in weights]
        states = weights + zeros
    else:
        if state.kernel_keys is not None or state.explicit_exp or (state.momentum is None) == momentum:
            raise ValueError(f"state: not a state of MLP memory with optimizer={cfg.optimizer!r}")
        if set(state.weights) != set(names):
            raise ValueError(f"state: weights {sorted(state.weights)}, expected {', '.join(names)} ({cfg.memory=})")
        states = [getattr(state, group)[n] if there else None for (group, n), there in zip(STATE_ORDER, present)]
    halo_k, halo_v, halo_gamma = incoming = incoming_halo(state, k, V, halo, acc_torch)
    states = [t if t is not None else k.new_zeros(0) for t in states]
    if cfg.decay_target == "init":  # the decay pulls toward the initial weights (W3 only for gated_mlp)
        targets = [params[n].contiguous() if n in names else k.new_zeros(0) for n in ("W1", "W2", "W3")]
    else:
        targets = [k.new_zeros(0)] * 3
    if cfg.memory_norm:
        lnw, lnb = params["ln_weight"].contiguous(), params["ln_bias"].contiguous()
    else:
        lnw = lnb = k.new_zeros(1)
    alpha, eta, gamma, theta = (getattr(x, n).transpose(1, 2).contiguous() for n in ("alpha", "eta", "gamma", "theta"))
    qc, kc, vc = q.contiguous(), k.contiguous(), v.contiguous()
    if T == 0:
        y = v.new_zeros(B, 0, H, V)
        end, resume = [t.to(acc_torch) for t in states], None
    else:
        out = MLPMemoryFunction.apply(qc, kc, vc, alpha, eta, gamma, theta, *states, *targets, lnw, lnb, halo_k,
                                      halo_v, halo_gamma, cfg, block_h)  # fmt: skip
        y, end, resume = out[0], list(out[1:7]), list(out[7:13])

    def groups_of(tensors):
        groups = {"weights": {}, "momentum": {}}
        for (group, name), there, t in zip(STATE_ORDER, present, tensors):
            if there:
                groups[group][name] = t
        return groups["weights"], (groups["momentum"] if momentum else None)

    seqs = {"k": kc, "v": vc, "alpha": alpha, "eta": eta, "theta": theta, "gamma": gamma}
    new_state = call_state(groups_of, end, resume, seqs, incoming, halo, cfg.chunk_size, acc_torch)
    return y[:, n_pending:], new_state
