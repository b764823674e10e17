"""Stages of a chunk that the Triton memory kernels share: the linear family (`triton/linear_kernels.py`) and the
MLP family (`triton/mlp_kernels.py`, `triton/mlp_bwd.py`) both walk the chunks of one (batch, head), load each
chunk and its window, and build the same decay and window-band coefficients (docs/chunkwise.md, (C1)-(C5)).

Layouts: token tensors are public [B, T, H(, D)] (flat token index `tok` = (b T + t) H + h); the incoming halo is
[B, H, HALO(, D)] with HALO = c - 1 (`state.halo_size`). Rows past the chunk's end are masked: they load keys and
values 0, alpha = theta = 1 and eta = gamma = 0, so they neither decay nor update anything.
"""

from __future__ import annotations

import triton
import triton.language as tl

from atlas_kernels.ops.triton_common import dot

# ----------------------------------------------------------------------------------------------------------------
# where a chunk's tokens live, and loading them
# ----------------------------------------------------------------------------------------------------------------


@triton.jit
def chunk_span(i_t, CHUNK, T, H, i_b, i_h, rows):
    """Chunk i_t of (i_b, i_h): its start s, its length L <= CHUNK, the token index of each tile row, which rows
    hold a token, and which row is the last."""
    s = i_t * CHUNK
    L = tl.minimum(CHUNK, T - s)
    tok = (i_b * T + s + rows).to(tl.int64) * H + i_h
    return s, L, tok, rows < L, rows == L - 1


@triton.jit
def load_rows(ptr, tok, valid, cols, D, ACC: tl.constexpr):
    """Rows `tok` of a [..., D] tensor at columns `cols`, as ACC (masked rows and columns >= D: 0)."""
    mask = valid[:, None] & (cols[None, :] < D)
    return tl.load(ptr + tok[:, None] * D + cols[None, :], mask=mask, other=0.0).to(ACC)


@triton.jit
def store_rows(ptr, tok, valid, cols, D, x):
    """Writes x to rows `tok`, columns `cols` of a [..., D] tensor, in the tensor's dtype."""
    mask = valid[:, None] & (cols[None, :] < D)
    tl.store(ptr + tok[:, None] * D + cols[None, :], x.to(ptr.dtype.element_ty), mask=mask)


@triton.jit
def load_gates(a_ptr, e_ptr, th_ptr, tok, valid, MOMENTUM: tl.constexpr, ACC: tl.constexpr):
    """alpha, eta and theta of the chunk's tokens; without momentum theta is alpha (never read then)."""
    alpha = tl.load(a_ptr + tok, mask=valid, other=1.0).to(ACC)
    eta = tl.load(e_ptr + tok, mask=valid, other=0.0).to(ACC)
    theta = alpha
    if MOMENTUM:
        theta = tl.load(th_ptr + tok, mask=valid, other=1.0).to(ACC)
    return alpha, eta, theta


@triton.jit
def window_source(rw, s, span, T, H, HALO, i_b, i_h):
    """Where window rows rw of the chunk starting at s come from. Row w is position s - HALO + w of the extended
    sequence (the incoming halo, then the T tokens): for w < span at a position >= 0 the sequence token `tok`,
    for a position < 0 entry s + w of the incoming halo (`sidx`, [B, H, HALO] layout)."""
    pos = s - HALO + rw
    in_seq = (rw < span) & (pos >= 0)
    in_state = (rw < HALO) & (pos < 0)
    tok = (i_b * T + pos).to(tl.int64) * H + i_h
    sidx = ((i_b * H + i_h) * HALO + s + rw).to(tl.int64)
    return tok, sidx, in_seq, in_state


@triton.jit
def load_window_rows(seq_ptr, halo_ptr, tok, sidx, in_seq, in_state, cols, D, ACC: tl.constexpr):
    """Window rows of a [..., D] tensor (keys or values) from the sequence or the incoming halo (`window_source`)."""
    cmask = cols[None, :] < D
    x = tl.load(seq_ptr + tok[:, None] * D + cols[None, :], mask=in_seq[:, None] & cmask, other=0.0).to(ACC)
    x += tl.load(halo_ptr + sidx[:, None] * D + cols[None, :], mask=in_state[:, None] & cmask, other=0.0).to(ACC)
    return x


@triton.jit
def load_window_gate(seq_ptr, halo_ptr, tok, sidx, in_seq, in_state, ACC: tl.constexpr):
    """Window gates gamma from the sequence or the incoming halo (`window_source`); 0 outside both."""
    g = tl.load(seq_ptr + tok, mask=in_seq, other=0.0).to(ACC)
    g += tl.load(halo_ptr + sidx, mask=in_state, other=0.0).to(ACC)
    return g


@triton.jit
def load_window(
    k_ptr, v_ptr, g_ptr, halo_k_ptr, halo_v_ptr, halo_gamma_ptr,
    rw, s, span, T, H, HALO, i_b, i_h, rk, rv, K, V, ACC: tl.constexpr,
):  # fmt: skip
    """Keys [BW, BK], values [BW, BV] and gates gamma [BW] of window rows rw (`window_source`)."""
    tok, sidx, in_seq, in_state = window_source(rw, s, span, T, H, HALO, i_b, i_h)
    wk = load_window_rows(k_ptr, halo_k_ptr, tok, sidx, in_seq, in_state, rk, K, ACC)
    wv = load_window_rows(v_ptr, halo_v_ptr, tok, sidx, in_seq, in_state, rv, V, ACC)
    wg = load_window_gate(g_ptr, halo_gamma_ptr, tok, sidx, in_seq, in_state, ACC)
    return wk, wv, wg


# ----------------------------------------------------------------------------------------------------------------
# coefficients
# ----------------------------------------------------------------------------------------------------------------


@triton.jit
def window_band(rows, w, HALO):
    """[BT, BW] mask of (C1): chunk token n's window covers the window rows w in [n, n + HALO], with the halo
    rows first (window row HALO + n is token n itself)."""
    return (w[None, :] >= rows[:, None]) & (w[None, :] <= rows[:, None] + HALO)


@triton.jit
def log_decay(gate, rows, gate_eps):
    """Decays of one gate (alpha or theta) over a chunk, (C2): lc = cumsum log max(gate, gate_eps), its total, and
    R[j, n] = exp(lc_j - lc_n) = gate_{n+1} ... gate_j for n <= j, 0 above the diagonal."""
    logs = tl.log(tl.maximum(gate, gate_eps))
    lc = tl.cumsum(logs, axis=0)
    total = tl.sum(logs, axis=0)
    lower = rows[None, :] <= rows[:, None]
    R = tl.exp(tl.where(lower, lc[:, None] - lc[None, :], float("-inf")))
    return lc, total, R


@triton.jit
def log_decay_bwd(Z, z_end, d_lc, last, gate, gate_eps):
    """Gradient in `gate` of the decays of `log_decay`, given Z = dR * R (the ratio matrix's gradient times it),
    z_end (that of the per-token factors exp(total - lc_n), times them) and d_lc (that of lc itself). Gates
    clamped at gate_eps get 0."""
    dl = tl.sum(Z, axis=1) - tl.sum(Z, axis=0) - z_end + tl.where(last, tl.sum(z_end, axis=0), 0.0)
    dl += d_lc
    dlog = tl.cumsum(dl, axis=0, reverse=True)
    return tl.where(gate >= gate_eps, dlog / tl.maximum(gate, gate_eps), 0.0)


@triton.jit
def momentum_decay(theta, LA, rows, gate_eps, PREC: tl.constexpr):
    """Momentum decays of one chunk, (C4)-(C5): Th = cumprod theta, LT[m, n] = Th_m / Th_n, Q = LA LT (so that
    C = Q diag(eta) G), P = LA Th (the share of S_0 in W_j), ET = Th_L / Th_n and Th_L."""
    lt, lt_last, LT = log_decay(theta, rows, gate_eps)
    Th = tl.exp(lt)
    Q = dot(LA, LT, PREC)
    P = tl.sum(LA * Th[None, :], axis=1)
    return Th, LT, Q, P, tl.exp(lt_last - lt), tl.exp(lt_last)
