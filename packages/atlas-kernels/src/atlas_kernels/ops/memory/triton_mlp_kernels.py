"""Triton pieces of the chunkwise MLP memory shared by its forward and backward kernels, and the forward kernel.

Notation and the chunk math: `triton_mlp.py` (module docstring) and docs/chunkwise.md. Window tile rows w hold the h
halo tokens then the chunk (chunk token n at w = h + n); padded rows and columns load as 0 and get zero
coefficients, so they never reach an output.
"""

from __future__ import annotations

import triton
import triton.language as tl

from atlas_kernels.ops.triton_common import dot


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
def _act2(a, SILU: tl.constexpr):
    """(s(a), s'(a), s''(a)): the backward differentiates the inner gradient, which holds s'."""
    if SILU:
        sg = tl.sigmoid(a)
        return a * sg, sg * (1.0 + a * (1.0 - sg)), sg * (1.0 - sg) * (2.0 + a * (1.0 - 2.0 * sg))
    else:
        pdf = tl.exp(-0.5 * a * a) * 0.3989422804014327
        cdf = 0.5 * (1.0 + tl.erf(a * 0.7071067811865476))
        return a * cdf, cdf + a * pdf, pdf * (2.0 - a * a)


@triton.jit
def _layer_norm(b, w, bias, vmask, V, eps):
    """Row-wise LayerNorm of b [N, BV] over its V valid columns: (output, normalised rows, 1 / std)."""
    mu = tl.sum(b, axis=1) / V  # padded columns of b are 0
    centred = tl.where(vmask[None, :], b - mu[:, None], 0.0)
    inv = 1.0 / tl.sqrt(tl.sum(centred * centred, axis=1) / V + eps)
    yh = centred * inv[:, None]
    return yh * w[None, :] + bias[None, :], yh, inv


@triton.jit
def _ln_bwd(yh, inv, g, w, vmask, V):
    """The LayerNorm backprop of g at the rows with normalised values yh and 1 / std inv (affine weight w)."""
    dy = g * w[None, :]
    out = inv[:, None] * (dy - (tl.sum(dy, axis=1) / V)[:, None] - yh * (tl.sum(dy * yh, axis=1) / V)[:, None])
    return tl.where(vmask[None, :], out, 0.0)


@triton.jit
def _ln_params(lnw_ptr, lnb_ptr, i_h, V, rv, NORM: tl.constexpr, ACC: tl.constexpr):
    """The memory LayerNorm's weight and bias of head i_h (zeros without the norm: never read then)."""
    lnw = tl.zeros_like(rv).to(ACC)
    lnb = tl.zeros_like(rv).to(ACC)
    if NORM:
        lnw = tl.load(lnw_ptr + i_h * V + rv, mask=rv < V, other=0.0).to(ACC)
        lnb = tl.load(lnb_ptr + i_h * V + rv, mask=rv < V, other=0.0).to(ACC)
    return lnw, lnb


@triton.jit
def _load_window(k_ptr, v_ptr, g_ptr, hk_ptr, hv_ptr, hg_ptr, i_b, i_h, s, L, T, H, K, V, NH, rw, rk, rv, ACC):
    """Window tiles (keys [BW, BK], values [BW, BV], gamma [BW]) of the chunk starting at s: positions before the
    sequence start come from the incoming state's halo."""
    kmask = rk < K
    vmask = rv < V
    wpos = s - NH + rw
    in_seq = (rw < NH + L) & (wpos >= 0)
    in_state = (rw < NH) & (wpos < 0)
    wtok = (i_b * T + wpos).to(tl.int64) * H + i_h
    sidx = ((i_b * H + i_h) * NH + s + rw).to(tl.int64)
    wk = tl.load(k_ptr + wtok[:, None] * K + rk[None, :], mask=in_seq[:, None] & kmask[None, :], other=0.0).to(ACC)
    wk += tl.load(hk_ptr + sidx[:, None] * K + rk[None, :], mask=in_state[:, None] & kmask[None, :], other=0.0).to(ACC)
    wv = tl.load(v_ptr + wtok[:, None] * V + rv[None, :], mask=in_seq[:, None] & vmask[None, :], other=0.0).to(ACC)
    wv += tl.load(hv_ptr + sidx[:, None] * V + rv[None, :], mask=in_state[:, None] & vmask[None, :], other=0.0).to(ACC)
    wg = tl.load(g_ptr + wtok, mask=in_seq, other=0.0).to(ACC)
    wg += tl.load(hg_ptr + sidx, mask=in_state, other=0.0).to(ACC)
    return wk, wv, wg


@triton.jit
def _coefficients(alpha, eta, theta, wg, rows, rw, L, NH, gate_eps, MOMENTUM: tl.constexpr, PREC: tl.constexpr):
    """C [BT, BW] and its last row cl, A [BT] and A_L; with momentum P [BT], P_L, r [BW], Th_L (else zeros).

    Padded rows carry alpha = theta = 1 and eta = 0, so the sums over all rows are those over the L valid ones.
    """
    lower = rows[None, :] <= rows[:, None]
    band = (rw[None, :] >= rows[:, None]) & (rw[None, :] <= rows[:, None] + NH)  # token n's window
    last = rows == L - 1
    logs_a = tl.log(tl.maximum(alpha, gate_eps))
    la = tl.cumsum(logs_a, axis=0)
    A = tl.exp(la)
    A_L = tl.exp(tl.sum(logs_a, axis=0))
    LA = tl.exp(tl.where(lower, la[:, None] - la[None, :], float("-inf")))
    G = tl.where(band, wg[None, :], 0.0)
    if MOMENTUM:
        logs_t = tl.log(tl.maximum(theta, gate_eps))
        lt = tl.cumsum(logs_t, axis=0)
        lt_last = tl.sum(logs_t, axis=0)
        Th_L = tl.exp(lt_last)
        LT = tl.exp(tl.where(lower, lt[:, None] - lt[None, :], float("-inf")))
        Meta = dot(LA, LT, PREC) * eta[None, :]
        P = tl.sum(LA * tl.exp(lt)[None, :], axis=1)
        P_L = tl.sum(tl.where(last, P, 0.0), axis=0)
        r = tl.sum((tl.exp(lt_last - lt) * eta)[:, None] * G, axis=0)
    else:
        Meta = LA * eta[None, :]
        P = tl.zeros_like(A)
        P_L = A_L * 0.0
        r = tl.zeros_like(wg)
        Th_L = A_L * 0.0
    C = dot(Meta, G, PREC)
    cl = tl.sum(tl.where(last[:, None], C, 0.0), axis=0)
    return C, cl, A, A_L, P, P_L, r, Th_L


@triton.jit
def _hidden_block(d0, rd, rk, rv, K, V, DH):
    """Hidden block [d0, d0 + BD): its indices and mask, and the offsets and masks of its W1 tile [BV, BD]
    (V x Dh layout) and its W2 / W3 tile [BD, BK] (Dh x K layout)."""
    rdd = d0 + rd
    dmask = rdd < DH
    off1 = rv[:, None] * DH + rdd[None, :]
    m1 = (rv < V)[:, None] & dmask[None, :]
    off2 = rdd[:, None] * K + rk[None, :]
    m2 = dmask[:, None] & (rk < K)[None, :]
    return rdd, dmask, off1, m1, off2, m2


@triton.jit
def _first_layer(wk, W2b, w3_ptr, base2, off2, m2, GATED: tl.constexpr, SILU: tl.constexpr, PREC: tl.constexpr):
    """Hidden block of the memory at W_0 over the window: (h0, s(a0), s'(a0), s''(a0), gate) with a0 = W2 k and
    h0 = s(a0) * gate, gate = W3 k for gated_mlp (else 1)."""
    hs, d1, d2 = _act2(dot(wk, tl.trans(W2b), PREC), SILU)
    g0 = hs * 0.0 + 1.0
    if GATED:
        g0 = dot(wk, tl.trans(tl.load(w3_ptr + base2 + off2, mask=m2, other=0.0)), PREC)
    return hs * g0, hs, d1, d2, g0


@triton.jit
def _retrieval_layer(q, CK, u, A, P, w_ptr, s_ptr, wi_ptr, base, ibase, off, m, MOMENTUM: tl.constexpr,
                     INIT: tl.constexpr, PREC: tl.constexpr):  # fmt: skip
    """A_j W_0 q_j - P_j S_0 q_j - sum_w CK[j, w] u_w for one hidden block of a first layer (W2 or W3), plus
    (1 - A_j) W_init q_j when decaying toward W_init: (the result, its derivative in A_j, S_0 q (0 without
    momentum)); u is the layer's signal over the window."""
    Wq = dot(q, tl.trans(tl.load(w_ptr + base + off, mask=m, other=0.0)), PREC)
    out = A[:, None] * Wq - dot(CK, u, PREC)
    dcoef = Wq
    if INIT:
        Wiq = dot(q, tl.trans(tl.load(wi_ptr + ibase + off, mask=m, other=0.0).to(Wq.dtype)), PREC)
        out += (1.0 - A[:, None]) * Wiq
        dcoef = Wq - Wiq
    Sq = Wq * 0.0
    if MOMENTUM:
        Sq = dot(q, tl.trans(tl.load(s_ptr + base + off, mask=m, other=0.0)), PREC)
        out -= P[:, None] * Sq
    return out, dcoef, Sq


@triton.jit
def _signal(wk, wv, w1_ptr, w2_ptr, w3_ptr, base1, base2, lnw, lnb, K, V, DH, norm_eps, rk, rv, rd,
            BW: tl.constexpr, BV: tl.constexpr, BD: tl.constexpr, L2: tl.constexpr, NORM: tl.constexpr,
            RESIDUAL: tl.constexpr, SILU: tl.constexpr, GATED: tl.constexpr, ACC: tl.constexpr,
            PREC: tl.constexpr):  # fmt: skip
    """The memory at W_0 over the window (hidden blocks): the loss signal e = dl/df and eb, its backprop through
    the LayerNorm (= e without the norm), which is the signal of W1; with the norm also the normalised rows and
    1 / std of b0 = W1 h0 (the backward differentiates eb through them)."""
    vmask = rv < V
    b0 = tl.zeros((BW, BV), dtype=ACC)
    for d0 in range(0, DH, BD):
        rdd, dmask, off1, m1, off2, m2 = _hidden_block(d0, rd, rk, rv, K, V, DH)
        W2b = tl.load(w2_ptr + base2 + off2, mask=m2, other=0.0)
        W1b = tl.load(w1_ptr + base1 + off1, mask=m1, other=0.0)
        h0, hs, d1, d2, g0 = _first_layer(wk, W2b, w3_ptr, base2, off2, m2, GATED, SILU, PREC)
        b0 += dot(h0, tl.trans(W1b), PREC)
    yh0 = b0
    inv0 = tl.sum(b0, axis=1) * 0.0
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
        eb = _ln_bwd(yh0, inv0, e, lnw, vmask, V)
    else:
        eb = e
    return eb, e, yh0, inv0


@triton.jit
def _mlp_fwd_kernel(
    q_ptr, k_ptr, v_ptr, a_ptr, e_ptr, g_ptr, th_ptr, hk_ptr, hv_ptr, hg_ptr, lnw_ptr, lnb_ptr,
    w1_ptr, w2_ptr, w3_ptr, s1_ptr, s2_ptr, s3_ptr, wi1_ptr, wi2_ptr, wi3_ptr, y_ptr,
    T, H, K, V, DH, NH, CHUNK, NT, gate_eps, norm_eps,
    BT: tl.constexpr, BW: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, BD: tl.constexpr,
    L2: tl.constexpr, MOMENTUM: tl.constexpr, NORM: tl.constexpr, RESIDUAL: tl.constexpr, SILU: tl.constexpr,
    GATED: tl.constexpr, INIT: tl.constexpr, ACC: tl.constexpr, PREC: tl.constexpr,
):  # fmt: skip
    """One program per (batch, head), chunks in sequence; the states live in the global buffers
    [B, H, NT + 1, ...] (slot i: start of chunk i; W3 / S3 share W2's layout). With INIT (decay_target="init")
    every A W_0 becomes A W_0 + (1 - A) W_init, W_init [H, ...] the initial weights (wi*_ptr)."""
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
    ibase1 = i_h.to(tl.int64) * V * DH
    ibase2 = i_h.to(tl.int64) * DH * K
    for i_t in range(NT):
        s = i_t * CHUNK
        L = tl.minimum(CHUNK, T - s)
        valid = rows < L
        tok = (i_b * T + s + rows).to(tl.int64) * H + i_h
        q = tl.load(q_ptr + tok[:, None] * K + rk[None, :], mask=valid[:, None] & kmask[None, :], other=0.0).to(ACC)
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
        eb, e0, yh0, inv0 = _signal(wk, wv, w1_ptr, w2_ptr, w3_ptr, base1, base2, lnw, lnb, K, V, DH, norm_eps,
                                    rk, rv, rd, BW, BV, BD, L2, NORM, RESIDUAL, SILU, GATED, ACC, PREC)  # fmt: skip

        # dual-form retrieval and the end-of-chunk state, one hidden block at a time
        CK = C * dot(q, tl.trans(wk), PREC)
        yb = tl.zeros((BT, BV), dtype=ACC)
        scores = tl.zeros((BT, BW), dtype=ACC)
        for d0 in range(0, DH, BD):
            rdd, dmask, off1, m1, off2, m2 = _hidden_block(d0, rd, rk, rv, K, V, DH)
            W2b = tl.load(w2_ptr + base2 + off2, mask=m2, other=0.0)
            W1b = tl.load(w1_ptr + base1 + off1, mask=m1, other=0.0)
            h0, hs, d1, d2, g0 = _first_layer(wk, W2b, w3_ptr, base2, off2, m2, GATED, SILU, PREC)
            dh = dot(eb, W1b, PREC)
            u2 = dh * d1 * g0  # the signals of W2 and W3 (gated): dl/da0, dl/dgate
            a, qW2, qS2 = _retrieval_layer(q, CK, u2, A, P, w2_ptr, s2_ptr, wi2_ptr, base2, ibase2, off2, m2,
                                           MOMENTUM, INIT, PREC)  # fmt: skip
            hq, dqa = _act(a, SILU)
            if GATED:
                u3 = dh * hs
                gt, qW3, qS3 = _retrieval_layer(q, CK, u3, A, P, w3_ptr, s3_ptr, wi3_ptr, base2, ibase2, off2, m2,
                                                MOMENTUM, INIT, PREC)  # fmt: skip
                hq = hq * gt
            yb += A[:, None] * dot(hq, tl.trans(W1b), PREC)
            scores += dot(hq, tl.trans(h0), PREC)
            W2n = A_L * W2b - dot(tl.trans(cl[:, None] * u2), wk, PREC)
            W1n = A_L * W1b - dot(tl.trans(cl[:, None] * eb), h0, PREC)
            if INIT:
                Wi1b = tl.load(wi1_ptr + ibase1 + off1, mask=m1, other=0.0).to(ACC)
                yb += (1.0 - A[:, None]) * dot(hq, tl.trans(Wi1b), PREC)
                W1n += (1.0 - A_L) * Wi1b
                W2n += (1.0 - A_L) * tl.load(wi2_ptr + ibase2 + off2, mask=m2, other=0.0).to(ACC)
            if GATED:
                W3b = tl.load(w3_ptr + base2 + off2, mask=m2, other=0.0)
                W3n = A_L * W3b - dot(tl.trans(cl[:, None] * u3), wk, PREC)
                if INIT:
                    W3n += (1.0 - A_L) * tl.load(wi3_ptr + ibase2 + off2, mask=m2, other=0.0).to(ACC)
            if MOMENTUM:
                S2b = tl.load(s2_ptr + base2 + off2, mask=m2, other=0.0)
                S1b = tl.load(s1_ptr + base1 + off1, mask=m1, other=0.0)
                yb -= P[:, None] * dot(hq, tl.trans(S1b), PREC)
                W2n -= P_L * S2b
                W1n -= P_L * S1b
                S2n = Th_L * S2b + dot(tl.trans(r[:, None] * u2), wk, PREC)
                S1n = Th_L * S1b + dot(tl.trans(r[:, None] * eb), h0, PREC)
                tl.store(s2_ptr + base2 + DH * K + off2, S2n, mask=m2)
                tl.store(s1_ptr + base1 + V * DH + off1, S1n, mask=m1)
                if GATED:
                    S3b = tl.load(s3_ptr + base2 + off2, mask=m2, other=0.0)
                    W3n -= P_L * S3b
                    S3n = Th_L * S3b + dot(tl.trans(r[:, None] * u3), wk, PREC)
                    tl.store(s3_ptr + base2 + DH * K + off2, S3n, mask=m2)
            if GATED:
                tl.store(w3_ptr + base2 + DH * K + off2, W3n, mask=m2)
            tl.store(w2_ptr + base2 + DH * K + off2, W2n, mask=m2)
            tl.store(w1_ptr + base1 + V * DH + off1, W1n, mask=m1)
        yb -= dot(C * scores, eb, PREC)
        if NORM:
            yb, yhy, invy = _layer_norm(yb, lnw, lnb, vmask, V, norm_eps)
        if RESIDUAL:
            yb += q
        ymask = valid[:, None] & vmask[None, :]
        tl.store(y_ptr + tok[:, None] * V + rv[None, :], yb.to(y_ptr.dtype.element_ty), mask=ymask)
        # the next chunk reads the state this one wrote, through other threads of the program
        tl.debug_barrier()
