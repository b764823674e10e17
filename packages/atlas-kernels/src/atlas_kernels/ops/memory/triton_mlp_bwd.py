"""Backward of the chunkwise MLP memory in Triton: one program per (batch, head) walks the chunks in reverse and
recomputes each from its stored start state (no per-token weights, no stored activations).

Per chunk (notation of `triton_mlp.py`; dX is dLoss/dX), four passes over the hidden blocks:
    1. b0 = W1 s(W2 k_w) -> e, eb (`_signal`, as in the forward)
    2. retrieval again (a_j, h_j, scores, y_j); the end-state gradients meet h0: X1 = h0 dW1n^T, Y1 = h0 dS1n^T
       -> dyb (LN backprop of dy), dC = -scores * (dyb eb^T), dscores = -C * (dyb eb^T), first terms of deb
    3. da = (A dyb W1 - P dyb S1 + dscores h0) * s'(a) -> dq, dA, dP, dCK = -da ds^T,
       dds = -CK^T da - cl (k dW2n^T) + r (k dS2n^T), deb += (dds s'(a0)) W1^T, the start-state gradients
       dW = A_L dW_n + ... (W1 still lacks db0^T h0, W2 lacks da0^T k), and the part of da0 that deb does not
       change goes to a per-program scratch [BW, Dh]
    then eb = LNback(b0, e) is differentiated (second order in the memory LayerNorm) -> de, db0; dv = -de
    4. dh0 = db0 W1 -> da0 = scratch + dh0 s'(a0) -> dk, and the rest of dW1, dW2.
The coefficient gradients (dC with the end row dcl folded in, dA, dP, dr, dTh_L) are written per chunk; the gates'
gradients follow from them in PyTorch, by autograd through `coefficients.py` (the torch op's own coefficient
code) batched over all chunks, O(T b (b + c)) work. Window tokens overlap between chunks (the halo), so dk and dv
accumulate into [B, H, h + T, ...] buffers, the first h rows being the incoming halo. The state gradients flow
between chunks through two slots [B, H, 2, ...] (end of this chunk / start of this chunk).
gated_mlp (h0 = s(a0) * g0, g0 = W3 k): the signals are u2 = dh s'(a0) g0 (W2) and u3 = dh s(a0) (W3), the gate
has its own retrieval layer, and pass 3 leaves the known part of dl/dg0 in a second scratch. decay_target="init":
every A W_0 of the retrieval and the end state carries (1 - A) W_init; W_init's gradient accumulates per (batch,
head) in pass 3 and is summed over the batch on the host.
Derivation checked against autograd in float64 for every (gelu|silu, norm, residual, l2|dot, gd|momentum).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from atlas_kernels.config import MemoryConfig
from atlas_kernels.ops.memory.coefficients import (
    chunk_decays,
    momentum_end_coefficients,
    update_coefficients,
    window_gates,
)
from atlas_kernels.ops.memory.triton_mlp_kernels import (
    _act,
    _coefficients,
    _first_layer,
    _hidden_block,
    _layer_norm,
    _ln_bwd,
    _ln_params,
    _load_window,
    _retrieval_layer,
    _signal,
)
from atlas_kernels.ops.triton_common import dot, memory_kernel_compile


@triton.jit
def _mlp_bwd_kernel(
    q_ptr, k_ptr, v_ptr, a_ptr, e_ptr, g_ptr, th_ptr, hk_ptr, hv_ptr, hg_ptr, lnw_ptr, lnb_ptr,
    w1_ptr, w2_ptr, w3_ptr, s1_ptr, s2_ptr, s3_ptr, wi1_ptr, wi2_ptr, wi3_ptr, dy_ptr,
    gw1_ptr, gw2_ptr, gw3_ptr, gs1_ptr, gs2_ptr, gs3_ptr, rw1_ptr, rw2_ptr, rw3_ptr, rs1_ptr, rs2_ptr, rs3_ptr,
    gi1_ptr, gi2_ptr, gi3_ptr,
    dq_ptr, dk_ptr, dv_ptr, dc_ptr, da_ptr, dp_ptr, dr_ptr, dth_ptr, dlnw_ptr, dlnb_ptr, scr_ptr, scg_ptr,
    T, H, K, V, DH, NH, CHUNK, NT, gate_eps, norm_eps,
    BT: tl.constexpr, BW: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, BD: tl.constexpr,
    L2: tl.constexpr, MOMENTUM: tl.constexpr, NORM: tl.constexpr, RESIDUAL: tl.constexpr, SILU: tl.constexpr,
    GATED: tl.constexpr, INIT: tl.constexpr, ACC: tl.constexpr, PREC: tl.constexpr,
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
    lnw, lnb = _ln_params(lnw_ptr, lnb_ptr, i_h, V, rv, NORM, ACC)
    dlnw = tl.zeros((BV,), dtype=ACC)
    dlnb = tl.zeros((BV,), dtype=ACC)
    scr = scr_ptr + i_bh.to(tl.int64) * BW * DH  # per program: the part of dl/da0 (and dl/dgate) pass 3 knows
    scg = scg_ptr + i_bh.to(tl.int64) * BW * DH
    rbase1 = i_bh.to(tl.int64) * V * DH  # [B, H, ...] tensors: resume gradients, W_init gradients
    rbase2 = i_bh.to(tl.int64) * DH * K
    ibase1 = i_h.to(tl.int64) * V * DH  # W_init [H, ...]
    ibase2 = i_h.to(tl.int64) * DH * K
    for i_r in range(NT):
        i_t = NT - 1 - i_r
        first = i_r == 0  # the last chunk: its start state was also returned (resume), add that gradient
        s = i_t * CHUNK
        L = tl.minimum(CHUNK, T - s)
        valid = rows < L
        last = rows == L - 1
        tok = (i_b * T + s + rows).to(tl.int64) * H + i_h
        qmask = valid[:, None] & kmask[None, :]
        q = tl.load(q_ptr + tok[:, None] * K + rk[None, :], mask=qmask, other=0.0).to(ACC)
        alpha = tl.load(a_ptr + tok, mask=valid, other=1.0).to(ACC)
        eta = tl.load(e_ptr + tok, mask=valid, other=0.0).to(ACC)
        theta = alpha
        if MOMENTUM:
            theta = tl.load(th_ptr + tok, mask=valid, other=1.0).to(ACC)
        wk, wv, wg = _load_window(k_ptr, v_ptr, g_ptr, hk_ptr, hv_ptr, hg_ptr, i_b, i_h, s, L, T, H, K, V, NH,
                                  rw, rk, rv, ACC)  # fmt: skip
        C, cl, A, A_L, P, P_L, r, Th_L = _coefficients(alpha, eta, theta, wg, rows, rw, L, NH, gate_eps, MOMENTUM, PREC)
        base1 = (i_bh.to(tl.int64) * (NT + 1) + i_t) * V * DH
        base2 = (i_bh.to(tl.int64) * (NT + 1) + i_t) * DH * K
        g_end = i_r % 2
        gend1 = (i_bh.to(tl.int64) * 2 + g_end) * V * DH
        gend2 = (i_bh.to(tl.int64) * 2 + g_end) * DH * K
        gst1 = (i_bh.to(tl.int64) * 2 + 1 - g_end) * V * DH
        gst2 = (i_bh.to(tl.int64) * 2 + 1 - g_end) * DH * K

        # pass 1
        eb, e, yh0, inv0 = _signal(wk, wv, w1_ptr, w2_ptr, w3_ptr, base1, base2, lnw, lnb, K, V, DH, norm_eps,
                                   rk, rv, rd, BW, BV, BD, L2, NORM, RESIDUAL, SILU, GATED, ACC, PREC)  # fmt: skip
        QK = dot(q, tl.trans(wk), PREC)
        CK = C * QK

        # pass 2: the retrieval again, and the end-state gradients against h0
        yb = tl.zeros((BT, BV), dtype=ACC)
        scores = tl.zeros((BT, BW), dtype=ACC)
        X1 = tl.zeros((BW, BV), dtype=ACC)
        Y1 = tl.zeros((BW, BV), dtype=ACC)
        for d0 in range(0, DH, BD):
            rdd, dmask, off1, m1, off2, m2 = _hidden_block(d0, rd, rk, rv, K, V, DH)
            W2b = tl.load(w2_ptr + base2 + off2, mask=m2, other=0.0)
            W1b = tl.load(w1_ptr + base1 + off1, mask=m1, other=0.0)
            h0, hs, d1, d2, g0 = _first_layer(wk, W2b, w3_ptr, base2, off2, m2, GATED, SILU, PREC)
            dh = dot(eb, W1b, PREC)
            a, qW2, qS2 = _retrieval_layer(q, CK, dh * d1 * g0, A, P, w2_ptr, s2_ptr, wi2_ptr, base2, ibase2, off2,
                                           m2, MOMENTUM, INIT, PREC)  # fmt: skip
            hq, dqa = _act(a, SILU)
            if GATED:
                gt, qW3, qS3 = _retrieval_layer(q, CK, dh * hs, A, P, w3_ptr, s3_ptr, wi3_ptr, base2, ibase2, off2,
                                                m2, MOMENTUM, INIT, PREC)  # fmt: skip
                hq = hq * gt
            yb += A[:, None] * dot(hq, tl.trans(W1b), PREC)
            if INIT:
                Wi1b = tl.load(wi1_ptr + ibase1 + off1, mask=m1, other=0.0).to(ACC)
                yb += (1.0 - A[:, None]) * dot(hq, tl.trans(Wi1b), PREC)
            scores += dot(hq, tl.trans(h0), PREC)
            X1 += dot(h0, tl.trans(tl.load(gw1_ptr + gend1 + off1, mask=m1, other=0.0)), PREC)
            if MOMENTUM:
                S1b = tl.load(s1_ptr + base1 + off1, mask=m1, other=0.0)
                yb -= P[:, None] * dot(hq, tl.trans(S1b), PREC)
                Y1 += dot(h0, tl.trans(tl.load(gs1_ptr + gend1 + off1, mask=m1, other=0.0)), PREC)
        yb -= dot(C * scores, eb, PREC)
        dy = tl.load(dy_ptr + tok[:, None] * V + rv[None, :], mask=valid[:, None] & vmask[None, :], other=0.0)
        dy = dy.to(ACC)
        if RESIDUAL:
            dq = dy
        else:
            dq = tl.zeros((BT, BK), dtype=ACC)
        if NORM:
            yln, yhy, invy = _layer_norm(yb, lnw, lnb, vmask, V, norm_eps)
            dyb = _ln_bwd(yhy, invy, dy, lnw, vmask, V)
            dlnw += tl.sum(dy * yhy, axis=0)
            dlnb += tl.sum(dy, axis=0)
        else:
            dyb = dy
        E = dot(dyb, tl.trans(eb), PREC)
        dC = -scores * E
        dscores = -C * E
        deb = -dot(tl.trans(C * scores), dyb, PREC) - cl[:, None] * X1 + r[:, None] * Y1
        dcl = -tl.sum(eb * X1, axis=1)
        dr = tl.sum(eb * Y1, axis=1)

        # pass 3: back through the retrieval and the end state, block by block
        dA = tl.zeros((BT,), dtype=ACC)
        dP = tl.zeros((BT,), dtype=ACC)
        dCK = tl.zeros((BT, BW), dtype=ACC)
        dkw = tl.zeros((BW, BK), dtype=ACC)
        dAL = tl.sum(dA, axis=0)  # scalar zeros of the accumulator type
        dPL = dAL
        dThL = dAL
        for d0 in range(0, DH, BD):
            rdd, dmask, off1, m1, off2, m2 = _hidden_block(d0, rd, rk, rv, K, V, DH)
            W2b = tl.load(w2_ptr + base2 + off2, mask=m2, other=0.0)
            W1b = tl.load(w1_ptr + base1 + off1, mask=m1, other=0.0)
            G2b = tl.load(gw2_ptr + gend2 + off2, mask=m2, other=0.0)
            G1b = tl.load(gw1_ptr + gend1 + off1, mask=m1, other=0.0)
            h0, hs, d1, d2, g0 = _first_layer(wk, W2b, w3_ptr, base2, off2, m2, GATED, SILU, PREC)
            dh = dot(eb, W1b, PREC)
            u2 = dh * d1 * g0
            a, qW2, qS2 = _retrieval_layer(q, CK, u2, A, P, w2_ptr, s2_ptr, wi2_ptr, base2, ibase2, off2, m2,
                                           MOMENTUM, INIT, PREC)  # fmt: skip
            sa, dqa = _act(a, SILU)
            hq = sa
            if GATED:
                u3 = dh * hs
                gt, qW3, qS3 = _retrieval_layer(q, CK, u3, A, P, w3_ptr, s3_ptr, wi3_ptr, base2, ibase2, off2, m2,
                                                MOMENTUM, INIT, PREC)  # fmt: skip
                hq = sa * gt
            dyW1 = dot(dyb, W1b, PREC)
            dhq = A[:, None] * dyW1 + dot(dscores, h0, PREC)
            dA += tl.sum(hq * dyW1, axis=1)
            if INIT:  # the (1 - A) W_init terms of the retrieval and the end state; W_init's gradient
                Wi1b = tl.load(wi1_ptr + ibase1 + off1, mask=m1, other=0.0).to(ACC)
                Wi2b = tl.load(wi2_ptr + ibase2 + off2, mask=m2, other=0.0).to(ACC)
                dyWi1 = dot(dyb, Wi1b, PREC)
                dhq += (1.0 - A[:, None]) * dyWi1
                dA -= tl.sum(hq * dyWi1, axis=1)
                dAL -= tl.sum(tl.sum(G2b * Wi2b, axis=1), axis=0) + tl.sum(tl.sum(G1b * Wi1b, axis=1), axis=0)
                gi1 = dot(tl.trans((1.0 - A[:, None]) * dyb), hq, PREC) + (1.0 - A_L) * G1b
                pgi1 = gi1_ptr + rbase1 + off1
                tl.store(pgi1, tl.load(pgi1, mask=m1, other=0.0) + gi1, mask=m1)
            if MOMENTUM:
                S1b = tl.load(s1_ptr + base1 + off1, mask=m1, other=0.0)
                dyS1 = dot(dyb, S1b, PREC)
                dhq -= P[:, None] * dyS1
                dP -= tl.sum(hq * dyS1, axis=1)
            da = dhq * dqa
            if GATED:
                da = da * gt
            dq += A[:, None] * dot(da, W2b, PREC)
            if INIT:
                dq += (1.0 - A[:, None]) * dot(da, Wi2b, PREC)
                gi2 = dot(tl.trans((1.0 - A[:, None]) * da), q, PREC) + (1.0 - A_L) * G2b
                pgi2 = gi2_ptr + rbase2 + off2
                tl.store(pgi2, tl.load(pgi2, mask=m2, other=0.0) + gi2, mask=m2)
            dA += tl.sum(da * qW2, axis=1)
            dCK -= dot(da, tl.trans(u2), PREC)
            X2 = dot(wk, tl.trans(G2b), PREC)
            du2 = -dot(tl.trans(CK), da, PREC) - cl[:, None] * X2
            dcl -= tl.sum(u2 * X2, axis=1)
            dkw -= dot(cl[:, None] * u2, G2b, PREC)
            dAL += tl.sum(tl.sum(G2b * W2b, axis=1), axis=0) + tl.sum(tl.sum(G1b * W1b, axis=1), axis=0)
            dW1s = dot(tl.trans(A[:, None] * dyb), hq, PREC) + A_L * G1b
            dW2s = dot(tl.trans(A[:, None] * da), q, PREC) + A_L * G2b
            dh0p = dot(tl.trans(dscores), hq, PREC) - dot(cl[:, None] * eb, G1b, PREC)
            if GATED:
                W3b = tl.load(w3_ptr + base2 + off2, mask=m2, other=0.0)
                G3b = tl.load(gw3_ptr + gend2 + off2, mask=m2, other=0.0)
                dgt = dhq * sa
                dq += A[:, None] * dot(dgt, W3b, PREC)
                if INIT:
                    Wi3b = tl.load(wi3_ptr + ibase2 + off2, mask=m2, other=0.0).to(ACC)
                    dq += (1.0 - A[:, None]) * dot(dgt, Wi3b, PREC)
                    dAL -= tl.sum(tl.sum(G3b * Wi3b, axis=1), axis=0)
                    gi3 = dot(tl.trans((1.0 - A[:, None]) * dgt), q, PREC) + (1.0 - A_L) * G3b
                    pgi3 = gi3_ptr + rbase2 + off2
                    tl.store(pgi3, tl.load(pgi3, mask=m2, other=0.0) + gi3, mask=m2)
                dA += tl.sum(dgt * qW3, axis=1)
                dCK -= dot(dgt, tl.trans(u3), PREC)
                X3 = dot(wk, tl.trans(G3b), PREC)
                du3 = -dot(tl.trans(CK), dgt, PREC) - cl[:, None] * X3
                dcl -= tl.sum(u3 * X3, axis=1)
                dkw -= dot(cl[:, None] * u3, G3b, PREC)
                dAL += tl.sum(tl.sum(G3b * W3b, axis=1), axis=0)
                dW3s = dot(tl.trans(A[:, None] * dgt), q, PREC) + A_L * G3b
            if MOMENTUM:
                S2b = tl.load(s2_ptr + base2 + off2, mask=m2, other=0.0)
                H2b = tl.load(gs2_ptr + gend2 + off2, mask=m2, other=0.0)
                H1b = tl.load(gs1_ptr + gend1 + off1, mask=m1, other=0.0)
                dq -= P[:, None] * dot(da, S2b, PREC)
                dP -= tl.sum(da * qS2, axis=1)
                Y2 = dot(wk, tl.trans(H2b), PREC)
                du2 += r[:, None] * Y2
                dr += tl.sum(u2 * Y2, axis=1)
                dkw += dot(r[:, None] * u2, H2b, PREC)
                dPL -= tl.sum(tl.sum(G2b * S2b, axis=1), axis=0) + tl.sum(tl.sum(G1b * S1b, axis=1), axis=0)
                dThL += tl.sum(tl.sum(H2b * S2b, axis=1), axis=0) + tl.sum(tl.sum(H1b * S1b, axis=1), axis=0)
                dh0p += dot(r[:, None] * eb, H1b, PREC)
                dS1s = -dot(tl.trans(P[:, None] * dyb), hq, PREC) - P_L * G1b + Th_L * H1b
                dS2s = -dot(tl.trans(P[:, None] * da), q, PREC) - P_L * G2b + Th_L * H2b
                dS1s += tl.load(rs1_ptr + rbase1 + off1, mask=m1 & first, other=0.0)
                dS2s += tl.load(rs2_ptr + rbase2 + off2, mask=m2 & first, other=0.0)
                tl.store(gs1_ptr + gst1 + off1, dS1s, mask=m1)
                tl.store(gs2_ptr + gst2 + off2, dS2s, mask=m2)
                if GATED:
                    S3b = tl.load(s3_ptr + base2 + off2, mask=m2, other=0.0)
                    H3b = tl.load(gs3_ptr + gend2 + off2, mask=m2, other=0.0)
                    dq -= P[:, None] * dot(dgt, S3b, PREC)
                    dP -= tl.sum(dgt * qS3, axis=1)
                    Y3 = dot(wk, tl.trans(H3b), PREC)
                    du3 += r[:, None] * Y3
                    dr += tl.sum(u3 * Y3, axis=1)
                    dkw += dot(r[:, None] * u3, H3b, PREC)
                    dPL -= tl.sum(tl.sum(G3b * S3b, axis=1), axis=0)
                    dThL += tl.sum(tl.sum(H3b * S3b, axis=1), axis=0)
                    dS3s = -dot(tl.trans(P[:, None] * dgt), q, PREC) - P_L * G3b + Th_L * H3b
                    dS3s += tl.load(rs3_ptr + rbase2 + off2, mask=m2 & first, other=0.0)
                    tl.store(gs3_ptr + gst2 + off2, dS3s, mask=m2)
            # u2 = dh s'(a0) gate, u3 = dh s(a0), h0 = s(a0) gate: dl/d(dh), and what pass 3 knows of dl/da0
            ddh = du2 * d1 * g0
            da0 = du2 * dh * d2 * g0 + dh0p * d1 * g0
            if GATED:
                ddh += du3 * hs
                da0 += du3 * dh * d1
                tl.store(scg + rw[:, None] * DH + rdd[None, :], du2 * dh * d1 + dh0p * hs, mask=dmask[None, :])
                dW3s += tl.load(rw3_ptr + rbase2 + off2, mask=m2 & first, other=0.0)
                tl.store(gw3_ptr + gst2 + off2, dW3s, mask=m2)
            deb += dot(ddh, tl.trans(W1b), PREC)
            dW1s += dot(tl.trans(eb), ddh, PREC)
            dW1s += tl.load(rw1_ptr + rbase1 + off1, mask=m1 & first, other=0.0)
            dW2s += tl.load(rw2_ptr + rbase2 + off2, mask=m2 & first, other=0.0)
            tl.store(gw1_ptr + gst1 + off1, dW1s, mask=m1)
            tl.store(gw2_ptr + gst2 + off2, dW2s, mask=m2)
            tl.store(scr + rw[:, None] * DH + rdd[None, :], da0, mask=dmask[None, :])
        dC += dCK * QK
        dQK = dCK * C
        dq += dot(dQK, wk, PREC)
        dkw += dot(tl.trans(dQK), q, PREC)

        # eb = LNback(b0, e): its gradient reaches e, b0 (second order in the norm) and the LN weight
        db0 = tl.zeros((BW, BV), dtype=ACC)
        if NORM:
            g = e * lnw[None, :]
            de = _ln_bwd(yh0, inv0, deb, lnw * 0.0 + 1.0, vmask, V)  # the LN operator applied to deb (unit weight)
            dlnw += tl.sum(de * e, axis=0)
            de = de * lnw[None, :]
            dyh = -inv0[:, None] * (
                deb * (tl.sum(g * yh0, axis=1) / V)[:, None] + g * (tl.sum(deb * yh0, axis=1) / V)[:, None]
            )
            dinv = (tl.sum(deb * eb, axis=1) + tl.sum(dyh * yh0, axis=1)) / inv0
            dc = inv0[:, None] * dyh - (dinv * inv0 * inv0 / V)[:, None] * yh0
            db0 = tl.where(vmask[None, :], dc - (tl.sum(dc, axis=1) / V)[:, None], 0.0)
        else:
            de = deb
        if L2:
            if RESIDUAL:
                dkw += de
            if NORM:
                db0 += _ln_bwd(yh0, inv0, de, lnw, vmask, V)
                dlnw += tl.sum(de * yh0, axis=0)
                dlnb += tl.sum(de, axis=0)
            else:
                db0 += de
        # pass 4 reads what pass 3 wrote (scratch, start-state gradients) through other threads
        tl.debug_barrier()
        for d0 in range(0, DH, BD):
            rdd, dmask, off1, m1, off2, m2 = _hidden_block(d0, rd, rk, rv, K, V, DH)
            W2b = tl.load(w2_ptr + base2 + off2, mask=m2, other=0.0)
            W1b = tl.load(w1_ptr + base1 + off1, mask=m1, other=0.0)
            h0, hs, d1, d2, g0 = _first_layer(wk, W2b, w3_ptr, base2, off2, m2, GATED, SILU, PREC)
            dh0 = dot(db0, W1b, PREC)
            da0 = tl.load(scr + rw[:, None] * DH + rdd[None, :], mask=dmask[None, :], other=0.0) + dh0 * d1 * g0
            dkw += dot(da0, W2b, PREC)
            if GATED:
                dg0 = tl.load(scg + rw[:, None] * DH + rdd[None, :], mask=dmask[None, :], other=0.0) + dh0 * hs
                dkw += dot(dg0, tl.load(w3_ptr + base2 + off2, mask=m2, other=0.0), PREC)
                dW3s = tl.load(gw3_ptr + gst2 + off2, mask=m2, other=0.0) + dot(tl.trans(dg0), wk, PREC)
                tl.store(gw3_ptr + gst2 + off2, dW3s, mask=m2)
            dW2s = tl.load(gw2_ptr + gst2 + off2, mask=m2, other=0.0) + dot(tl.trans(da0), wk, PREC)
            dW1s = tl.load(gw1_ptr + gst1 + off1, mask=m1, other=0.0) + dot(tl.trans(db0), h0, PREC)
            tl.store(gw2_ptr + gst2 + off2, dW2s, mask=m2)
            tl.store(gw1_ptr + gst1 + off1, dW1s, mask=m1)

        tl.store(dq_ptr + tok[:, None] * K + rk[None, :], dq, mask=qmask)
        # window rows w < h + L are ext positions s + w of [halo, sequence]; earlier chunks add to the halo rows
        wrows = rw < NH + L
        ext = (i_b * H + i_h).to(tl.int64) * (NH + T) + s + rw
        pk = dk_ptr + ext[:, None] * K + rk[None, :]
        mk = wrows[:, None] & kmask[None, :]
        tl.store(pk, tl.load(pk, mask=mk, other=0.0) + dkw, mask=mk)
        pv = dv_ptr + ext[:, None] * V + rv[None, :]
        mv = wrows[:, None] & vmask[None, :]
        tl.store(pv, tl.load(pv, mask=mv, other=0.0) - de, mask=mv)
        cbase = (i_bh.to(tl.int64) * NT + i_t) * BT
        dC = tl.where(last[:, None], dC + dcl[None, :], dC)
        tl.store(dc_ptr + (cbase + rows[:, None]) * BW + rw[None, :], dC)
        tl.store(da_ptr + cbase + rows, tl.where(last, dA + dAL, dA))
        if MOMENTUM:
            tl.store(dp_ptr + cbase + rows, tl.where(last, dP + dPL, dP))
            tl.store(dr_ptr + (i_bh.to(tl.int64) * NT + i_t) * BW + rw, dr)
            tl.store(dth_ptr + i_bh.to(tl.int64) * NT + i_t, dThL)
        # the next chunk reads the state gradients and the dk / dv rows written here
        tl.debug_barrier()
    tl.store(dlnw_ptr + i_bh.to(tl.int64) * V + rv, dlnw, mask=vmask)
    tl.store(dlnb_ptr + i_bh.to(tl.int64) * V + rv, dlnb, mask=vmask)


def mlp_memory_backward(saved, cfg: MemoryConfig, dy, d_end, d_resume, blocks, launch):
    """Gradients of `MLPMemoryFunction` (same order as its forward arguments) from the saved forward tensors.

    saved: (q, k, v, alpha, eta, gamma, theta, ln_weight, ln_bias, halo_k, halo_v, halo_gamma, W_init of W1, W2,
    W3, then the six state buffers of `STATE_ORDER`); d_end / d_resume: gradients of the returned end /
    last-chunk-start states (six each, None where unused);
    blocks: the forward's (BT, BW, BK, BV, BD); launch: kwargs of the kernel launch (constexprs, num_warps).
    """
    q, k, v, alpha, eta, gamma, theta, lnw, lnb, hk, hv, hg, wi1, wi2, wi3, *bufs = saved
    B, T, H, K = k.shape
    V, DH, NH, b = v.shape[-1], bufs[0].shape[-1], hk.shape[2], cfg.chunk_size
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
    dk = torch.zeros(B, H, NH + T, K, dtype=acc, device=dev)
    dv = torch.zeros(B, H, NH + T, V, dtype=acc, device=dev)
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
            q, k, v, alpha, eta, gamma, theta, hk, hv, hg, lnw, lnb, *bufs, wi1, wi2, wi3, dy,
            *[g if g is not None else grads[0] for g in grads], *[r if r is not None else resumes[0] for r in resumes],
            *gi,
            dq, dk, dv, dC, dA, dP, dr, dth, dlnw, dlnb, scratch, scratch_gate,
            T, H, K, V, DH, NH, b, NT, float(cfg.gate_eps), float(cfg.norm_eps), **launch,
        )  # fmt: skip
    d_gates = _gate_grads(alpha, eta, theta, gamma, hg, dC, dA, dP, dr, dth, cfg, NT)
    public = lambda t, like: t.transpose(1, 2).to(like.dtype)  # noqa: E731  heads-first -> [B, T, H, ...]
    d_states = [g[:, :, NT % 2] if g is not None else None for g in grads]
    dnorm = (dlnw.sum(0).to(lnw.dtype), dlnb.sum(0).to(lnb.dtype)) if cfg.memory_norm else (None, None)
    d_init = [g.sum(0).to(w.dtype) if init and there else None for g, w, there in zip(gi, (wi1, wi2, wi3), present)]
    return (
        dq.to(q.dtype), public(dk[:, :, NH:], k), public(dv[:, :, NH:], v),
        d_gates["alpha"].to(alpha.dtype), d_gates["eta"].to(eta.dtype), d_gates["gamma"].to(gamma.dtype),
        d_gates["theta"].to(theta.dtype) if momentum else None,
        *d_states, *d_init, *dnorm,
        dk[:, :, :NH].to(hk.dtype), dv[:, :, :NH].to(hv.dtype), d_gates["halo_gamma"].to(hg.dtype),
    )  # fmt: skip


def _gate_grads(alpha, eta, theta, gamma, hg, dC, dA, dP, dr, dth, cfg: MemoryConfig, NT: int):
    """Gate gradients from the kernel's coefficient gradients, by autograd through the torch coefficient code
    batched over all chunks (the sequence padded to NT chunks with alpha = theta = 1, eta = gamma = 0, exactly the
    kernel's padding). alpha, eta, gamma, theta: [B, T, H]; hg: [B, H, h]. Returns {name: gradient}, same layouts."""
    B, T, H = alpha.shape
    b, NH = cfg.chunk_size, hg.shape[2]
    X = B * H * NT
    momentum = cfg.optimizer == "momentum"
    acc = dC.dtype
    with torch.enable_grad():
        leaves = {n: t.detach().to(acc).requires_grad_() for n, t in
                  (("alpha", alpha), ("eta", eta), ("gamma", gamma), ("theta", theta), ("halo_gamma", hg))}  # fmt: skip
        chunked = lambda t, fill: F.pad(t.transpose(1, 2), (0, NT * b - T), value=fill).reshape(X, 1, b)  # noqa: E731
        a, e, th = chunked(leaves["alpha"], 1.0), chunked(leaves["eta"], 0.0), chunked(leaves["theta"], 1.0)
        ext = F.pad(torch.cat([leaves["halo_gamma"], leaves["gamma"].transpose(1, 2)], 2), (0, NT * b - T))
        G = window_gates(ext.unfold(2, b + NH, b).reshape(X, 1, b + NH), b, NH, cfg)
        d = chunk_decays(a, th, cfg)
        outs = [update_coefficients(d, e, G, cfg), d.A]
        douts = [dC[..., :b, : b + NH].reshape(X, 1, b, b + NH), dA[..., :b].reshape(X, 1, b)]
        if momentum:
            outs += [d.P, momentum_end_coefficients(d, e, G), d.Th[..., -1]]
            douts += [dP[..., :b].reshape(X, 1, b), dr[..., : b + NH].reshape(X, 1, b + NH), dth.reshape(X, 1)]
        names = [n for n in leaves if momentum or n != "theta"]
        grads = torch.autograd.grad(outs, [leaves[n] for n in names], douts, allow_unused=True)
    return {n: torch.zeros_like(leaves[n]) if g is None else g for n, g in zip(names, grads)}
