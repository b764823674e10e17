"""Chunkwise linear memory in Triton: forward and hand-written backward (CHUNKWISE.md, linear memory).

Supported: memory="linear", feature_map="identity", optimizer "gd" | "momentum", bias l2 | dot, window c >= 1
(c - 1 <= 64) with gamma gates and the carried halo, alpha (and theta) decay as log-space cumulative products
clamped at cfg.gate_eps, decay_first (gd), any chunk size b <= 128, any T, Dk <= 256, any Dv (split in blocks of
<= 64 over programs). Not supported (ValueError naming the field; the api falls back to torch under "auto"):
mlp / gated_mlp memories, muon, poly / exp features, window="global".

Per chunk of L <= b tokens with start weights W (one program per (value block, batch, head), chunks in sequence,
the state W [BV, Dk] kept in fp32 registers), window tokens w = halo (h = c - 1 tokens before the chunk, read
from the sequence or from the state's halo) + the chunk:
    la = cumsum log alpha,  A_j = exp(la_j),  LA[j, n] = exp(la_j - la_n) (n <= j)
    G[n, w] = gamma_w [n <= w - h + (c - 1) ... ] (token n's window), Meta = LA diag(eta), C = Meta G
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
import triton.language as tl

from atlas_kernels.config import MemoryConfig
from atlas_kernels.ops.memory.inputs import prepare_inputs
from atlas_kernels.ops.memory.state import MemoryState, resume_inputs
from atlas_kernels.ops.memory.triton_support import common_unsupported, window_tail
from atlas_kernels.ops.triton_common import compute_precision, dot

MAX_VALUE_BLOCK = 32


# ----------------------------------------------------------------------------------------------------------------
# shared pieces
# ----------------------------------------------------------------------------------------------------------------


@triton.jit
def _load_window(
    q_ptr, k_ptr, v_ptr, a_ptr, e_ptr, g_ptr, hk_ptr, hv_ptr, hg_ptr,
    i_b, i_h, i_v, s, L, T, H, K, V, NH,
    BT: tl.constexpr, BH: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    ACC: tl.constexpr, HAS_HALO: tl.constexpr,
):  # fmt: skip
    """The chunk's q, k, v, gates and the halo's k, v, gamma (masked entries: 0, alpha 1)."""
    rows = tl.arange(0, BT)
    rk = tl.arange(0, BK)
    rv = i_v * BV + tl.arange(0, BV)
    valid = rows < L
    tok = (i_b * T + s + rows).to(tl.int64) * H + i_h
    mk = valid[:, None] & (rk[None, :] < K)
    mv = valid[:, None] & (rv[None, :] < V)
    q = tl.load(q_ptr + tok[:, None] * K + rk[None, :], mask=mk, other=0.0).to(ACC)
    k = tl.load(k_ptr + tok[:, None] * K + rk[None, :], mask=mk, other=0.0).to(ACC)
    v = tl.load(v_ptr + tok[:, None] * V + rv[None, :], mask=mv, other=0.0).to(ACC)
    alpha = tl.load(a_ptr + tok, mask=valid, other=1.0).to(ACC)
    eta = tl.load(e_ptr + tok, mask=valid, other=0.0).to(ACC)
    gamma = tl.load(g_ptr + tok, mask=valid, other=0.0).to(ACC)
    if HAS_HALO:
        hr = tl.arange(0, BH)
        hpos = s - NH + hr
        in_seq = (hr < NH) & (hpos >= 0)
        in_state = (hr < NH) & (hpos < 0)
        htok = (i_b * T + hpos).to(tl.int64) * H + i_h
        sidx = ((i_b * H + i_h) * NH + s + hr).to(tl.int64)
        kmask = rk[None, :] < K
        vmask = rv[None, :] < V
        kh = tl.load(k_ptr + htok[:, None] * K + rk[None, :], mask=in_seq[:, None] & kmask, other=0.0).to(ACC)
        kh += tl.load(hk_ptr + sidx[:, None] * K + rk[None, :], mask=in_state[:, None] & kmask, other=0.0).to(ACC)
        vh = tl.load(v_ptr + htok[:, None] * V + rv[None, :], mask=in_seq[:, None] & vmask, other=0.0).to(ACC)
        vh += tl.load(hv_ptr + sidx[:, None] * V + rv[None, :], mask=in_state[:, None] & vmask, other=0.0).to(ACC)
        gh = tl.load(g_ptr + htok, mask=in_seq, other=0.0).to(ACC)
        gh += tl.load(hg_ptr + sidx, mask=in_state, other=0.0).to(ACC)
    else:
        kh = tl.zeros((BH, BK), dtype=ACC)
        vh = tl.zeros((BH, BV), dtype=ACC)
        gh = tl.zeros((BH,), dtype=ACC)
    return q, k, v, alpha, eta, gamma, kh, vh, gh


@triton.jit
def _coefficients(alpha, eta, gamma, gh, NH, gate_eps, BT: tl.constexpr, BH: tl.constexpr):
    """Decays and window gates of one chunk.

    Returns la [BT], A [BT], LA [BT, BT], E [BT] = A_L / A_n, band_c [BT, BT], band_h [BT, BH], Gc, Gh.
    """
    rows = tl.arange(0, BT)
    la = tl.cumsum(tl.log(tl.maximum(alpha, gate_eps)), axis=0)
    A = tl.exp(la)
    la_last = tl.sum(tl.log(tl.maximum(alpha, gate_eps)), axis=0)
    lower = rows[None, :] <= rows[:, None]
    LA = tl.exp(tl.where(lower, la[:, None] - la[None, :], float("-inf")))
    E = tl.exp(la_last - la)
    # chunk token n's window covers chunk tokens n' in [n - h, n] and halo entries i >= n (i < h)
    band_c = lower & (rows[None, :] >= rows[:, None] - NH)
    hr = tl.arange(0, BH)
    band_h = (hr[None, :] >= rows[:, None]) & (hr[None, :] < NH)
    Gc = tl.where(band_c, gamma[None, :], 0.0)
    Gh = tl.where(band_h, gh[None, :], 0.0)
    return la, A, LA, E, band_c, band_h, Gc, Gh


@triton.jit
def _momentum_coefficients(theta, LA, last, gate_eps, BT: tl.constexpr, PREC: tl.constexpr):
    """Momentum decays of one chunk: Th [BT] = cumprod theta, LT [BT, BT] = Th_m / Th_n, Q = LA LT (so that
    C = Q diag(eta) G), P = LA Th (the share of S_0 in W_j), qL = Q[L - 1, :], ET = Th_L / Th_n and Th_L."""
    rows = tl.arange(0, BT)
    logt = tl.log(tl.maximum(theta, gate_eps))
    lt = tl.cumsum(logt, axis=0)
    lt_last = tl.sum(logt, axis=0)
    Th = tl.exp(lt)
    lower = rows[None, :] <= rows[:, None]
    LT = tl.exp(tl.where(lower, lt[:, None] - lt[None, :], float("-inf")))
    Q = dot(LA, LT, PREC)
    P = tl.sum(LA * Th[None, :], axis=1)
    qL = tl.sum(tl.where(last[:, None], Q, 0.0), axis=0)
    ET = tl.exp(lt_last - lt)
    return lt, Th, LT, Q, P, qL, ET, tl.exp(lt_last)


# ----------------------------------------------------------------------------------------------------------------
# forward
# ----------------------------------------------------------------------------------------------------------------


@triton.jit
def _linear_fwd_kernel(
    q_ptr, k_ptr, v_ptr, a_ptr, e_ptr, g_ptr, th_ptr, hk_ptr, hv_ptr, hg_ptr,
    w0_ptr, s_w0b, s_w0h, s0_ptr, s_s0b, s_s0h,
    y_ptr, wt_ptr, h0_ptr, st_ptr, hs0_ptr,
    T, H, K, V, NH, CHUNK, NT, gate_eps,
    BT: tl.constexpr, BH: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    L2: tl.constexpr, DECAY_FIRST: tl.constexpr, MOMENTUM: tl.constexpr, HAS_HALO: tl.constexpr,
    ACC: tl.constexpr, PREC: tl.constexpr,
):  # fmt: skip
    i_v = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b = i_bh // H
    i_h = i_bh % H
    rk = tl.arange(0, BK)
    rv = i_v * BV + tl.arange(0, BV)
    wmask = (rv[:, None] < V) & (rk[None, :] < K)
    w_off = rv[:, None] * K + rk[None, :]
    W = tl.load(w0_ptr + i_b.to(tl.int64) * s_w0b + i_h * s_w0h + w_off, mask=wmask, other=0.0).to(ACC)
    if MOMENTUM:
        S = tl.load(s0_ptr + i_b.to(tl.int64) * s_s0b + i_h * s_s0h + w_off, mask=wmask, other=0.0).to(ACC)
    rows = tl.arange(0, BT)
    for i_t in range(NT):
        s = i_t * CHUNK
        L = tl.minimum(CHUNK, T - s)
        state_off = (i_bh.to(tl.int64) * NT + i_t) * V * K + w_off
        tl.store(h0_ptr + state_off, W, mask=wmask)
        q, k, v, alpha, eta, gamma, kh, vh, gh = _load_window(
            q_ptr, k_ptr, v_ptr, a_ptr, e_ptr, g_ptr, hk_ptr, hv_ptr, hg_ptr,
            i_b, i_h, i_v, s, L, T, H, K, V, NH, BT, BH, BK, BV, ACC, HAS_HALO,
        )  # fmt: skip
        la, A, LA, E, band_c, band_h, Gc, Gh = _coefficients(alpha, eta, gamma, gh, NH, gate_eps, BT, BH)
        tok = (i_b * T + s + rows).to(tl.int64) * H + i_h
        last = rows == L - 1
        A_L = tl.sum(tl.where(last, A, 0.0), axis=0)
        y = A[:, None] * dot(q, tl.trans(W), PREC)
        if MOMENTUM:
            tl.store(hs0_ptr + state_off, S, mask=wmask)
            theta = tl.load(th_ptr + tok, mask=rows < L, other=1.0).to(ACC)
            lt, Th, LT, Q, P, qL, ET, Th_L = _momentum_coefficients(theta, LA, last, gate_eps, BT, PREC)
            Meta = Q * eta[None, :]
            wl = qL * eta  # C[L - 1, w] = sum_n wl_n G[n, w]
            rr = ET * eta  # S_L = Th_L S_0 + sum_w r_w u_w, r_w = sum_n rr_n G[n, w]
            P_L = tl.sum(tl.where(last, P, 0.0), axis=0)
            y -= P[:, None] * dot(q, tl.trans(S), PREC)
            rc = tl.sum(rr[:, None] * Gc, axis=0)
        else:
            Meta = LA * eta[None, :]
            wl = E * eta
        Cc = dot(Meta, Gc, PREC)
        Kc = dot(q, tl.trans(k), PREC)
        cl_c = tl.sum(wl[:, None] * Gc, axis=0)
        if HAS_HALO:
            Ch = dot(Meta, Gh, PREC)
            Kh = dot(q, tl.trans(kh), PREC)
            cl_h = tl.sum(wl[:, None] * Gh, axis=0)
        if DECAY_FIRST:
            Meta1 = Meta * A[None, :]
            C1c = dot(Meta1, Gc, PREC)
            wl1 = wl * A
            c1l_c = tl.sum(wl1[:, None] * Gc, axis=0)
            f0c = dot(k, tl.trans(W), PREC)
            y += -dot(C1c * Kc, f0c, PREC) + dot(Cc * Kc, v, PREC)
            upd = dot(tl.trans(c1l_c[:, None] * f0c - cl_c[:, None] * v), k, PREC)
            if HAS_HALO:
                C1h = dot(Meta1, Gh, PREC)
                c1l_h = tl.sum(wl1[:, None] * Gh, axis=0)
                f0h = dot(kh, tl.trans(W), PREC)
                y += -dot(C1h * Kh, f0h, PREC) + dot(Ch * Kh, vh, PREC)
                upd += dot(tl.trans(c1l_h[:, None] * f0h - cl_h[:, None] * vh), kh, PREC)
        else:
            if L2:
                ec = dot(k, tl.trans(W), PREC) - v
            else:
                ec = -v
            y -= dot(Cc * Kc, ec, PREC)
            upd = dot(tl.trans(cl_c[:, None] * ec), k, PREC)
            if MOMENTUM:
                mom = dot(tl.trans(rc[:, None] * ec), k, PREC)
            if HAS_HALO:
                if L2:
                    eh = dot(kh, tl.trans(W), PREC) - vh
                else:
                    eh = -vh
                y -= dot(Ch * Kh, eh, PREC)
                upd += dot(tl.trans(cl_h[:, None] * eh), kh, PREC)
                if MOMENTUM:
                    rh = tl.sum(rr[:, None] * Gh, axis=0)
                    mom += dot(tl.trans(rh[:, None] * eh), kh, PREC)
        ymask = (rows[:, None] < L) & (rv[None, :] < V)
        tl.store(y_ptr + tok[:, None] * V + rv[None, :], y.to(y_ptr.dtype.element_ty), mask=ymask)
        if MOMENTUM:
            W = A_L * W - P_L * S - upd
            S = Th_L * S + mom
        else:
            W = A_L * W - upd
    tl.store(wt_ptr + i_bh.to(tl.int64) * V * K + w_off, W, mask=wmask)
    if MOMENTUM:
        tl.store(st_ptr + i_bh.to(tl.int64) * V * K + w_off, S, mask=wmask)


# ----------------------------------------------------------------------------------------------------------------
# backward
# ----------------------------------------------------------------------------------------------------------------


@triton.jit
def _linear_bwd_kernel(
    q_ptr, k_ptr, v_ptr, a_ptr, e_ptr, g_ptr, th_ptr, hk_ptr, hv_ptr, hg_ptr,
    h0_ptr, hs0_ptr, dy_ptr, dwt_ptr, dwr_ptr, dst_ptr, dsr_ptr,
    dq_ptr, dk_ptr, dv_ptr, da_ptr, de_ptr, dg_ptr, dth_ptr, dw0_ptr, ds0_ptr, dhk_ptr, dhv_ptr, dhg_ptr,
    B, T, H, K, V, NH, CHUNK, NT, gate_eps,
    BT: tl.constexpr, BH: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    L2: tl.constexpr, DECAY_FIRST: tl.constexpr, MOMENTUM: tl.constexpr, HAS_HALO: tl.constexpr,
    HAS_DWT: tl.constexpr, HAS_DWR: tl.constexpr, HAS_DST: tl.constexpr, HAS_DSR: tl.constexpr,
    ACC: tl.constexpr, PREC: tl.constexpr,
):  # fmt: skip
    i_v = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b = i_bh // H
    i_h = i_bh % H
    rk = tl.arange(0, BK)
    rv = i_v * BV + tl.arange(0, BV)
    rows = tl.arange(0, BT)
    hr = tl.arange(0, BH)
    wmask = (rv[:, None] < V) & (rk[None, :] < K)
    w_off = rv[:, None] * K + rk[None, :]
    bh_off = i_bh.to(tl.int64) * V * K + w_off
    if HAS_DWT:
        dW = tl.load(dwt_ptr + bh_off, mask=wmask, other=0.0).to(ACC)
    else:
        dW = tl.zeros((BV, BK), dtype=ACC)
    if HAS_DWR:
        dWR = tl.load(dwr_ptr + bh_off, mask=wmask, other=0.0).to(ACC)
    if MOMENTUM:
        if HAS_DST:
            dS = tl.load(dst_ptr + bh_off, mask=wmask, other=0.0).to(ACC)
        else:
            dS = tl.zeros((BV, BK), dtype=ACC)
        if HAS_DSR:
            dSR = tl.load(dsr_ptr + bh_off, mask=wmask, other=0.0).to(ACC)
    for t in range(NT):
        i_t = NT - 1 - t
        s = i_t * CHUNK
        L = tl.minimum(CHUNK, T - s)
        state_off = (i_bh.to(tl.int64) * NT + i_t) * V * K + w_off
        W = tl.load(h0_ptr + state_off, mask=wmask, other=0.0).to(ACC)
        q, k, v, alpha, eta, gamma, kh, vh, gh = _load_window(
            q_ptr, k_ptr, v_ptr, a_ptr, e_ptr, g_ptr, hk_ptr, hv_ptr, hg_ptr,
            i_b, i_h, i_v, s, L, T, H, K, V, NH, BT, BH, BK, BV, ACC, HAS_HALO,
        )  # fmt: skip
        la, A, LA, E, band_c, band_h, Gc, Gh = _coefficients(alpha, eta, gamma, gh, NH, gate_eps, BT, BH)
        tok = (i_b * T + s + rows).to(tl.int64) * H + i_h
        ymask = (rows[:, None] < L) & (rv[None, :] < V)
        dy = tl.load(dy_ptr + tok[:, None] * V + rv[None, :], mask=ymask, other=0.0).to(ACC)
        last = rows == L - 1
        A_L = tl.sum(tl.where(last, A, 0.0), axis=0)
        qW = dot(q, tl.trans(W), PREC)
        # y = A qW (- P qS) - dual;  W_L = A_L W (- P_L S) - upd;  S_L = Th_L S + mom
        dW0 = A_L * dW + dot(tl.trans(A[:, None] * dy), q, PREC)
        dA = tl.sum(dy * qW, axis=1) + tl.where(last, tl.sum(tl.sum(dW * W, axis=1), axis=0), 0.0)
        dq = A[:, None] * dot(dy, W, PREC)
        kdW_c = dot(k, tl.trans(dW), PREC)  # [BT, BV]: rows dW k_w
        if MOMENTUM:
            S = tl.load(hs0_ptr + state_off, mask=wmask, other=0.0).to(ACC)
            theta = tl.load(th_ptr + tok, mask=rows < L, other=1.0).to(ACC)
            lt, Th, LT, Q, P, qL, ET, Th_L = _momentum_coefficients(theta, LA, last, gate_eps, BT, PREC)
            Meta = Q * eta[None, :]
            wl = qL * eta
            rr = ET * eta
            P_L = tl.sum(tl.where(last, P, 0.0), axis=0)
            qS = dot(q, tl.trans(S), PREC)
            dS0 = Th_L * dS - P_L * dW - dot(tl.trans(P[:, None] * dy), q, PREC)
            dP = -tl.sum(dy * qS, axis=1) - tl.where(last, tl.sum(tl.sum(dW * S, axis=1), axis=0), 0.0)
            dTh = tl.where(last, tl.sum(tl.sum(dS * S, axis=1), axis=0), 0.0)
            dq -= P[:, None] * dot(dy, S, PREC)
            kdS_c = dot(k, tl.trans(dS), PREC)
            rc = tl.sum(rr[:, None] * Gc, axis=0)
        else:
            Meta = LA * eta[None, :]
            wl = E * eta
        Cc = dot(Meta, Gc, PREC)
        Kc = dot(q, tl.trans(k), PREC)
        cl_c = tl.sum(wl[:, None] * Gc, axis=0)
        if HAS_HALO:
            Ch = dot(Meta, Gh, PREC)
            Kh = dot(q, tl.trans(kh), PREC)
            cl_h = tl.sum(wl[:, None] * Gh, axis=0)
            kdW_h = dot(kh, tl.trans(dW), PREC)
            if MOMENTUM:
                kdS_h = dot(kh, tl.trans(dS), PREC)
                rh = tl.sum(rr[:, None] * Gh, axis=0)
        if DECAY_FIRST:
            Meta1 = Meta * A[None, :]
            wl1 = wl * A
            C1c = dot(Meta1, Gc, PREC)
            c1l_c = tl.sum(wl1[:, None] * Gc, axis=0)
            f0c = dot(k, tl.trans(W), PREC)
            # y -= (C1 * K) f0 - (C2 * K) v;  upd = (c1l f0 - cl v)^T k
            dM1c = -dot(dy, tl.trans(f0c), PREC)
            dM2c = dot(dy, tl.trans(v), PREC)
            df0c = -dot(tl.trans(C1c * Kc), dy, PREC) - c1l_c[:, None] * kdW_c
            dvc = dot(tl.trans(Cc * Kc), dy, PREC) + cl_c[:, None] * kdW_c
            dkc = -dot(c1l_c[:, None] * f0c - cl_c[:, None] * v, dW, PREC)
            dc1l_c = -tl.sum(f0c * kdW_c, axis=1)
            dcl_c = tl.sum(v * kdW_c, axis=1)
            dC1c = dM1c * Kc
            dCc = dM2c * Kc
            dKc = dM1c * C1c + dM2c * Cc
            dMeta1 = dot(dC1c, tl.trans(Gc), PREC)
            dMeta = dot(dCc, tl.trans(Gc), PREC)
            dGc = (
                dot(tl.trans(Meta1), dC1c, PREC)
                + dot(tl.trans(Meta), dCc, PREC)
                + wl1[:, None] * dc1l_c[None, :]
                + wl[:, None] * dcl_c[None, :]
            )
            dwl1 = tl.sum(Gc * dc1l_c[None, :], axis=1)
            dwl = tl.sum(Gc * dcl_c[None, :], axis=1)
            if HAS_HALO:
                C1h = dot(Meta1, Gh, PREC)
                c1l_h = tl.sum(wl1[:, None] * Gh, axis=0)
                f0h = dot(kh, tl.trans(W), PREC)
                dM1h = -dot(dy, tl.trans(f0h), PREC)
                dM2h = dot(dy, tl.trans(vh), PREC)
                df0h = -dot(tl.trans(C1h * Kh), dy, PREC) - c1l_h[:, None] * kdW_h
                dvh = dot(tl.trans(Ch * Kh), dy, PREC) + cl_h[:, None] * kdW_h
                dkh = -dot(c1l_h[:, None] * f0h - cl_h[:, None] * vh, dW, PREC)
                dc1l_h = -tl.sum(f0h * kdW_h, axis=1)
                dcl_h = tl.sum(vh * kdW_h, axis=1)
                dC1h = dM1h * Kh
                dCh = dM2h * Kh
                dKh = dM1h * C1h + dM2h * Ch
                dMeta1 += dot(dC1h, tl.trans(Gh), PREC)
                dMeta += dot(dCh, tl.trans(Gh), PREC)
                dGh = (
                    dot(tl.trans(Meta1), dC1h, PREC)
                    + dot(tl.trans(Meta), dCh, PREC)
                    + wl1[:, None] * dc1l_h[None, :]
                    + wl[:, None] * dcl_h[None, :]
                )
                dwl1 += tl.sum(Gh * dc1l_h[None, :], axis=1)
                dwl += tl.sum(Gh * dcl_h[None, :], axis=1)
            # Meta1 = LA diag(eta A), Meta = LA diag(eta); wl1 = E eta A, wl = E eta
            Z1 = dMeta1 * Meta1
            Z = Z1 + dMeta * Meta
            deta = tl.sum(dMeta1 * LA, axis=0) * A + tl.sum(dMeta * LA, axis=0) + (dwl1 * A + dwl) * E
            zl = dwl1 * wl1 + dwl * wl
            dla_extra = tl.sum(Z1, axis=0) + dwl1 * wl1  # the A_n factor of Meta1 and wl1
        else:
            if L2:
                ec = dot(k, tl.trans(W), PREC) - v
            else:
                ec = -v
            # y -= (C * K) e;  upd = (cl e)^T k;  mom = (r e)^T k
            dMc = -dot(dy, tl.trans(ec), PREC)
            dec = -dot(tl.trans(Cc * Kc), dy, PREC) - cl_c[:, None] * kdW_c
            dkc = -cl_c[:, None] * dot(ec, dW, PREC)
            dcl_c = -tl.sum(ec * kdW_c, axis=1)
            dCc = dMc * Kc
            dKc = dMc * Cc
            dMeta = dot(dCc, tl.trans(Gc), PREC)
            dGc = dot(tl.trans(Meta), dCc, PREC) + wl[:, None] * dcl_c[None, :]
            dwl = tl.sum(Gc * dcl_c[None, :], axis=1)
            if MOMENTUM:
                dec += rc[:, None] * kdS_c
                dkc += rc[:, None] * dot(ec, dS, PREC)
                dr_c = tl.sum(ec * kdS_c, axis=1)
                dGc += rr[:, None] * dr_c[None, :]
                drr = tl.sum(Gc * dr_c[None, :], axis=1)
            dvc = -dec
            if L2:
                df0c = dec
            if HAS_HALO:
                if L2:
                    eh = dot(kh, tl.trans(W), PREC) - vh
                else:
                    eh = -vh
                dMh = -dot(dy, tl.trans(eh), PREC)
                deh = -dot(tl.trans(Ch * Kh), dy, PREC) - cl_h[:, None] * kdW_h
                dkh = -cl_h[:, None] * dot(eh, dW, PREC)
                dcl_h = -tl.sum(eh * kdW_h, axis=1)
                dCh = dMh * Kh
                dKh = dMh * Ch
                dMeta += dot(dCh, tl.trans(Gh), PREC)
                dGh = dot(tl.trans(Meta), dCh, PREC) + wl[:, None] * dcl_h[None, :]
                dwl += tl.sum(Gh * dcl_h[None, :], axis=1)
                if MOMENTUM:
                    deh += rh[:, None] * kdS_h
                    dkh += rh[:, None] * dot(eh, dS, PREC)
                    dr_h = tl.sum(eh * kdS_h, axis=1)
                    dGh += rr[:, None] * dr_h[None, :]
                    drr += tl.sum(Gh * dr_h[None, :], axis=1)
                dvh = -deh
                if L2:
                    df0h = deh
            if MOMENTUM:
                # Meta = Q diag(eta), Q = LA LT, wl = Q[L-1] eta, rr = ET eta, P = LA Th
                deta = tl.sum(dMeta * Q, axis=0) + dwl * qL + drr * ET
                dQ = dMeta * eta[None, :] + tl.where(last[:, None], (dwl * eta)[None, :], 0.0)
                dLA = dot(dQ, tl.trans(LT), PREC) + dP[:, None] * Th[None, :]
                dLT = dot(tl.trans(LA), dQ, PREC)
                dTh += tl.sum(dP[:, None] * LA, axis=0)
                Z = dLA * LA
                zl = tl.zeros((BT,), dtype=ACC)
                Z2 = dLT * LT
                zt = drr * rr
                dlt = tl.sum(Z2, axis=1) - tl.sum(Z2, axis=0) - zt + tl.where(last, tl.sum(zt, axis=0), 0.0)
                dlt += dTh * Th
                dlogt = tl.cumsum(dlt, axis=0, reverse=True)
                dtheta = tl.where(theta >= gate_eps, dlogt / tl.maximum(theta, gate_eps), 0.0)
            else:
                Z = dMeta * Meta
                deta = tl.sum(dMeta * LA, axis=0) + dwl * E
                zl = dwl * wl
            dla_extra = tl.zeros((BT,), dtype=ACC)
        # scores K = q k^T
        dq += dot(dKc, k, PREC)
        dkc += dot(tl.trans(dKc), q, PREC)
        if L2:  # f0 = k W^T
            dkc += dot(df0c, W, PREC)
            dW0 += dot(tl.trans(df0c), k, PREC)
        dgc = tl.sum(tl.where(band_c, dGc, 0.0), axis=0)
        if HAS_HALO:
            dq += dot(dKh, kh, PREC)
            dkh += dot(tl.trans(dKh), q, PREC)
            if L2:
                dkh += dot(df0h, W, PREC)
                dW0 += dot(tl.trans(df0h), kh, PREC)
            dgh = tl.sum(tl.where(band_h, dGh, 0.0), axis=0)
        # decays: LA[j, n] = exp(la_j - la_n), E_n = exp(la_L - la_n), A_j = exp(la_j)
        dla = tl.sum(Z, axis=1) - tl.sum(Z, axis=0) - zl + tl.where(last, tl.sum(zl, axis=0), 0.0)
        dla += dA * A + dla_extra
        dlog = tl.cumsum(dla, axis=0, reverse=True)
        dalpha = tl.where(alpha >= gate_eps, dlog / tl.maximum(alpha, gate_eps), 0.0)
        # stores (partial sums over value blocks for everything that reduces over the value dim)
        valid = rows < L
        kmask = valid[:, None] & (rk[None, :] < K)
        part = i_v * B * T * H
        tl.store(dq_ptr + (part + tok)[:, None] * K + rk[None, :], dq.to(dq_ptr.dtype.element_ty), mask=kmask)
        tl.store(dk_ptr + (part + tok)[:, None] * K + rk[None, :], dkc.to(dk_ptr.dtype.element_ty), mask=kmask)
        tl.store(dv_ptr + tok[:, None] * V + rv[None, :], dvc.to(dv_ptr.dtype.element_ty), mask=ymask)
        tl.store(da_ptr + part + tok, dalpha.to(da_ptr.dtype.element_ty), mask=valid)
        tl.store(de_ptr + part + tok, deta.to(de_ptr.dtype.element_ty), mask=valid)
        tl.store(dg_ptr + part + tok, dgc.to(dg_ptr.dtype.element_ty), mask=valid)
        if MOMENTUM:
            tl.store(dth_ptr + part + tok, dtheta.to(dth_ptr.dtype.element_ty), mask=valid)
        if HAS_HALO:
            hvalid = hr < NH
            # halo buffers [NV, B, NT, NH, H, *] (value-block partials) and [B, NT, NH, H, V]
            hrow = ((i_b * NT + i_t) * NH + hr).to(tl.int64) * H + i_h
            hpart = i_v * B * NT * NH * H
            hk_mask = hvalid[:, None] & (rk[None, :] < K)
            hv_mask = hvalid[:, None] & (rv[None, :] < V)
            tl.store(dhk_ptr + (hpart + hrow)[:, None] * K + rk[None, :], dkh, mask=hk_mask)
            tl.store(dhv_ptr + hrow[:, None] * V + rv[None, :], dvh, mask=hv_mask)
            tl.store(dhg_ptr + hpart + hrow, dgh, mask=hvalid)
        if HAS_DWR:
            dW0 += tl.where(i_t == NT - 1, dWR, 0.0)
        dW = dW0
        if MOMENTUM:
            if HAS_DSR:
                dS0 += tl.where(i_t == NT - 1, dSR, 0.0)
            dS = dS0
    tl.store(dw0_ptr + bh_off, dW, mask=wmask)
    if MOMENTUM:
        tl.store(ds0_ptr + bh_off, dS, mask=wmask)


# ----------------------------------------------------------------------------------------------------------------
# host side
# ----------------------------------------------------------------------------------------------------------------


def _blocks(T_chunk: int, NH: int, K: int, V: int, block_v: int | None, prec: str = "ieee"):
    """Tile sizes: chunk BT, halo BH, key BK (whole key dim), value block BV (programs split Dv).

    BV defaults to 32 (16 for 3xTF32, whose operands take more shared memory). Measured on sm_90 compiles (bf16,
    b = 64, num_stages = 1, which the kernels use: the chunk loop's loads are not worth multi-buffering here):
    every backward variant up to Dk = 128 with halo and momentum needs <= 152 KB of shared memory at BV = 64 and
    <= 127 KB at BV = 32 (the 227 KB limit is exceeded with the default 3 stages), and spills fewer registers at 32.
    """
    BT = max(16, triton.next_power_of_2(T_chunk))
    BH = max(16, triton.next_power_of_2(max(NH, 1)))
    BK = max(16, triton.next_power_of_2(K))
    default_bv = 16 if prec == "tf32x3" else MAX_VALUE_BLOCK
    BV = block_v or min(default_bv, max(16, triton.next_power_of_2(V)))
    return BT, BH, BK, BV


def _num_warps(BT: int, BK: int, BV: int) -> int:
    return 4 if max(BT, BK) <= 32 else 8


def _state_strides(t: torch.Tensor, K: int) -> torch.Tensor:
    return t if (t.stride(-1) == 1 and t.stride(-2) == K) else t.contiguous()


class LinearMemoryFunction(torch.autograd.Function):
    """Inputs: q, k [B, T, H, Dk]; v [B, T, H, Dv]; alpha, eta, gamma, theta [B, T, H]; W0, S0 [B, H, Dv, Dk];
    halo_k/v/gamma [B, H, h(, D)]; then the static settings. theta and S0 are read only with momentum.
    Outputs: y [B, T, H, Dv], W_T, W at the last chunk start, S_T, S at the last chunk start ([B, H, Dv, Dk];
    the two S are empty without momentum)."""

    @staticmethod
    def forward(ctx, q, k, v, alpha, eta, gamma, theta, w0, s0, hk, hv, hg, settings):
        chunk, l2, decay_first, momentum, gate_eps, block_v = settings
        B, T, H, K = k.shape
        V = v.shape[-1]
        NH = hk.shape[2]
        NT = triton.cdiv(T, chunk)
        acc_torch, acc, prec = compute_precision(k.dtype, k.device)
        BT, BH, BK, BV = _blocks(chunk, NH, K, V, block_v, prec)
        NV = triton.cdiv(V, BV)
        w0, s0 = _state_strides(w0, K), _state_strides(s0, K)
        y = torch.empty(B, T, H, V, dtype=v.dtype, device=v.device)
        wt = torch.empty(B, H, V, K, dtype=acc_torch, device=v.device)
        h0 = torch.empty(B, H, NT, V, K, dtype=acc_torch, device=v.device)
        shape_s = (B, H, V, K) if momentum else (0,)
        st = torch.empty(shape_s, dtype=acc_torch, device=v.device)
        hs0 = torch.empty((B, H, NT, V, K) if momentum else (0,), dtype=acc_torch, device=v.device)
        _linear_fwd_kernel[(NV, B * H)](
            q, k, v, alpha, eta, gamma, theta, hk, hv, hg,
            w0, w0.stride(0), w0.stride(1), s0, s0.stride(0), s0.stride(1),
            y, wt, h0, st, hs0,
            T, H, K, V, NH, chunk, NT, float(gate_eps),
            BT=BT, BH=BH, BK=BK, BV=BV, L2=l2, DECAY_FIRST=decay_first, MOMENTUM=momentum, HAS_HALO=NH > 0,
            ACC=acc, PREC=prec, num_warps=_num_warps(BT, BK, BV), num_stages=1,
        )  # fmt: skip
        ctx.save_for_backward(q, k, v, alpha, eta, gamma, theta, hk, hv, hg, h0, hs0)
        ctx.settings = settings
        ctx.state_dtypes = (w0.dtype, s0.dtype)
        sr = hs0[:, :, NT - 1].clone() if momentum else st
        return y, wt, h0[:, :, NT - 1].clone(), st, sr

    @staticmethod
    def backward(ctx, dy, dwt, dwr, dst, dsr):
        q, k, v, alpha, eta, gamma, theta, hk, hv, hg, h0, hs0 = ctx.saved_tensors
        chunk, l2, decay_first, momentum, gate_eps, block_v = ctx.settings
        B, T, H, K = k.shape
        V = v.shape[-1]
        NH = hk.shape[2]
        NT = triton.cdiv(T, chunk)
        acc_torch, acc, prec = compute_precision(k.dtype, k.device)
        BT, BH, BK, BV = _blocks(chunk, NH, K, V, block_v, prec)
        NV = triton.cdiv(V, BV)
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
        nh = max(NH, 1)
        dhk = torch.empty(NV, B, NT, nh, H, K, dtype=acc_torch, device=dev)
        dhv = torch.empty(B, NT, nh, H, V, dtype=acc_torch, device=dev)
        dhg = torch.empty(NV, B, NT, nh, H, dtype=acc_torch, device=dev)
        has = [
            g is not None and momentum_ok
            for g, momentum_ok in ((dwt, True), (dwr, True), (dst, momentum), (dsr, momentum))
        ]
        dwt_c, dwr_c, dst_c, dsr_c = (g.contiguous() if h else dw0 for g, h in zip((dwt, dwr, dst, dsr), has))
        _linear_bwd_kernel[(NV, B * H)](
            q, k, v, alpha, eta, gamma, theta, hk, hv, hg, h0, hs0, dy, dwt_c, dwr_c, dst_c, dsr_c,
            dq, dk, dv, dgates[0], dgates[1], dgates[2], dgates[3] if momentum else dgates[2], dw0, ds0,
            dhk, dhv, dhg,
            B, T, H, K, V, NH, chunk, NT, float(gate_eps),
            BT=BT, BH=BH, BK=BK, BV=BV, L2=l2, DECAY_FIRST=decay_first, MOMENTUM=momentum, HAS_HALO=NH > 0,
            HAS_DWT=has[0], HAS_DWR=has[1], HAS_DST=has[2], HAS_DSR=has[3], ACC=acc, PREC=prec,
            num_warps=_num_warps(BT, BK, BV), num_stages=1,
        )  # fmt: skip
        dq, dk, dgates = dq.sum(0), dk.sum(0), dgates.sum(1)
        dhalo = [None, None, None]
        if NH > 0:
            # window tokens of chunk i's halo sit at extended positions i * chunk + r (the extended sequence is
            # the incoming halo followed by the T tokens)
            index = (torch.arange(NT, device=dev)[:, None] * chunk + torch.arange(NH, device=dev)[None, :]).flatten()
            parts = (
                (dk, dhk.sum(0).reshape(B, NT * NH, H, K)),
                (dv, dhv.reshape(B, NT * NH, H, V)),
                (dgates[2], dhg.sum(0).reshape(B, NT * NH, H)),
            )
            for slot, (dseq, dhal) in enumerate(parts):
                ext = torch.zeros(B, NH + T, *dseq.shape[2:], dtype=acc_torch, device=dev)
                ext.index_add_(1, index, dhal)
                dseq += ext[:, NH:]
                dhalo[slot] = ext[:, :NH].transpose(1, 2).to(hk.dtype if slot < 2 else hg.dtype)
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
    return common_unsupported(cfg, q, memory="linear", op="the Triton op")


def memory_chunk_triton(q, k, v, gates, params, cfg: MemoryConfig, state: MemoryState | None = None, block_v=None):
    """The chunkwise linear memory in Triton. Arguments and returns as `atlas_kernels.memory_chunk`.

    States interoperate with the torch op both ways (same `MemoryState` fields and dtypes); a state with pending
    tokens (a sequence that ended inside a chunk) is resumed exactly like the torch op does (its pending tokens
    are re-run from the chunk start), and a call that ends inside a chunk returns such a state.
    `block_v` overrides the value-dim block of a program (tests; default min(64, next power of 2 of Dv)).
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
        w0 = params["W"].unsqueeze(0).expand(B, *params["W"].shape)
        s0 = w0.new_zeros(B, H, V, K) if momentum else w0
        hk = k.new_zeros(B, H, NH, K, dtype=acc_torch)
        hv = k.new_zeros(B, H, NH, V, dtype=acc_torch)
        hg = k.new_zeros(B, H, NH, dtype=acc_torch)
    else:
        if state.kernel_keys is not None or state.explicit_exp or (state.momentum is None) == momentum:
            raise ValueError(f"state: not a state of linear memory with optimizer={cfg.optimizer!r}")
        w0 = state.weights["W"]
        s0 = state.momentum["W"] if momentum else w0
        hk, hv, hg = state.halo_k, state.halo_v, state.halo_gamma
        if hk.shape[2] != NH:
            raise ValueError(f"state: halo of {hk.shape[2]} tokens, expected window - 1 = {NH}")
    hk, hv, hg = hk.contiguous(), hv.contiguous(), hg.contiguous()
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
            qc, kc, vc, alpha, eta, gamma, theta, w0, s0, hk, hv, hg, settings
        )

    def _state(end, W, S):
        return MemoryState(
            weights={"W": W},
            momentum={"W": S} if momentum else None,
            halo_k=window_tail(kc, hk, end, NH).to(acc_torch),
            halo_v=window_tail(vc, hv, end, NH).to(acc_torch),
            halo_gamma=window_tail(gamma, hg, end, NH).to(acc_torch),
        )

    new_state = _state(T, wt, st)
    tail = T % cfg.chunk_size
    if tail:
        start = T - tail
        new_state.resume = _state(start, wr, sr)
        pend = {"k": kc, "v": vc, "alpha": alpha, "eta": eta, "theta": theta, "gamma": gamma}
        new_state.pending = {n: t[:, start:].to(acc_torch) for n, t in pend.items()}
    return y[:, n_pending:], new_state
