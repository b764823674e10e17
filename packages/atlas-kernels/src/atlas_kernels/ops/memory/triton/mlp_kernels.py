"""Triton pieces of the chunkwise MLP memory shared by its forward and backward kernels, and the forward kernel.

Notation and the chunk math: `triton/mlp.py` (module docstring) and docs/chunkwise.md. Window tile rows w hold the
HALO halo tokens then the chunk (chunk token n at w = HALO + n); padded rows and columns load as 0 and get zero
coefficients, so they never reach an output. Loading a chunk, its window and the decay coefficients are the stages
the linear kernels share (`triton/stages.py`).
"""

from __future__ import annotations

import triton
import triton.language as tl

from atlas_kernels.ops.memory.triton.stages import (
    chunk_span,
    load_gates,
    load_rows,
    load_window,
    log_decay,
    momentum_decay,
    store_rows,
    window_band,
)
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
def _load_chunk(
    q_ptr, k_ptr, v_ptr, a_ptr, e_ptr, g_ptr, th_ptr, halo_k_ptr, halo_v_ptr, halo_gamma_ptr,
    i_b, i_h, s, L, tok, valid, last, T, H, K, V, HALO, rows, rw, rk, rv, gate_eps,
    MOMENTUM: tl.constexpr, ACC: tl.constexpr, PREC: tl.constexpr,
):  # fmt: skip
    """The chunk's queries [BT, BK], its window tiles (keys [BW, BK], values [BW, BV]; positions before the
    sequence start come from the incoming state's halo) and its coefficients (`_coefficients`)."""
    q = load_rows(q_ptr, tok, valid, rk, K, ACC)
    alpha, eta, theta = load_gates(a_ptr, e_ptr, th_ptr, tok, valid, MOMENTUM, ACC)
    wk, wv, wg = load_window(
        k_ptr, v_ptr, g_ptr, halo_k_ptr, halo_v_ptr, halo_gamma_ptr,
        rw, s, HALO + L, T, H, HALO, i_b, i_h, rk, rv, K, V, ACC,
    )  # fmt: skip
    C, cl, A, A_L, P, P_L, r, Th_L = _coefficients(
        alpha, eta, theta, wg, rows, rw, last, HALO, gate_eps, MOMENTUM, PREC
    )
    return q, wk, wv, C, cl, A, A_L, P, P_L, r, Th_L


@triton.jit
def _coefficients(alpha, eta, theta, wg, rows, rw, last, HALO, gate_eps, MOMENTUM: tl.constexpr, PREC: tl.constexpr):
    """C [BT, BW] and its last row cl, A [BT] and A_L; with momentum P [BT], P_L, r [BW], Th_L (else zeros).

    Padded rows carry alpha = theta = 1 and eta = 0, so the sums over all rows are those over the L valid ones.
    """
    band = window_band(rows, rw, HALO)
    la, la_last, LA = log_decay(alpha, rows, gate_eps)
    A = tl.exp(la)
    A_L = tl.exp(la_last)
    G = tl.where(band, wg[None, :], 0.0)
    if MOMENTUM:
        Th, LT, Q, P, ET, Th_L = momentum_decay(theta, LA, rows, gate_eps, PREC)
        Meta = Q * eta[None, :]
        P_L = tl.sum(tl.where(last, P, 0.0), axis=0)
        r = tl.sum((ET * eta)[:, None] * G, axis=0)
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
def _slot_offsets(i_bh, slot, slots, K, V, DH):
    """Offsets of slot `slot` of (batch, head) i_bh in [B, H, slots, ...] state buffers: in those of W1 [V, Dh] and
    in those of W2 / W3 [Dh, K]."""
    row = i_bh.to(tl.int64) * slots + slot
    return row * V * DH, row * DH * K


@triton.jit
def _start_block(d0, rd, rk, rv, K, V, DH, wk, w1_ptr, w2_ptr, w3_ptr, base1, base2, GATED: tl.constexpr,
                 SILU: tl.constexpr, PREC: tl.constexpr):  # fmt: skip
    """Hidden block [d0, d0 + BD) of the chunk's start weights: its indices and mask, the offsets and masks of its
    W1 tile [BV, BD] (V x Dh layout) and its W2 / W3 tile [BD, BK] (Dh x K layout), the W1 and W2 tiles, and the
    first layer over the window (`_first_layer`)."""
    rdd = d0 + rd
    dmask = rdd < DH
    off1 = rv[:, None] * DH + rdd[None, :]
    m1 = (rv < V)[:, None] & dmask[None, :]
    off2 = rdd[:, None] * K + rk[None, :]
    m2 = dmask[:, None] & (rk < K)[None, :]
    W2b = tl.load(w2_ptr + base2 + off2, mask=m2, other=0.0)
    W1b = tl.load(w1_ptr + base1 + off1, mask=m1, other=0.0)
    h0, hs, d1, d2, g0 = _first_layer(wk, W2b, w3_ptr, base2, off2, m2, GATED, SILU, PREC)
    return rdd, dmask, off1, m1, off2, m2, W1b, W2b, h0, hs, d1, d2, g0


@triton.jit
def _side_tiles(wi_ptr, s_ptr, ibase, base, off, m, Wb, MOMENTUM: tl.constexpr, INIT: tl.constexpr,
                ACC: tl.constexpr):  # fmt: skip
    """The W_init tile (decay_target="init") and the momentum tile of a weight tile Wb; Wb itself where absent."""
    Wib = Wb
    if INIT:
        Wib = tl.load(wi_ptr + ibase + off, mask=m, other=0.0).to(ACC)
    Sb = Wb
    if MOMENTUM:
        Sb = tl.load(s_ptr + base + off, mask=m, other=0.0)
    return Wib, Sb


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
def _read_block(q, CK, eb, W1b, hs, d1, g0, A, P, w2_ptr, s2_ptr, wi2_ptr, w3_ptr, s3_ptr, wi3_ptr, base2, ibase2,
                off2, m2, MOMENTUM: tl.constexpr, INIT: tl.constexpr, SILU: tl.constexpr, GATED: tl.constexpr,
                PREC: tl.constexpr):  # fmt: skip
    """Retrieval through the first layer of one hidden block: dh = W1^T eb over the window, the signals u2 of W2
    (dl/da0) and u3 of W3 (dl/dgate), s(a) and s'(a) at the retrieved a_j, the hidden read-out hq = s(a) (times
    the gate's read-out gt) and the `_retrieval_layer` by-products of W2 and W3. Without the gate, u3, gt and
    W3's by-products are placeholders."""
    dh = dot(eb, W1b, PREC)
    u2 = dh * d1 * g0
    a, qW2, qS2 = _retrieval_layer(q, CK, u2, A, P, w2_ptr, s2_ptr, wi2_ptr, base2, ibase2, off2, m2, MOMENTUM,
                                   INIT, PREC)  # fmt: skip
    sa, dqa = _act(a, SILU)
    hq = sa
    u3 = u2
    gt = sa
    qW3 = qW2
    qS3 = qS2
    if GATED:
        u3 = dh * hs
        gt, qW3, qS3 = _retrieval_layer(q, CK, u3, A, P, w3_ptr, s3_ptr, wi3_ptr, base2, ibase2, off2, m2,
                                        MOMENTUM, INIT, PREC)  # fmt: skip
        hq = sa * gt
    return dh, u2, u3, sa, dqa, gt, hq, qW2, qS2, qW3, qS3


@triton.jit
def _read_out_block(yb, scores, hq, h0, W1b, A, P, wi1_ptr, s1_ptr, ibase1, base1, off1, m1,
                    MOMENTUM: tl.constexpr, INIT: tl.constexpr, ACC: tl.constexpr, PREC: tl.constexpr):  # fmt: skip
    """One hidden block's terms of the second layer's read-out, A_j W1 h_j (+ (1 - A_j) W_init h_j) (- P_j S1 h_j),
    and of the scores h_j . h0_w: (yb, scores, the block's W_init and momentum tiles of W1)."""
    Wi1b, S1b = _side_tiles(wi1_ptr, s1_ptr, ibase1, base1, off1, m1, W1b, MOMENTUM, INIT, ACC)
    yb += A[:, None] * dot(hq, tl.trans(W1b), PREC)
    if INIT:
        yb += (1.0 - A[:, None]) * dot(hq, tl.trans(Wi1b), PREC)
    scores += dot(hq, tl.trans(h0), PREC)
    if MOMENTUM:
        yb -= P[:, None] * dot(hq, tl.trans(S1b), PREC)
    return yb, scores, Wi1b, S1b


@triton.jit
def _end_block(Wb, Wib, Sb, u, z, cl, r, A_L, P_L, Th_L, w_ptr, s_ptr, off, m, MOMENTUM: tl.constexpr,
               INIT: tl.constexpr, PREC: tl.constexpr):  # fmt: skip
    """Writes one tile of a layer's state at the next chunk's start (offset `off`), (C3)-(C5) with signal u and
    input z: W = A_L Wb (+ (1 - A_L) Wib) (- P_L Sb) - sum_w C[L, w] u_w z_w^T;  S = Th_L Sb + sum_w r_w u_w z_w^T."""
    Wn = A_L * Wb - dot(tl.trans(cl[:, None] * u), z, PREC)
    if INIT:
        Wn += (1.0 - A_L) * Wib
    if MOMENTUM:
        Wn -= P_L * Sb
        tl.store(s_ptr + off, Th_L * Sb + dot(tl.trans(r[:, None] * u), z, PREC), mask=m)
    tl.store(w_ptr + off, Wn, mask=m)


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
        rdd, dmask, off1, m1, off2, m2, W1b, W2b, h0, hs, d1, d2, g0 = _start_block(
            d0, rd, rk, rv, K, V, DH, wk, w1_ptr, w2_ptr, w3_ptr, base1, base2, GATED, SILU, PREC
        )
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
def _retrieval(
    q, wk, eb, C, CK, cl, r, A, A_L, P, P_L, Th_L, w1_ptr, w2_ptr, w3_ptr, s1_ptr, s2_ptr, s3_ptr,
    wi1_ptr, wi2_ptr, wi3_ptr, gw1_ptr, gs1_ptr, base1, base2, ibase1, ibase2, gend1, rd, rk, rv, K, V, DH,
    BT: tl.constexpr, BW: tl.constexpr, BV: tl.constexpr, BD: tl.constexpr, MOMENTUM: tl.constexpr,
    INIT: tl.constexpr, SILU: tl.constexpr, GATED: tl.constexpr, END_STATE: tl.constexpr, ACC: tl.constexpr,
    PREC: tl.constexpr,
):  # fmt: skip
    """The dual-form retrieval of the chunk from its start state, one hidden block at a time: the read-out yb
    [BT, BV] before the memory LayerNorm, and the scores. Each block's tiles are used while loaded: with
    END_STATE (the forward) to write the next start state, otherwise (the backward's recompute) to meet the
    gradients of the next start state of W1 (gw1 / gs1 at gend1) with h0: X1 = h0 dW1n^T, Y1 = h0 dS1n^T (zeros
    in the forward)."""
    yb = tl.zeros((BT, BV), dtype=ACC)
    scores = tl.zeros((BT, BW), dtype=ACC)
    X1 = tl.zeros((BW, BV), dtype=ACC)
    Y1 = tl.zeros((BW, BV), dtype=ACC)
    for d0 in range(0, DH, BD):
        rdd, dmask, off1, m1, off2, m2, W1b, W2b, h0, hs, d1, d2, g0 = _start_block(
            d0, rd, rk, rv, K, V, DH, wk, w1_ptr, w2_ptr, w3_ptr, base1, base2, GATED, SILU, PREC
        )
        dh, u2, u3, sa, dqa, gt, hq, qW2, qS2, qW3, qS3 = _read_block(
            q, CK, eb, W1b, hs, d1, g0, A, P, w2_ptr, s2_ptr, wi2_ptr, w3_ptr, s3_ptr, wi3_ptr, base2, ibase2,
            off2, m2, MOMENTUM, INIT, SILU, GATED, PREC,
        )  # fmt: skip
        yb, scores, Wi1b, S1b = _read_out_block(
            yb, scores, hq, h0, W1b, A, P, wi1_ptr, s1_ptr, ibase1, base1, off1, m1, MOMENTUM, INIT, ACC, PREC
        )
        if END_STATE:
            # the next start state (slot i + 1): W1 with signal eb and input h0, W2 and W3 with u2, u3 and k
            _end_block(W1b, Wi1b, S1b, eb, h0, cl, r, A_L, P_L, Th_L, w1_ptr, s1_ptr, base1 + V * DH + off1, m1,
                       MOMENTUM, INIT, PREC)  # fmt: skip
            Wi2b, S2b = _side_tiles(wi2_ptr, s2_ptr, ibase2, base2, off2, m2, W2b, MOMENTUM, INIT, ACC)
            _end_block(W2b, Wi2b, S2b, u2, wk, cl, r, A_L, P_L, Th_L, w2_ptr, s2_ptr, base2 + DH * K + off2, m2,
                       MOMENTUM, INIT, PREC)  # fmt: skip
            if GATED:
                W3b = tl.load(w3_ptr + base2 + off2, mask=m2, other=0.0)
                Wi3b, S3b = _side_tiles(wi3_ptr, s3_ptr, ibase2, base2, off2, m2, W3b, MOMENTUM, INIT, ACC)
                _end_block(W3b, Wi3b, S3b, u3, wk, cl, r, A_L, P_L, Th_L, w3_ptr, s3_ptr, base2 + DH * K + off2,
                           m2, MOMENTUM, INIT, PREC)  # fmt: skip
        else:
            X1 += dot(h0, tl.trans(tl.load(gw1_ptr + gend1 + off1, mask=m1, other=0.0)), PREC)
            if MOMENTUM:
                Y1 += dot(h0, tl.trans(tl.load(gs1_ptr + gend1 + off1, mask=m1, other=0.0)), PREC)
    yb -= dot(C * scores, eb, PREC)
    return yb, scores, X1, Y1


@triton.jit
def _program_head(
    lnw_ptr, lnb_ptr, H, K, V, DH,
    BT: tl.constexpr, BW: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, BD: tl.constexpr,
    NORM: tl.constexpr, ACC: tl.constexpr,
):  # fmt: skip
    """What a program of either kernel owns: (batch, head) i_bh = i_b H + i_h; the indices of the chunk rows, window
    rows, keys, values and of a hidden block; the value mask; the head's LayerNorm parameters; the offsets of its
    W_init in the [H, ...] buffers of W1 and of W2 / W3."""
    i_bh = tl.program_id(0)
    i_b = i_bh // H
    i_h = i_bh % H
    rv = tl.arange(0, BV)
    lnw, lnb = _ln_params(lnw_ptr, lnb_ptr, i_h, V, rv, NORM, ACC)
    return (
        i_bh, i_b, i_h, tl.arange(0, BT), tl.arange(0, BW), tl.arange(0, BK), rv, tl.arange(0, BD), rv < V,
        lnw, lnb, i_h.to(tl.int64) * V * DH, i_h.to(tl.int64) * DH * K,
    )  # fmt: skip


@triton.jit
def _mlp_fwd_kernel(
    q_ptr, k_ptr, v_ptr, a_ptr, e_ptr, g_ptr, th_ptr, halo_k_ptr, halo_v_ptr, halo_gamma_ptr, lnw_ptr, lnb_ptr,
    w1_ptr, w2_ptr, w3_ptr, s1_ptr, s2_ptr, s3_ptr, wi1_ptr, wi2_ptr, wi3_ptr, y_ptr,
    T, H, K, V, DH, HALO, CHUNK, NT, gate_eps, norm_eps,
    BT: tl.constexpr, BW: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, BD: tl.constexpr,
    L2: tl.constexpr, MOMENTUM: tl.constexpr, NORM: tl.constexpr, RESIDUAL: tl.constexpr, SILU: tl.constexpr,
    GATED: tl.constexpr, INIT: tl.constexpr, ACC: tl.constexpr, PREC: tl.constexpr,
):  # fmt: skip
    """One program per (batch, head), chunks in sequence; the states live in the global buffers
    [B, H, NT + 1, ...] (slot i: start of chunk i; W3 / S3 share W2's layout). With INIT (decay_target="init")
    every A W_0 becomes A W_0 + (1 - A) W_init, W_init [H, ...] the initial weights (wi*_ptr)."""
    i_bh, i_b, i_h, rows, rw, rk, rv, rd, vmask, lnw, lnb, ibase1, ibase2 = _program_head(
        lnw_ptr, lnb_ptr, H, K, V, DH, BT, BW, BK, BV, BD, NORM, ACC
    )
    for i_t in range(NT):
        s, L, tok, valid, last = chunk_span(i_t, CHUNK, T, H, i_b, i_h, rows)
        q, wk, wv, C, cl, A, A_L, P, P_L, r, Th_L = _load_chunk(
            q_ptr, k_ptr, v_ptr, a_ptr, e_ptr, g_ptr, th_ptr, halo_k_ptr, halo_v_ptr, halo_gamma_ptr,
            i_b, i_h, s, L, tok, valid, last, T, H, K, V, HALO, rows, rw, rk, rv, gate_eps, MOMENTUM, ACC, PREC,
        )  # fmt: skip
        base1, base2 = _slot_offsets(i_bh, i_t, NT + 1, K, V, DH)
        eb, e0, yh0, inv0 = _signal(wk, wv, w1_ptr, w2_ptr, w3_ptr, base1, base2, lnw, lnb, K, V, DH, norm_eps,
                                    rk, rv, rd, BW, BV, BD, L2, NORM, RESIDUAL, SILU, GATED, ACC, PREC)  # fmt: skip
        CK = C * dot(q, tl.trans(wk), PREC)
        # y_ptr and 0 fill the backward's gradient buffers and their offset, never read with END_STATE
        yb, _, _, _ = _retrieval(
            q, wk, eb, C, CK, cl, r, A, A_L, P, P_L, Th_L, w1_ptr, w2_ptr, w3_ptr, s1_ptr, s2_ptr, s3_ptr,
            wi1_ptr, wi2_ptr, wi3_ptr, y_ptr, y_ptr, base1, base2, ibase1, ibase2, 0, rd, rk, rv, K, V, DH,
            BT, BW, BV, BD, MOMENTUM, INIT, SILU, GATED, True, ACC, PREC,
        )  # fmt: skip
        if NORM:
            yb, yhy, invy = _layer_norm(yb, lnw, lnb, vmask, V, norm_eps)
        if RESIDUAL:
            yb += q
        store_rows(y_ptr, tok, valid, rv, V, yb)
        # the next chunk reads the state this one wrote, through other threads of the program
        tl.debug_barrier()
