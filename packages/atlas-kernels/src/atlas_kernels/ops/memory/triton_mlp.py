"""Chunkwise MLP memory in Triton: forward kernel, backward by per-chunk recomputation (CHUNKWISE.md, MLP memory).

Supported: memory="mlp" (f(x) = x + g(W1 s(W2 x)), g = the memory LayerNorm when cfg.memory_norm, residual on or
off, s = gelu | silu), feature_map="identity", optimizer "gd" | "momentum", bias l2 | dot, a finite window c >= 1
(c - 1 <= 64) with gamma gates and the carried halo, alpha (and theta) decay as log-space cumulative products
clamped at cfg.gate_eps, chunk size b <= 128, any T, Dk <= 256, any hidden width (blocked). Everything else
(gated_mlp, muon, poly / exp features, window="global") is refused with a ValueError naming the field; the api
falls back to the torch op under backend="auto". This is the Titans / OmegaNet family of configurations.

Forward kernel: one program per (batch, head), chunks in sequence. Per chunk of L <= b tokens, the window tile
holds the h = c - 1 halo tokens followed by the chunk (read from the sequence, or from the incoming state's halo
before the sequence start), so window token w covers position s - h + w and chunk token n sits at w = h + n:
    G[n, w] = gamma_w for n <= w <= n + h;   C = LA diag(eta) G (gd) | (LA LT) diag(eta) G (momentum)
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

Backward (first version, documented as such in the issue): PyTorch, not Triton. It walks the chunks in reverse,
rebuilds each chunk from its stored start state with the torch chunk math (`chunk._chunk_step`, the very code
of the torch op) under autograd, and backpropagates the output gradient of that chunk plus the carried state
gradient. Only chunk-start states are kept between forward and backward (no per-token weights, no per-chunk
activations), so memory is that of the checkpointed torch op; a hand-written Triton backward is the next step.

Tiles are fp32 (fp64 for fp64 inputs) with fp32 accumulation; dot operands follow `triton_common.compute_precision`
(bf16 on GPU for bf16/fp16 inputs, 3xTF32 for fp32, IEEE under the interpreter). The window tile is padded to a
power of two >= b + c - 1 (b = 64, c = 4 -> 128 rows): simple and correct, not yet fast.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from atlas_kernels.config import MemoryConfig
from atlas_kernels.ops.memory.chunk import _chunk_step
from atlas_kernels.ops.memory.inputs import OpInputs, prepare_inputs
from atlas_kernels.ops.memory.state import MemoryState, resume_inputs
from atlas_kernels.ops.memory.triton_support import common_unsupported, window_tail
from atlas_kernels.ops.triton_common import compute_precision, dot

HIDDEN_BLOCK = 32
# Largest window x key tile (BW * BK) per dtype that fits the 227 KB of shared memory of an sm_90 block, from
# offline sm_90 compiles of the momentum variant (num_warps 8, num_stages 1): bf16 operands 147 KB at 128 x 128;
# 3xTF32 (fp32 inputs, hidden block 16) 139 KB at 64 x 64 but 229-262 KB at 128 x 64; fp64 not measured (tests).
GPU_TILE_LIMIT = {torch.bfloat16: 128 * 128, torch.float16: 128 * 128, torch.float32: 64 * 64, torch.float64: 32 * 32}


@triton.jit
def _act(a, SILU: tl.constexpr):
    """(s(a), s'(a)) for gelu (exact, erf) or silu."""
    if SILU:
        sg = tl.sigmoid(a)
        return a * sg, sg * (1.0 + a * (1.0 - sg))
    else:
        cdf = 0.5 * (1.0 + tl.erf(a * 0.7071067811865476))
        return a * cdf, cdf + a * tl.exp(-0.5 * a * a) * 0.3989422804014327


@triton.jit
def _layer_norm(b, w, bias, vmask, V, eps):
    """Row-wise LayerNorm of b [N, BV] over its V valid columns: (output, normalised rows, 1 / std)."""
    mu = tl.sum(b, axis=1) / V  # padded columns of b are 0
    centred = tl.where(vmask[None, :], b - mu[:, None], 0.0)
    inv = 1.0 / tl.sqrt(tl.sum(centred * centred, axis=1) / V + eps)
    yh = centred * inv[:, None]
    return yh * w[None, :] + bias[None, :], yh, inv


@triton.jit
def _mlp_fwd_kernel(
    q_ptr, k_ptr, v_ptr, a_ptr, e_ptr, g_ptr, th_ptr, hk_ptr, hv_ptr, hg_ptr, lnw_ptr, lnb_ptr,
    w1_ptr, w2_ptr, s1_ptr, s2_ptr, y_ptr,
    T, H, K, V, DH, NH, CHUNK, NT, gate_eps, norm_eps,
    BT: tl.constexpr, BW: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, BD: tl.constexpr,
    L2: tl.constexpr, MOMENTUM: tl.constexpr, NORM: tl.constexpr, RESIDUAL: tl.constexpr, SILU: tl.constexpr,
    ACC: tl.constexpr, PREC: tl.constexpr,
):  # fmt: skip
    i_bh = tl.program_id(0)
    i_b = i_bh // H
    i_h = i_bh % H
    rows = tl.arange(0, BT)
    rw = tl.arange(0, BW)
    rk = tl.arange(0, BK)
    rv = tl.arange(0, BV)
    rd = tl.arange(0, BD)
    kmask = rk < K
    vmask = rv < V
    if NORM:
        lnw = tl.load(lnw_ptr + i_h * V + rv, mask=vmask, other=0.0).to(ACC)
        lnb = tl.load(lnb_ptr + i_h * V + rv, mask=vmask, other=0.0).to(ACC)
    lower = rows[None, :] <= rows[:, None]
    band = (rw[None, :] >= rows[:, None]) & (rw[None, :] <= rows[:, None] + NH)  # token n's window
    for i_t in range(NT):
        s = i_t * CHUNK
        L = tl.minimum(CHUNK, T - s)
        valid = rows < L
        last = rows == L - 1
        tok = (i_b * T + s + rows).to(tl.int64) * H + i_h
        q = tl.load(q_ptr + tok[:, None] * K + rk[None, :], mask=valid[:, None] & kmask[None, :], other=0.0).to(ACC)
        alpha = tl.load(a_ptr + tok, mask=valid, other=1.0).to(ACC)
        eta = tl.load(e_ptr + tok, mask=valid, other=0.0).to(ACC)
        # window: halo + chunk; positions before the sequence start come from the incoming state's halo
        wpos = s - NH + rw
        in_seq = (rw < NH + L) & (wpos >= 0)
        in_state = (rw < NH) & (wpos < 0)
        wtok = (i_b * T + wpos).to(tl.int64) * H + i_h
        sidx = ((i_b * H + i_h) * NH + s + rw).to(tl.int64)
        mk_seq = in_seq[:, None] & kmask[None, :]
        mk_state = in_state[:, None] & kmask[None, :]
        mv_seq = in_seq[:, None] & vmask[None, :]
        mv_state = in_state[:, None] & vmask[None, :]
        wk = tl.load(k_ptr + wtok[:, None] * K + rk[None, :], mask=mk_seq, other=0.0).to(ACC)
        wk += tl.load(hk_ptr + sidx[:, None] * K + rk[None, :], mask=mk_state, other=0.0).to(ACC)
        wv = tl.load(v_ptr + wtok[:, None] * V + rv[None, :], mask=mv_seq, other=0.0).to(ACC)
        wv += tl.load(hv_ptr + sidx[:, None] * V + rv[None, :], mask=mv_state, other=0.0).to(ACC)
        wg = tl.load(g_ptr + wtok, mask=in_seq, other=0.0).to(ACC)
        wg += tl.load(hg_ptr + sidx, mask=in_state, other=0.0).to(ACC)

        # coefficients: C[j, w], its last row cl (end state), r (momentum end state), A, P
        logs_a = tl.log(tl.maximum(alpha, gate_eps))
        la = tl.cumsum(logs_a, axis=0)
        A = tl.exp(la)
        A_L = tl.exp(tl.sum(logs_a, axis=0))  # padded rows have alpha = 1
        LA = tl.exp(tl.where(lower, la[:, None] - la[None, :], float("-inf")))
        G = tl.where(band, wg[None, :], 0.0)
        if MOMENTUM:
            theta = tl.load(th_ptr + tok, mask=valid, other=1.0).to(ACC)
            logs_t = tl.log(tl.maximum(theta, gate_eps))
            lt = tl.cumsum(logs_t, axis=0)
            lt_last = tl.sum(logs_t, axis=0)
            Th = tl.exp(lt)
            Th_L = tl.exp(lt_last)
            LT = tl.exp(tl.where(lower, lt[:, None] - lt[None, :], float("-inf")))
            Meta = dot(LA, LT, PREC) * eta[None, :]
            P = tl.sum(LA * Th[None, :], axis=1)
            P_L = tl.sum(tl.where(last, P, 0.0), axis=0)
            r = tl.sum((tl.exp(lt_last - lt) * eta)[:, None] * G, axis=0)
        else:
            Meta = LA * eta[None, :]
        C = dot(Meta, G, PREC)
        cl = tl.sum(tl.where(last[:, None], C, 0.0), axis=0)

        base1 = (i_bh.to(tl.int64) * (NT + 1) + i_t) * V * DH
        base2 = (i_bh.to(tl.int64) * (NT + 1) + i_t) * DH * K
        # pass 1: the branch at W_0 over the window, then the backprop signals e, eb
        b0 = tl.zeros((BW, BV), dtype=ACC)
        for d0 in range(0, DH, BD):
            rdd = d0 + rd
            dmask = rdd < DH
            off2 = rdd[:, None] * K + rk[None, :]
            m2 = dmask[:, None] & kmask[None, :]
            off1 = rv[:, None] * DH + rdd[None, :]
            m1 = vmask[:, None] & dmask[None, :]
            W2b = tl.load(w2_ptr + base2 + off2, mask=m2, other=0.0)
            W1b = tl.load(w1_ptr + base1 + off1, mask=m1, other=0.0)
            h0, _ = _act(dot(wk, tl.trans(W2b), PREC), SILU)
            b0 += dot(h0, tl.trans(W1b), PREC)
        if NORM:
            branch, yh0, inv0 = _layer_norm(b0, lnw, lnb, vmask, V, norm_eps)
        else:
            branch = b0
        if RESIDUAL:
            f0 = wk + branch
        else:
            f0 = branch
        if L2:
            e = f0 - wv
        else:
            e = -wv
        if NORM:
            dy = e * lnw[None, :]
            eb = inv0[:, None] * (
                dy - (tl.sum(dy, axis=1) / V)[:, None] - yh0 * (tl.sum(dy * yh0, axis=1) / V)[:, None]
            )
            eb = tl.where(vmask[None, :], eb, 0.0)
        else:
            eb = e

        # pass 2: dual-form retrieval and the end-of-chunk state, one hidden block at a time
        CK = C * dot(q, tl.trans(wk), PREC)
        ebl = cl[:, None] * eb
        if MOMENTUM:
            ebr = r[:, None] * eb
        yb = tl.zeros((BT, BV), dtype=ACC)
        scores = tl.zeros((BT, BW), dtype=ACC)
        for d0 in range(0, DH, BD):
            rdd = d0 + rd
            dmask = rdd < DH
            off2 = rdd[:, None] * K + rk[None, :]
            m2 = dmask[:, None] & kmask[None, :]
            off1 = rv[:, None] * DH + rdd[None, :]
            m1 = vmask[:, None] & dmask[None, :]
            W2b = tl.load(w2_ptr + base2 + off2, mask=m2, other=0.0)
            W1b = tl.load(w1_ptr + base1 + off1, mask=m1, other=0.0)
            h0, dact = _act(dot(wk, tl.trans(W2b), PREC), SILU)
            ds = dot(eb, W1b, PREC) * dact
            a = A[:, None] * dot(q, tl.trans(W2b), PREC) - dot(CK, ds, PREC)
            if MOMENTUM:
                S2b = tl.load(s2_ptr + base2 + off2, mask=m2, other=0.0)
                S1b = tl.load(s1_ptr + base1 + off1, mask=m1, other=0.0)
                a -= P[:, None] * dot(q, tl.trans(S2b), PREC)
            hq, _ = _act(a, SILU)
            yb += A[:, None] * dot(hq, tl.trans(W1b), PREC)
            scores += dot(hq, tl.trans(h0), PREC)
            W2n = A_L * W2b - dot(tl.trans(cl[:, None] * ds), wk, PREC)
            W1n = A_L * W1b - dot(tl.trans(ebl), h0, PREC)
            if MOMENTUM:
                yb -= P[:, None] * dot(hq, tl.trans(S1b), PREC)
                W2n -= P_L * S2b
                W1n -= P_L * S1b
                S2n = Th_L * S2b + dot(tl.trans(r[:, None] * ds), wk, PREC)
                S1n = Th_L * S1b + dot(tl.trans(ebr), h0, PREC)
                tl.store(s2_ptr + base2 + DH * K + off2, S2n, mask=m2)
                tl.store(s1_ptr + base1 + V * DH + off1, S1n, mask=m1)
            tl.store(w2_ptr + base2 + DH * K + off2, W2n, mask=m2)
            tl.store(w1_ptr + base1 + V * DH + off1, W1n, mask=m1)
        yb -= dot(C * scores, eb, PREC)
        if NORM:
            yb, _, _ = _layer_norm(yb, lnw, lnb, vmask, V, norm_eps)
        if RESIDUAL:
            yb += q
        ymask = valid[:, None] & vmask[None, :]
        tl.store(y_ptr + tok[:, None] * V + rv[None, :], yb.to(y_ptr.dtype.element_ty), mask=ymask)
        # the next chunk reads the state this one wrote, through other threads of the program
        tl.debug_barrier()


def _blocks(chunk: int, NH: int, K: int, V: int, DH: int, block_h: int | None, prec: str = "ieee"):
    p2 = lambda n: max(16, triton.next_power_of_2(max(n, 1)))  # noqa: E731  (tl.dot needs dims >= 16)
    # 3xTF32 operands take twice the shared memory of bf16 ones: a narrower hidden block keeps them in 227 KB
    BD = block_h or min(16 if prec == "tf32x3" else HIDDEN_BLOCK, p2(DH))
    return p2(chunk), p2(chunk + NH), p2(K), p2(V), BD


class MLPMemoryFunction(torch.autograd.Function):
    """Inputs: q, k [B, T, H, Dk]; v [B, T, H, Dv]; alpha, eta, gamma, theta [B, T, H]; W1 [B, H, Dv, Dh],
    W2 [B, H, Dh, Dk], S1, S2 likewise (momentum only); ln_weight, ln_bias [H, Dv] (memory_norm only);
    halo_k/v/gamma [B, H, h(, D)]; cfg; block_h. Outputs: y [B, T, H, Dv], then W1, W2, S1, S2 after the last
    token, then the same at the last chunk start (the S are empty without momentum)."""

    @staticmethod
    def forward(ctx, q, k, v, alpha, eta, gamma, theta, w1, w2, s1, s2, lnw, lnb, hk, hv, hg, cfg, block_h):
        B, T, H, K = k.shape
        V, DH, NH = v.shape[-1], w1.shape[-1], hk.shape[2]
        NT = triton.cdiv(T, cfg.chunk_size)
        momentum = cfg.optimizer == "momentum"
        acc_torch, acc, prec = compute_precision(k.dtype, k.device)
        BT, BW, BK, BV, BD = _blocks(cfg.chunk_size, NH, K, V, DH, block_h, prec)
        dev = k.device
        w1buf = torch.empty(B, H, NT + 1, V, DH, dtype=acc_torch, device=dev)
        w2buf = torch.empty(B, H, NT + 1, DH, K, dtype=acc_torch, device=dev)
        w1buf[:, :, 0] = w1
        w2buf[:, :, 0] = w2
        if momentum:
            s1buf, s2buf = torch.empty_like(w1buf), torch.empty_like(w2buf)
            s1buf[:, :, 0] = s1
            s2buf[:, :, 0] = s2
        else:
            s1buf = s2buf = w1buf.new_zeros(0)
        y = torch.empty(B, T, H, V, dtype=v.dtype, device=dev)
        _mlp_fwd_kernel[(B * H,)](
            q, k, v, alpha, eta, gamma, theta, hk, hv, hg, lnw, lnb,
            w1buf, w2buf, s1buf if momentum else w1buf, s2buf if momentum else w2buf, y,
            T, H, K, V, DH, NH, cfg.chunk_size, NT, float(cfg.gate_eps), float(cfg.norm_eps),
            BT=BT, BW=BW, BK=BK, BV=BV, BD=BD, L2=cfg.bias == "l2", MOMENTUM=momentum, NORM=cfg.memory_norm,
            RESIDUAL=cfg.residual, SILU=cfg.activation == "silu", ACC=acc, PREC=prec,
            num_warps=4 if max(BW, BK) <= 32 else 8, num_stages=1,
        )  # fmt: skip
        ctx.save_for_backward(q, k, v, alpha, eta, gamma, theta, lnw, lnb, hk, hv, hg, w1buf, w2buf, s1buf, s2buf)
        ctx.cfg = cfg
        ctx.state_dtypes = (w1.dtype, w2.dtype, s1.dtype, s2.dtype)

        def slot(i):  # copies: views would keep the whole buffer alive with the returned state
            picked = [w1buf[:, :, i], w2buf[:, :, i]] + ([s1buf[:, :, i], s2buf[:, :, i]] if momentum else [s1buf] * 2)
            return [t.clone() for t in picked]

        return (y, *slot(NT), *slot(NT - 1))

    @staticmethod
    def backward(ctx, dy, *dstates):
        q, k, v, alpha, eta, gamma, theta, lnw, lnb, hk, hv, hg, w1buf, w2buf, s1buf, s2buf = ctx.saved_tensors
        cfg = ctx.cfg
        momentum = cfg.optimizer == "momentum"
        names = ("W1", "W2", "S1", "S2") if momentum else ("W1", "W2")
        n = len(names)
        d_end = [dstates[i] for i in range(n)]
        d_resume = [dstates[4 + i] for i in range(n)]
        B, T, H, K = k.shape
        NH, b = hk.shape[2], cfg.chunk_size
        NT = triton.cdiv(T, b)
        acc = w1buf.dtype
        heads = lambda t: t.transpose(1, 2).to(acc)  # noqa: E731  [B, T, H, ...] -> [B, H, T, ...]
        qh, ah, eh, th = heads(q), heads(alpha), heads(eta), heads(theta)
        ext = [torch.cat([hk.to(acc), heads(k)], 2), torch.cat([hv.to(acc), heads(v)], 2)]
        ext.append(torch.cat([hg.to(acc), heads(gamma)], 2))
        dext = [torch.zeros_like(t) for t in ext]
        dq, dgates = torch.zeros_like(qh), [torch.zeros_like(ah) for _ in range(3)]  # alpha, eta, theta
        norm = cfg.memory_norm
        ln = {"ln_weight": lnw.to(acc).detach().requires_grad_(), "ln_bias": lnb.to(acc).detach().requires_grad_()}
        dln = {name: torch.zeros_like(t) for name, t in ln.items()}
        bufs = (w1buf, w2buf, s1buf, s2buf)[:n]
        d_state = [g.to(acc) if g is not None else torch.zeros_like(buf[:, :, 0]) for g, buf in zip(d_end, bufs)]
        dy = qh.new_zeros(*qh.shape[:3], w1buf.shape[-2]) if dy is None else heads(dy)
        for i in reversed(range(NT)):
            s, L = i * b, min(b, T - i * b)
            leaf = lambda t: t.detach().requires_grad_()  # noqa: E731
            halo = [leaf(t[:, :, s : s + NH]) for t in ext]
            own = [leaf(t[:, :, s + NH : s + NH + L]) for t in ext]
            gl = [leaf(t[:, :, s : s + L]) for t in (ah, eh, th)]
            ql = leaf(qh[:, :, s : s + L])
            start = [leaf(buf[:, :, i]) for buf in bufs]
            state = MemoryState(
                weights={"W1": start[0], "W2": start[1]},
                momentum={"W1": start[2], "W2": start[3]} if momentum else None,
                halo_k=halo[0], halo_v=halo[1], halo_gamma=halo[2],
            )  # fmt: skip
            xc = OpInputs(q=ql, k=own[0], v=own[1], alpha=gl[0], eta=gl[1], theta=gl[2], gamma=own[2])
            with torch.enable_grad():
                yc, new = _chunk_step(xc, state, ln if norm else {}, cfg)
            outs = [yc, new.weights["W1"], new.weights["W2"]]
            if momentum:
                outs += [new.momentum["W1"], new.momentum["W2"]]
            inputs = [ql, *own, *gl, *halo, *start] + (list(ln.values()) if norm else [])
            grads = torch.autograd.grad(outs, inputs, [dy[:, :, s : s + L], *d_state], allow_unused=True)
            grads = [torch.zeros_like(t) if g is None else g for g, t in zip(grads, inputs)]
            dq[:, :, s : s + L] = grads[0]
            for j in range(3):
                dext[j][:, :, s + NH : s + NH + L] += grads[1 + j]
                dgates[j][:, :, s : s + L] = grads[4 + j]
                dext[j][:, :, s : s + NH] += grads[7 + j]
            d_state = grads[10 : 10 + n]
            if i == NT - 1:
                d_state = [ds if g is None else ds + g.to(acc) for ds, g in zip(d_state, d_resume)]
            if norm:
                dln["ln_weight"] += grads[10 + n]
                dln["ln_bias"] += grads[11 + n]
        public = lambda t, like: t.transpose(1, 2).to(like.dtype)  # noqa: E731
        dw = [ds.to(dt) for ds, dt in zip(d_state, ctx.state_dtypes)] + [None] * (4 - n)
        dnorm = (dln["ln_weight"].to(lnw.dtype), dln["ln_bias"].to(lnb.dtype)) if norm else (None, None)
        return (
            public(dq, q), public(dext[0][:, :, NH:], k), public(dext[1][:, :, NH:], v),
            public(dgates[0], alpha), public(dgates[1], eta), public(dext[2][:, :, NH:], gamma),
            public(dgates[2], theta) if momentum else None,
            *dw, *dnorm,
            dext[0][:, :, :NH].to(hk.dtype), dext[1][:, :, :NH].to(hv.dtype), dext[2][:, :, :NH].to(hg.dtype),
            None, None,
        )  # fmt: skip


def triton_unsupported(cfg: MemoryConfig, q: torch.Tensor | None = None):
    """None when the Triton MLP-memory op covers this call, else (field, reason) of the first unsupported setting."""
    common = common_unsupported(cfg, q, memory="mlp", op="the Triton MLP op")
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
    _, BW, BK, _, _ = _blocks(cfg.chunk_size, cfg.window - 1, key_dim, key_dim, 16, None)
    return GPU_TILE_LIMIT.get(dtype, 0) >= BW * BK


def memory_chunk_triton_mlp(q, k, v, gates, params, cfg: MemoryConfig, state: MemoryState | None = None, block_h=None):
    """The chunkwise MLP memory in Triton. Arguments and returns as `atlas_kernels.memory_chunk`.

    States interoperate with the torch op both ways (same `MemoryState` fields and dtypes), pending tokens of a
    sequence that ended inside a chunk included. `block_h` overrides the hidden block (tests; default 32).
    """
    unsupported = triton_unsupported(cfg, q)
    if unsupported is not None:
        field, reason = unsupported
        raise ValueError(f"{field}: not supported by the Triton backend: {reason}")
    q, k, v, gates, state, n_pending = resume_inputs(q, k, v, gates, state)
    x = prepare_inputs(q, k, v, gates, params, cfg)  # validation (names the offending argument)
    B, H, T, K, V = x.shape
    acc_torch = compute_precision(k.dtype)[0]
    NH = cfg.window - 1
    momentum = cfg.optimizer == "momentum"
    if state is None:
        w1 = params["W1"].unsqueeze(0).expand(B, *params["W1"].shape)
        w2 = params["W2"].unsqueeze(0).expand(B, *params["W2"].shape)
        s1, s2 = (w1.new_zeros(w1.shape), w2.new_zeros(w2.shape)) if momentum else (w1, w2)
        hk = k.new_zeros(B, H, NH, K, dtype=acc_torch)
        hv = k.new_zeros(B, H, NH, V, dtype=acc_torch)
        hg = k.new_zeros(B, H, NH, dtype=acc_torch)
    else:
        if state.kernel_keys is not None or state.explicit_exp or (state.momentum is None) == momentum:
            raise ValueError(f"state: not a state of MLP memory with optimizer={cfg.optimizer!r}")
        if set(state.weights) != {"W1", "W2"}:
            raise ValueError(f"state: weights {sorted(state.weights)}, expected W1, W2 (memory='mlp')")
        w1, w2 = state.weights["W1"], state.weights["W2"]
        s1, s2 = (state.momentum["W1"], state.momentum["W2"]) if momentum else (w1, w2)
        hk, hv, hg = state.halo_k, state.halo_v, state.halo_gamma
        if hk.shape[2] != NH:
            raise ValueError(f"state: halo of {hk.shape[2]} tokens, expected window - 1 = {NH}")
    hk, hv, hg = hk.contiguous(), hv.contiguous(), hg.contiguous()
    if cfg.memory_norm:
        lnw, lnb = params["ln_weight"].contiguous(), params["ln_bias"].contiguous()
    else:
        lnw = lnb = k.new_zeros(1)
    alpha, eta, gamma, theta = (getattr(x, n).transpose(1, 2).contiguous() for n in ("alpha", "eta", "gamma", "theta"))
    qc, kc, vc = q.contiguous(), k.contiguous(), v.contiguous()
    if T == 0:
        y = v.new_zeros(B, 0, H, V)
        end, resume = [w1.to(acc_torch), w2.to(acc_torch), s1.to(acc_torch), s2.to(acc_torch)], None
    else:
        out = MLPMemoryFunction.apply(qc, kc, vc, alpha, eta, gamma, theta, w1, w2, s1, s2, lnw, lnb, hk, hv, hg, cfg,
                                      block_h)  # fmt: skip
        y, end, resume = out[0], list(out[1:5]), list(out[5:9])

    def _state(at, weights):
        return MemoryState(
            weights={"W1": weights[0], "W2": weights[1]},
            momentum={"W1": weights[2], "W2": weights[3]} if momentum else None,
            halo_k=window_tail(kc, hk, at, NH).to(acc_torch),
            halo_v=window_tail(vc, hv, at, NH).to(acc_torch),
            halo_gamma=window_tail(gamma, hg, at, NH).to(acc_torch),
        )

    new_state = _state(T, end)
    tail = T % cfg.chunk_size
    if tail:
        start = T - tail
        new_state.resume = _state(start, resume)
        pend = {"k": kc, "v": vc, "alpha": alpha, "eta": eta, "theta": theta, "gamma": gamma}
        new_state.pending = {n: t[:, start:].to(acc_torch) for n, t in pend.items()}
    return y[:, n_pending:], new_state
