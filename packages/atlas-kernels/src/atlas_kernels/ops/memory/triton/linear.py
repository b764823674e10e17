"""Chunkwise linear memory in Triton: forward and hand-written backward (docs/chunkwise.md).

Supported: memory="linear", feature_map="identity", optimizer "gd" | "momentum", bias l2 | dot, window c >= 1
(c - 1 <= 64) with gamma gates and the carried halo, alpha (and theta) decay as log-space cumulative products
clamped at cfg.gate_eps, decay_first (gd), any chunk size b <= 128, any T, Dk <= 256, any Dv (split in blocks of
<= 64 over programs). Not supported (ValueError naming the field; the api falls back to torch under "auto"):
mlp / gated_mlp memories, muon, poly / exp features, window="global".

Per chunk of L <= b tokens with start weights W (one program per (value block, batch, head), chunks in sequence,
the state W [BV, Dk] kept in fp32 registers), window tokens w = halo (the halo = c - 1 tokens before the chunk,
read from the sequence or from the state's halo) + the chunk:
    la = cumsum log alpha,  A_j = exp(la_j),  LA[j, n] = exp(la_j - la_n) (n <= j)
    G[n, w] = gamma_w [n <= w <= n + halo] (token n's window), Meta = LA diag(eta), C = Meta G
    y_j = A_j W q_j - sum_w C[j, w] e_w (k_w . q_j),   e_w = W k_w - v_w (l2) | -v_w (dot)
    W_L = A_L W - sum_w C[L, w] e_w k_w^T
decay_first (l2): e_w^(n) = A_n W k_w - v_w, i.e. C1 = LA diag(eta A) G on W k_w and C2 = LA diag(eta) G on v_w.
momentum (state W, S): Th_j = prod theta, LT[m, n] = Th_m / Th_n, C = (LA LT) diag(eta) G, P = LA Th,
    y_j = A_j W q_j - P_j S q_j - sum_w C[j, w] e_w (k_w . q_j),   W_L = A_L W - P_L S - sum_w C[L, w] e_w k_w^T,
    S_L = Th_L S + sum_w r_w e_w k_w^T,  r_w = sum_n (Th_L / Th_n) eta_n G[n, w].

The forward stores every chunk-start state (fp32, [B, H, NT, Dv, Dk], and S likewise); the backward kernel walks
the chunks in reverse, recomputes each chunk from its stored start state, and carries dW (and dS). Gradients: q, k,
v, alpha, eta, gamma (theta), the initial weights (and momentum), the initial halo (k, v, gamma of the incoming
state), and the state at the last chunk start (the `resume` state of a sequence that ends inside a chunk).
Window tokens that belong to an earlier chunk (the halo) get their gradient contributions written per chunk and
scattered back by torch (index_add).

Inputs stay in the public layout [B, T, H, D] (no transposes). Tiles are fp32 (fp64 for fp64 inputs), with fp32
accumulation everywhere; dot operands: bf16 on GPU for bf16/fp16 inputs, 3xTF32 on GPU for fp32 inputs, fp32/fp64
under the interpreter (see `atlas_kernels.ops.triton_common.compute_precision`). Requires CUDA tensors, or CPU
tensors with TRITON_INTERPRET=1 set before import. Register pressure is high (one program holds every tile of a
chunk; sm_90 compiles use 255 registers and spill): splitting the state pass from the intra-chunk work
(flash-linear-attention style) is the next speed step.
"""

from __future__ import annotations

import torch
import triton

from atlas_kernels.config import MemoryConfig
from atlas_kernels.ops.memory.state import MemoryState, halo_size
from atlas_kernels.ops.memory.triton.linear_kernels import _linear_bwd_kernel, _linear_fwd_kernel
from atlas_kernels.ops.memory.triton.support import call_state, common_unsupported, incoming_halo, start_call
from atlas_kernels.ops.triton_common import compute_precision, memory_kernel_compile

MAX_VALUE_BLOCK = 32


# ----------------------------------------------------------------------------------------------------------------
# host side
# ----------------------------------------------------------------------------------------------------------------


def _blocks(T_chunk: int, halo: int, K: int, V: int, block_v: int | None, prec: str = "ieee"):
    """Tile sizes: chunk BT, halo BH, key BK (whole key dim), value block BV (programs split Dv).

    BV defaults to 32 (16 for 3xTF32, whose operands take more shared memory). Measured on sm_90 compiles (bf16,
    b = 64, num_stages = 1, which the kernels use: the chunk loop's loads are not worth multi-buffering here):
    every backward variant up to Dk = 128 with halo and momentum needs <= 152 KB of shared memory at BV = 64 and
    <= 127 KB at BV = 32 (the 227 KB limit is exceeded with the default 3 stages), and spills fewer registers at 32.
    """
    BT = max(16, triton.next_power_of_2(T_chunk))
    BH = max(16, triton.next_power_of_2(max(halo, 1)))
    BK = max(16, triton.next_power_of_2(K))
    default_bv = 16 if prec == "tf32x3" else MAX_VALUE_BLOCK
    BV = block_v or min(default_bv, max(16, triton.next_power_of_2(V)))
    return BT, BH, BK, BV


def _num_warps(BT: int, BK: int, BV: int) -> int:
    return 4 if max(BT, BK) <= 32 else 8


def _geometry(k: torch.Tensor, v: torch.Tensor, halo_k: torch.Tensor, chunk: int, block_v: int | None):
    """(B, T, H, K, V, halo, chunks NT, precision (acc_torch, acc, prec), tiles (BT, BH, BK, BV), value blocks NV):
    what the forward and the backward launch derive alike from the inputs."""
    B, T, H, K = k.shape
    V = v.shape[-1]
    halo = halo_k.shape[2]
    acc_torch, acc, prec = compute_precision(k.dtype, k.device)
    BT, BH, BK, BV = _blocks(chunk, halo, K, V, block_v, prec)
    return B, T, H, K, V, halo, triton.cdiv(T, chunk), acc_torch, acc, prec, BT, BH, BK, BV, triton.cdiv(V, BV)


def _state_strides(t: torch.Tensor, K: int) -> torch.Tensor:
    return t if (t.stride(-1) == 1 and t.stride(-2) == K) else t.contiguous()


class LinearMemoryFunction(torch.autograd.Function):
    """Inputs: q, k [B, T, H, Dk]; v [B, T, H, Dv]; alpha, eta, gamma, theta [B, T, H]; W0, S0 [B, H, Dv, Dk];
    halo_k/v/gamma [B, H, halo(, D)]; then the static settings. theta and S0 are read only with momentum.
    Outputs: y [B, T, H, Dv], W_T, W at the last chunk start, S_T, S at the last chunk start ([B, H, Dv, Dk];
    the two S are empty without momentum)."""

    @staticmethod
    def forward(ctx, q, k, v, alpha, eta, gamma, theta, w0, s0, halo_k, halo_v, halo_gamma, settings):
        chunk, l2, decay_first, momentum, gate_eps, block_v = settings
        B, T, H, K, V, halo, NT, acc_torch, acc, prec, BT, BH, BK, BV, NV = _geometry(k, v, halo_k, chunk, block_v)
        w0, s0 = _state_strides(w0, K), _state_strides(s0, K)
        y = torch.empty(B, T, H, V, dtype=v.dtype, device=v.device)
        wt = torch.empty(B, H, V, K, dtype=acc_torch, device=v.device)
        h0 = torch.empty(B, H, NT, V, K, dtype=acc_torch, device=v.device)
        shape_s = (B, H, V, K) if momentum else (0,)
        st = torch.empty(shape_s, dtype=acc_torch, device=v.device)
        hs0 = torch.empty((B, H, NT, V, K) if momentum else (0,), dtype=acc_torch, device=v.device)
        with memory_kernel_compile(k.device):
            _linear_fwd_kernel[(NV, B * H)](
                q, k, v, alpha, eta, gamma, theta, halo_k, halo_v, halo_gamma,
                w0, w0.stride(0), w0.stride(1), s0, s0.stride(0), s0.stride(1),
                y, wt, h0, st, hs0,
                T, H, K, V, halo, chunk, NT, float(gate_eps),
                BT=BT, BH=BH, BK=BK, BV=BV, L2=l2, DECAY_FIRST=decay_first, MOMENTUM=momentum, HAS_HALO=halo > 0,
                ACC=acc, PREC=prec, num_warps=_num_warps(BT, BK, BV), num_stages=1,
            )  # fmt: skip
        ctx.save_for_backward(q, k, v, alpha, eta, gamma, theta, halo_k, halo_v, halo_gamma, h0, hs0)
        ctx.settings = settings
        ctx.state_dtypes = (w0.dtype, s0.dtype)
        sr = hs0[:, :, NT - 1].clone() if momentum else st
        return y, wt, h0[:, :, NT - 1].clone(), st, sr

    @staticmethod
    def backward(ctx, dy, dwt, dwr, dst, dsr):
        q, k, v, alpha, eta, gamma, theta, halo_k, halo_v, halo_gamma, h0, hs0 = ctx.saved_tensors
        chunk, l2, decay_first, momentum, gate_eps, block_v = ctx.settings
        B, T, H, K, V, halo, NT, acc_torch, acc, prec, BT, BH, BK, BV, NV = _geometry(k, v, halo_k, chunk, block_v)
        dev = k.device
        if dy is None:
            dy = torch.zeros(B, T, H, V, dtype=v.dtype, device=dev)
        dy = dy.contiguous()
        dq = torch.empty(NV, B, T, H, K, dtype=acc_torch, device=dev)
        dk = torch.empty(NV, B, T, H, K, dtype=acc_torch, device=dev)
        dv = torch.empty(B, T, H, V, dtype=acc_torch, device=dev)
        dgates = torch.empty(4 if momentum else 3, NV, B, T, H, dtype=acc_torch, device=dev)
        dw0 = torch.empty(B, H, V, K, dtype=acc_torch, device=dev)
        ds0 = torch.empty((B, H, V, K) if momentum else (1,), dtype=acc_torch, device=dev)
        rows = max(halo, 1)  # a one-row placeholder without a halo
        dhalo_k = torch.empty(NV, B, NT, rows, H, K, dtype=acc_torch, device=dev)
        dhalo_v = torch.empty(B, NT, rows, H, V, dtype=acc_torch, device=dev)
        dhalo_gamma = torch.empty(NV, B, NT, rows, H, dtype=acc_torch, device=dev)
        has = [
            g is not None and momentum_ok
            for g, momentum_ok in ((dwt, True), (dwr, True), (dst, momentum), (dsr, momentum))
        ]
        dwt_c, dwr_c, dst_c, dsr_c = (g.contiguous() if h else dw0 for g, h in zip((dwt, dwr, dst, dsr), has))
        with memory_kernel_compile(k.device):
            _linear_bwd_kernel[(NV, B * H)](
                q, k, v, alpha, eta, gamma, theta, halo_k, halo_v, halo_gamma, h0, hs0, dy, dwt_c, dwr_c, dst_c, dsr_c,
                dq, dk, dv, dgates[0], dgates[1], dgates[2], dgates[3] if momentum else dgates[2], dw0, ds0,
                dhalo_k, dhalo_v, dhalo_gamma,
                B, T, H, K, V, halo, chunk, NT, float(gate_eps),
                BT=BT, BH=BH, BK=BK, BV=BV, L2=l2, DECAY_FIRST=decay_first, MOMENTUM=momentum, HAS_HALO=halo > 0,
                HAS_DWT=has[0], HAS_DWR=has[1], HAS_DST=has[2], HAS_DSR=has[3], ACC=acc, PREC=prec,
                num_warps=_num_warps(BT, BK, BV), num_stages=1,
            )  # fmt: skip
        dq, dk, dgates = dq.sum(0), dk.sum(0), dgates.sum(1)
        dhalo = [None, None, None]
        if halo > 0:
            # window tokens of chunk i's halo sit at extended positions i * chunk + r (the extended sequence is
            # the incoming halo followed by the T tokens)
            index = (torch.arange(NT, device=dev)[:, None] * chunk + torch.arange(halo, device=dev)[None, :]).flatten()
            parts = (
                (dk, dhalo_k.sum(0).reshape(B, NT * halo, H, K)),
                (dv, dhalo_v.reshape(B, NT * halo, H, V)),
                (dgates[2], dhalo_gamma.sum(0).reshape(B, NT * halo, H)),
            )
            for slot, (dseq, dhal) in enumerate(parts):
                ext = torch.zeros(B, halo + T, *dseq.shape[2:], dtype=acc_torch, device=dev)
                ext.index_add_(1, index, dhal)
                dseq += ext[:, halo:]
                dhalo[slot] = ext[:, :halo].transpose(1, 2).to(halo_k.dtype if slot < 2 else halo_gamma.dtype)
        w0_dtype, s0_dtype = ctx.state_dtypes
        return (
            dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype),
            dgates[0].to(alpha.dtype), dgates[1].to(eta.dtype), dgates[2].to(gamma.dtype),
            dgates[3].to(theta.dtype) if momentum else None,
            dw0.to(w0_dtype), ds0.to(s0_dtype) if momentum else None,
            *dhalo, None,
        )  # fmt: skip


# ----------------------------------------------------------------------------------------------------------------
# the op
# ----------------------------------------------------------------------------------------------------------------


def triton_unsupported(cfg: MemoryConfig, q: torch.Tensor | None = None, v: torch.Tensor | None = None):
    """None when the Triton linear-memory op covers this call, else (field, reason) of the first unsupported
    setting (cfg fields by name; "q" for the input)."""
    return common_unsupported(cfg, q, memory=("linear",), op="the Triton op")


def memory_chunk_triton(q, k, v, gates, params, cfg: MemoryConfig, state: MemoryState | None = None, block_v=None):
    """The chunkwise linear memory in Triton. Arguments and returns as `atlas_kernels.memory_chunk`.

    States interoperate with the torch op both ways (same `MemoryState` fields and dtypes); a state with pending
    tokens (a sequence that ended inside a chunk) is resumed exactly like the torch op does (its pending tokens
    are re-run from the chunk start), and a call that ends inside a chunk returns such a state.
    `block_v` overrides the value-dim block of a program (tests; default min(64, next power of 2 of Dv)).
    """
    q, k, v, x, state, n_pending = start_call(q, k, v, gates, params, cfg, state, triton_unsupported(cfg, q))
    B, H, T, K, V = x.shape
    acc_torch = compute_precision(k.dtype)[0]
    halo = halo_size(cfg)
    momentum = cfg.optimizer == "momentum"
    if state is None:
        w0 = params["W"].unsqueeze(0).expand(B, *params["W"].shape)
        s0 = w0.new_zeros(B, H, V, K) if momentum else w0
    else:
        if state.kernel_keys is not None or state.explicit_exp or (state.momentum is None) == momentum:
            raise ValueError(f"state: not a state of linear memory with optimizer={cfg.optimizer!r}")
        w0 = state.weights["W"]
        s0 = state.momentum["W"] if momentum else w0
    halo_k, halo_v, halo_gamma = incoming = incoming_halo(state, k, V, halo, acc_torch)
    names = ("alpha", "eta", "gamma", "theta")
    alpha, eta, gamma, theta = (getattr(x, n).transpose(1, 2).contiguous() for n in names)
    qc, kc, vc = q.contiguous(), k.contiguous(), v.contiguous()
    if T == 0:
        y = v.new_zeros(B, 0, H, V)
        wt, wr, st, sr = w0.to(acc_torch), None, s0.to(acc_torch), None
    else:
        settings = (
            cfg.chunk_size,
            cfg.bias == "l2",
            cfg.decay_first and cfg.bias == "l2",
            momentum,
            cfg.gate_eps,
            block_v,
        )
        y, wt, wr, st, sr = LinearMemoryFunction.apply(
            qc, kc, vc, alpha, eta, gamma, theta, w0, s0, halo_k, halo_v, halo_gamma, settings
        )

    def groups_of(tensors):
        W, S = tensors
        return {"W": W}, ({"W": S} if momentum else None)

    seqs = {"k": kc, "v": vc, "alpha": alpha, "eta": eta, "theta": theta, "gamma": gamma}
    new_state = call_state(groups_of, (wt, st), (wr, sr), seqs, incoming, halo, cfg.chunk_size, acc_torch)
    return y[:, n_pending:], new_state
