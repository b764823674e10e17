"""Backward of the chunkwise MLP memory in Triton: one program per (batch, head) walks the chunks in reverse and
recomputes each from its stored start state (no per-token weights, no stored activations).

Per chunk (notation of `triton/mlp.py`; dX is dLoss/dX), four passes over the hidden blocks:
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
gradients follow from them in PyTorch (`triton.mlp.mlp_memory_backward`), by autograd through `coefficients.py`
(the torch op's own coefficient code) batched over all chunks, O(T b (b + c)) work. Window tokens overlap between
chunks (the halo), so dk and dv accumulate into [B, H, HALO + T, ...] buffers, the first HALO rows being the
incoming halo. The state gradients flow
between chunks through two slots [B, H, 2, ...] (end of this chunk / start of this chunk).
gated_mlp (h0 = s(a0) * g0, g0 = W3 k): the signals are u2 = dh s'(a0) g0 (W2) and u3 = dh s(a0) (W3), the gate
has its own retrieval layer, and pass 3 leaves the known part of dl/dg0 in a second scratch. decay_target="init":
every A W_0 of the retrieval and the end state carries (1 - A) W_init; W_init's gradient accumulates per (batch,
head) in pass 3 and is summed over the batch on the host.
Derivation checked against autograd in float64 for every (gelu|silu, norm, residual, l2|dot, gd|momentum).
"""

from __future__ import annotations

import triton
import triton.language as tl

from atlas_kernels.ops.memory.triton.mlp_kernels import (
    _layer_norm,
    _ln_bwd,
    _load_chunk,
    _program_head,
    _read_block,
    _retrieval,
    _side_tiles,
    _signal,
    _slot_offsets,
    _start_block,
)
from atlas_kernels.ops.memory.triton.stages import chunk_span, load_rows, store_rows
from atlas_kernels.ops.triton_common import dot


@triton.jit
def _first_layer_bwd(dq, dA, dCK, dcl, dkw, dAL, dx, q, wk, CK, u, qW, cl, A, A_L, Wb, Wib, Gb, more_AL, more_ALi,
                     gi_ptr, rbase, off, m, INIT: tl.constexpr, PREC: tl.constexpr):  # fmt: skip
    """Backward of one first layer (W2, or the gate's W3) of a hidden block, without its momentum terms, from
    dx = dl/d(its retrieval): the accumulators with this layer's terms added, its signal's gradient du and its
    start-state gradient dWs (still without the window term of pass 4). Gb: the gradient of its next start state;
    more_AL, more_ALi: terms of W1 that share this layer's sums into dA_L (0 for W3). With decay_target="init"
    W_init's gradient is accumulated at gi_ptr."""
    dq += A[:, None] * dot(dx, Wb, PREC)
    if INIT:
        dAL -= tl.sum(tl.sum(Gb * Wib, axis=1), axis=0) + more_ALi
        dq += (1.0 - A[:, None]) * dot(dx, Wib, PREC)
        gi = dot(tl.trans((1.0 - A[:, None]) * dx), q, PREC) + (1.0 - A_L) * Gb
        pgi = gi_ptr + rbase + off
        tl.store(pgi, tl.load(pgi, mask=m, other=0.0) + gi, mask=m)
    dA += tl.sum(dx * qW, axis=1)
    dCK -= dot(dx, tl.trans(u), PREC)
    X = dot(wk, tl.trans(Gb), PREC)
    du = -dot(tl.trans(CK), dx, PREC) - cl[:, None] * X
    dcl -= tl.sum(u * X, axis=1)
    dkw -= dot(cl[:, None] * u, Gb, PREC)
    dAL += tl.sum(tl.sum(Gb * Wb, axis=1), axis=0) + more_AL
    dWs = dot(tl.trans(A[:, None] * dx), q, PREC) + A_L * Gb
    return dq, dA, dCK, dcl, dkw, dAL, du, dWs


@triton.jit
def _first_layer_momentum_bwd(dq, dP, du, dr, dkw, dPL, dThL, dx, q, wk, u, qS, r, P, P_L, Th_L, Sb, Gb, Hb,
                              more_PL, more_ThL, rs_ptr, gs_ptr, rbase, gst, off, m, first,
                              PREC: tl.constexpr):  # fmt: skip
    """The momentum terms of `_first_layer_bwd` (Hb: the gradient of the next start momentum; more_*: W1's terms
    of the same sums, 0 for W3); writes the layer's start-momentum gradient (plus the resume gradient on the last
    chunk) to gs_ptr."""
    dq -= P[:, None] * dot(dx, Sb, PREC)
    dP -= tl.sum(dx * qS, axis=1)
    Y = dot(wk, tl.trans(Hb), PREC)
    du += r[:, None] * Y
    dr += tl.sum(u * Y, axis=1)
    dkw += dot(r[:, None] * u, Hb, PREC)
    dPL -= tl.sum(tl.sum(Gb * Sb, axis=1), axis=0) + more_PL
    dThL += tl.sum(tl.sum(Hb * Sb, axis=1), axis=0) + more_ThL
    dSs = -dot(tl.trans(P[:, None] * dx), q, PREC) - P_L * Gb + Th_L * Hb
    dSs += tl.load(rs_ptr + rbase + off, mask=m & first, other=0.0)
    tl.store(gs_ptr + gst + off, dSs, mask=m)
    return dq, dP, du, dr, dkw, dPL, dThL


@triton.jit
def _mlp_bwd_kernel(
    q_ptr, k_ptr, v_ptr, a_ptr, e_ptr, g_ptr, th_ptr, halo_k_ptr, halo_v_ptr, halo_gamma_ptr, lnw_ptr, lnb_ptr,
    w1_ptr, w2_ptr, w3_ptr, s1_ptr, s2_ptr, s3_ptr, wi1_ptr, wi2_ptr, wi3_ptr, dy_ptr,
    gw1_ptr, gw2_ptr, gw3_ptr, gs1_ptr, gs2_ptr, gs3_ptr, rw1_ptr, rw2_ptr, rw3_ptr, rs1_ptr, rs2_ptr, rs3_ptr,
    gi1_ptr, gi2_ptr, gi3_ptr,
    dq_ptr, dk_ptr, dv_ptr, dc_ptr, da_ptr, dp_ptr, dr_ptr, dth_ptr, dlnw_ptr, dlnb_ptr, scr_ptr, scg_ptr,
    T, H, K, V, DH, HALO, CHUNK, NT, gate_eps, norm_eps,
    BT: tl.constexpr, BW: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, BD: tl.constexpr,
    L2: tl.constexpr, MOMENTUM: tl.constexpr, NORM: tl.constexpr, RESIDUAL: tl.constexpr, SILU: tl.constexpr,
    GATED: tl.constexpr, INIT: tl.constexpr, ACC: tl.constexpr, PREC: tl.constexpr,
):  # fmt: skip
    i_bh, i_b, i_h, rows, rw, rk, rv, rd, vmask, lnw, lnb, ibase1, ibase2 = _program_head(
        lnw_ptr, lnb_ptr, H, K, V, DH, BT, BW, BK, BV, BD, NORM, ACC
    )
    kmask = rk < K
    dlnw = tl.zeros((BV,), dtype=ACC)
    dlnb = tl.zeros((BV,), dtype=ACC)
    scr = scr_ptr + i_bh.to(tl.int64) * BW * DH  # per program: the part of dl/da0 (and dl/dgate) pass 3 knows
    scg = scg_ptr + i_bh.to(tl.int64) * BW * DH
    rbase1 = i_bh.to(tl.int64) * V * DH  # [B, H, ...] tensors: resume gradients, W_init gradients
    rbase2 = i_bh.to(tl.int64) * DH * K
    for i_r in range(NT):
        i_t = NT - 1 - i_r
        first = i_r == 0  # the last chunk: its start state was also returned (resume), add that gradient
        base1, base2 = _slot_offsets(i_bh, i_t, NT + 1, K, V, DH)
        # the two state-gradient slots swap roles every chunk: this chunk's end is the previous one's start
        g_end = i_r % 2
        gend1, gend2 = _slot_offsets(i_bh, g_end, 2, K, V, DH)
        gst1, gst2 = _slot_offsets(i_bh, 1 - g_end, 2, K, V, DH)
        s, L, tok, valid, last = chunk_span(i_t, CHUNK, T, H, i_b, i_h, rows)
        q, wk, wv, C, cl, A, A_L, P, P_L, r, Th_L = _load_chunk(
            q_ptr, k_ptr, v_ptr, a_ptr, e_ptr, g_ptr, th_ptr, halo_k_ptr, halo_v_ptr, halo_gamma_ptr,
            i_b, i_h, s, L, tok, valid, last, T, H, K, V, HALO, rows, rw, rk, rv, gate_eps, MOMENTUM, ACC, PREC,
        )  # fmt: skip

        # pass 1
        eb, e, yh0, inv0 = _signal(wk, wv, w1_ptr, w2_ptr, w3_ptr, base1, base2, lnw, lnb, K, V, DH, norm_eps,
                                   rk, rv, rd, BW, BV, BD, L2, NORM, RESIDUAL, SILU, GATED, ACC, PREC)  # fmt: skip
        QK = dot(q, tl.trans(wk), PREC)
        CK = C * QK

        # pass 2: the retrieval again, and the end-state gradients against h0
        yb, scores, X1, Y1 = _retrieval(
            q, wk, eb, C, CK, cl, r, A, A_L, P, P_L, Th_L, w1_ptr, w2_ptr, w3_ptr, s1_ptr, s2_ptr, s3_ptr,
            wi1_ptr, wi2_ptr, wi3_ptr, gw1_ptr, gs1_ptr, base1, base2, ibase1, ibase2, gend1, rd, rk, rv, K, V, DH,
            BT, BW, BV, BD, MOMENTUM, INIT, SILU, GATED, False, ACC, PREC,
        )  # fmt: skip
        dy = load_rows(dy_ptr, tok, valid, rv, V, ACC)
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
            rdd, dmask, off1, m1, off2, m2, W1b, W2b, h0, hs, d1, d2, g0 = _start_block(
                d0, rd, rk, rv, K, V, DH, wk, w1_ptr, w2_ptr, w3_ptr, base1, base2, GATED, SILU, PREC
            )
            G2b = tl.load(gw2_ptr + gend2 + off2, mask=m2, other=0.0)
            G1b = tl.load(gw1_ptr + gend1 + off1, mask=m1, other=0.0)
            dh, u2, u3, sa, dqa, gt, hq, qW2, qS2, qW3, qS3 = _read_block(
                q, CK, eb, W1b, hs, d1, g0, A, P, w2_ptr, s2_ptr, wi2_ptr, w3_ptr, s3_ptr, wi3_ptr, base2, ibase2,
                off2, m2, MOMENTUM, INIT, SILU, GATED, PREC,
            )  # fmt: skip
            Wi1b, S1b = _side_tiles(wi1_ptr, s1_ptr, ibase1, base1, off1, m1, W1b, MOMENTUM, INIT, ACC)
            Wi2b, S2b = _side_tiles(wi2_ptr, s2_ptr, ibase2, base2, off2, m2, W2b, MOMENTUM, INIT, ACC)
            dyW1 = dot(dyb, W1b, PREC)
            dhq = A[:, None] * dyW1 + dot(dscores, h0, PREC)
            dA += tl.sum(hq * dyW1, axis=1)
            more_ALi = dAL  # W1's share of dA_L through W_init (decay_target="init" only)
            if INIT:  # the (1 - A) W_init terms of the retrieval and the end state; W_init's gradient
                dyWi1 = dot(dyb, Wi1b, PREC)
                dhq += (1.0 - A[:, None]) * dyWi1
                dA -= tl.sum(hq * dyWi1, axis=1)
                more_ALi = tl.sum(tl.sum(G1b * Wi1b, axis=1), axis=0)
                gi1 = dot(tl.trans((1.0 - A[:, None]) * dyb), hq, PREC) + (1.0 - A_L) * G1b
                pgi1 = gi1_ptr + rbase1 + off1
                tl.store(pgi1, tl.load(pgi1, mask=m1, other=0.0) + gi1, mask=m1)
            if MOMENTUM:
                dyS1 = dot(dyb, S1b, PREC)
                dhq -= P[:, None] * dyS1
                dP -= tl.sum(hq * dyS1, axis=1)
            da = dhq * dqa
            if GATED:
                da = da * gt
            dq, dA, dCK, dcl, dkw, dAL, du2, dW2s = _first_layer_bwd(
                dq, dA, dCK, dcl, dkw, dAL, da, q, wk, CK, u2, qW2, cl, A, A_L, W2b, Wi2b, G2b,
                tl.sum(tl.sum(G1b * W1b, axis=1), axis=0), more_ALi, gi2_ptr, rbase2, off2, m2, INIT, PREC,
            )  # fmt: skip
            dW1s = dot(tl.trans(A[:, None] * dyb), hq, PREC) + A_L * G1b
            dh0p = dot(tl.trans(dscores), hq, PREC) - dot(cl[:, None] * eb, G1b, PREC)
            if GATED:
                W3b = tl.load(w3_ptr + base2 + off2, mask=m2, other=0.0)
                G3b = tl.load(gw3_ptr + gend2 + off2, mask=m2, other=0.0)
                Wi3b, S3b = _side_tiles(wi3_ptr, s3_ptr, ibase2, base2, off2, m2, W3b, MOMENTUM, INIT, ACC)
                dgt = dhq * sa
                dq, dA, dCK, dcl, dkw, dAL, du3, dW3s = _first_layer_bwd(
                    dq, dA, dCK, dcl, dkw, dAL, dgt, q, wk, CK, u3, qW3, cl, A, A_L, W3b, Wi3b, G3b, 0.0, 0.0,
                    gi3_ptr, rbase2, off2, m2, INIT, PREC,
                )  # fmt: skip
            if MOMENTUM:
                H2b = tl.load(gs2_ptr + gend2 + off2, mask=m2, other=0.0)
                H1b = tl.load(gs1_ptr + gend1 + off1, mask=m1, other=0.0)
                dq, dP, du2, dr, dkw, dPL, dThL = _first_layer_momentum_bwd(
                    dq, dP, du2, dr, dkw, dPL, dThL, da, q, wk, u2, qS2, r, P, P_L, Th_L, S2b, G2b, H2b,
                    tl.sum(tl.sum(G1b * S1b, axis=1), axis=0), tl.sum(tl.sum(H1b * S1b, axis=1), axis=0),
                    rs2_ptr, gs2_ptr, rbase2, gst2, off2, m2, first, PREC,
                )  # fmt: skip
                dh0p += dot(r[:, None] * eb, H1b, PREC)
                dS1s = -dot(tl.trans(P[:, None] * dyb), hq, PREC) - P_L * G1b + Th_L * H1b
                dS1s += tl.load(rs1_ptr + rbase1 + off1, mask=m1 & first, other=0.0)
                tl.store(gs1_ptr + gst1 + off1, dS1s, mask=m1)
                if GATED:
                    H3b = tl.load(gs3_ptr + gend2 + off2, mask=m2, other=0.0)
                    dq, dP, du3, dr, dkw, dPL, dThL = _first_layer_momentum_bwd(
                        dq, dP, du3, dr, dkw, dPL, dThL, dgt, q, wk, u3, qS3, r, P, P_L, Th_L, S3b, G3b, H3b, 0.0,
                        0.0, rs3_ptr, gs3_ptr, rbase2, gst2, off2, m2, first, PREC,
                    )  # fmt: skip
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
            rdd, dmask, off1, m1, off2, m2, W1b, W2b, h0, hs, d1, d2, g0 = _start_block(
                d0, rd, rk, rv, K, V, DH, wk, w1_ptr, w2_ptr, w3_ptr, base1, base2, GATED, SILU, PREC
            )
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

        store_rows(dq_ptr, tok, valid, rk, K, dq)
        # window rows w < HALO + L are ext positions s + w of [halo, sequence]; earlier chunks add to the halo rows
        wrows = rw < HALO + L
        ext = (i_b * H + i_h).to(tl.int64) * (HALO + T) + s + rw
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
