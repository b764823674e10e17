"""The linear memory under gd, all full chunks at once, then a scan of the state over the chunks (docs/chunkwise.md,
"Linear memories: the chunk step is affine in the state").

For a linear memory the chunk step of `chunk._dual_chunk` / `chunk._decay_first_chunk` is affine in the chunk-start
weights W_0 [Dv, F] (F: the feature width of the keys):

    y     = Qeff W_0^T + Vc                    Qeff = diag(A) phi(q) - [l2] (C1 o K) phi(k_w)   [L, F]
                                               Vc   = (C2 o K) v_w                              [L, Dv]
    W_end = W_0 M + U                          M    = A_L I - [l2] phi(k_w)^T diag(c1) phi(k_w) [F, F]
                                               U    = v_w^T diag(c2) phi(k_w)                   [Dv, F]

with K = kernel(q k_w^T) the query-window kernel, C1 = C2 = C the update coefficients (C1 = LA diag(eta A) G and
C2 = LA diag(eta) G with decay_first), c1, c2 their last rows; under the dot bias M = A_L I is a scalar. Qeff, Vc,
M and U depend on the inputs only, so Qeff, Vc and M are built for every chunk in one batch of large operations (the
chunks folded into the batch dimension); what stays sequential is y_c = Qeff_c W_c^T + Vc_c and W <- W M + U, three
batched operations per chunk (U formed there, one chunk at a time), instead of the per-chunk loop's 37-67
(benchmarks/op_counts.md). The outer backward is autograd's. Same values as the loop up to rounding
(tests/test_linear_scan.py, float64).

The exact delta rule (`delta.py`, DeltaNet and Gated DeltaNet) is affine in W_0 too: its chunk's triangular solve
splits into a state-independent pair (`_delta_terms`), so it runs the same scan.

Scope (`batched_linear`): gd, token gates, a finite window, identity or polynomial features, decay toward zero;
under the l2 bias (and the exact delta rule) only up to `MAX_L2_FEATURES` features (M is F x F per chunk and head).
Everything else runs the per-chunk loop.
"""

from __future__ import annotations

import torch

from atlas_kernels.config import MemoryConfig
from atlas_kernels.ops.memory.chunk_terms import fold, windows
from atlas_kernels.ops.memory.coefficients import chunk_decays, update_coefficients, window_gates
from atlas_kernels.ops.memory.delta import delta_system
from atlas_kernels.ops.memory.functional import explicit_features, feature_kernel
from atlas_kernels.ops.memory.inputs import OpInputs
from atlas_kernels.ops.memory.state import MemoryState, halo_size

# Under the l2 bias every chunk carries M [F, F] beside the state [Dv, F]: F / Dv times the state's floats. Wider
# features (degree-2 polynomial keys, thousands wide) keep the per-chunk loop.
MAX_L2_FEATURES = 256


def batched_linear(cfg: MemoryConfig, key_dim: int) -> bool:
    """Whether `linear_chunks` covers this configuration (module docstring)."""
    return (
        cfg.memory == "linear"
        and cfg.optimizer == "gd"
        and cfg.gamma == "token"
        and not cfg.is_global
        and cfg.feature_map in ("identity", "poly")
        and cfg.decay_target == "zero"
        and (cfg.bias == "dot" or cfg.feature_dim(key_dim) <= MAX_L2_FEATURES)  # the exact delta rule is l2
    )


def batch_by_default(cfg: MemoryConfig) -> bool:
    """What `memory_chunk_torch(batch_linear=None)` does: batch identity features. Polynomial features batched ran
    2x slower than the loop on a CPU (benchmarks/linear_scan.md: the backward of their monomial products over all
    chunks at once leaves the cache), so they keep the loop until a GPU times both; `batch_linear=True` batches them."""
    return cfg.feature_map == "identity"


def linear_chunks(x: OpInputs, state: MemoryState, params, cfg: MemoryConfig):
    """The n full chunks of `x` (T = n b tokens, n >= 1) from `state`: (outputs [B, H, T, Dv], the state after the
    last chunk, the state before it), the same as the per-chunk loop returns."""
    B, H, T, _, Dv = x.shape
    b, h = cfg.chunk_size, halo_size(cfg)
    n = T // b
    if n * b != T or n < 1 or state.halo_k.shape[2] != h:
        raise ValueError(f"linear_chunks: expected T a positive multiple of {b} and a halo of {h}, got T={T} and "
                         f"a halo of {state.halo_k.shape[2]}")  # fmt: skip
    wk = windows(state.halo_k, x.k, n, b)
    wv = windows(state.halo_v, x.v, n, b)
    wg = windows(state.halo_gamma, x.gamma, n, b)
    q, alpha, eta = fold(x.q, n, b), fold(x.alpha, n, b), fold(x.eta, n, b)
    fk = explicit_features(wk, params, cfg, allow_triton=True)
    fq = explicit_features(q, params, cfg, allow_triton=True)
    terms = _delta_terms if cfg.exact_delta else _gd_terms
    q_eff, v_c, M, cv = terms(q, wk, wv, wg, alpha, eta, fq, fk, params, cfg)
    # chunk c as one [B H, ...] batch; unbind, not indexing: the backward of t[c] would zero-fill a gradient of all
    # n chunks once per chunk (O(n^2)), unbind's stacks the chunks' gradients once
    per_chunk = lambda t: t.reshape(n, B * H, *t.shape[2:]).unbind(0)  # noqa: E731
    q_eff, v_c, cv, fk = per_chunk(q_eff), per_chunk(v_c), per_chunk(cv), per_chunk(fk)
    M, l2 = per_chunk(M), cfg.bias == "l2"  # M is [F, F] under the l2 bias (the exact delta rule too), else A_L
    W = state.weights["W"].reshape(B * H, Dv, -1)
    outputs = []
    for c in range(n):
        outputs.append(torch.baddbmm(v_c[c], q_eff[c], W.mT))
        W_start = W
        W = torch.baddbmm(W @ M[c] if l2 else M[c] * W, cv[c].mT, fk[c])
    y = torch.stack(outputs, dim=0).reshape(n, B, H, b, Dv).movedim(0, 2).reshape(B, H, T, Dv)

    def at(W_: torch.Tensor, end: int) -> MemoryState:  # the state whose halo ends at sequence position `end`
        return MemoryState(
            weights={"W": W_.reshape(B, H, Dv, -1)},
            momentum=None,
            halo_k=_halo(state.halo_k, x.k, end),
            halo_v=_halo(state.halo_v, x.v, end),
            halo_gamma=_halo(state.halo_gamma, x.gamma, end),
        )

    return y, at(W, T), at(W_start, T - b)


def _gd_terms(q, wk, wv, wg, alpha, eta, fq, fk, params, cfg: MemoryConfig):
    """(Qeff, Vc, M, c2 v_w) of every chunk under gd (module docstring), all [n B, H, ...]; M [F, F] under the l2
    bias, the scalar A_L as [1, 1] under the dot bias."""
    b, h = q.shape[2], wk.shape[2] - q.shape[2]
    G = window_gates(wg, b, h, cfg)
    d = chunk_decays(alpha, alpha, cfg)
    kern = feature_kernel(q @ wk.mT, params, cfg)
    l2 = cfg.bias == "l2"
    if cfg.decay_first and l2:
        C1 = d.LA @ ((eta * d.A).unsqueeze(-1) * G)
        C2 = d.LA @ (eta.unsqueeze(-1) * G)
        K1, K2 = C1 * kern, C2 * kern
    else:
        C1 = C2 = update_coefficients(d, eta, G, cfg)
        K1 = K2 = C1 * kern
    q_eff, A_L, cv = d.A.unsqueeze(-1) * fq, d.A[..., -1, None, None], C2[..., -1, :, None] * wv
    if not l2:
        return q_eff, K2 @ wv, A_L, cv
    eye = torch.eye(fk.shape[-1], dtype=fk.dtype, device=fk.device)
    return q_eff - K1 @ fk, K2 @ wv, A_L * eye - fk.mT @ (C1[..., -1, :, None] * fk), cv


def _delta_terms(q, k, v, gamma, alpha, eta, fq, fk, params, cfg: MemoryConfig):
    """(Qeff, Vc, M, l Ub) of every chunk under the exact delta rule (c = 1: the window is the chunk). The chunk's
    triangular system (`delta.py`) is (I + M_t) U = beta (V - s A_{.} W_0 phi(K)); its solution splits into
    Ub = T beta V and Wk = T (beta s A_{.}) phi(K), T = (I + M_t)^-1, both state-independent, so U = Ub - Wk W_0^T and
    y = (A phi(q) - P Wk) W_0^T + P Ub with P = LA o K(q, k); W_end = W_0 (A_L I - Wk^T diag(l) phi(K)) +
    (l Ub)^T phi(K), l = LA[L - 1, :]."""
    beta = eta * gamma
    A, LA, scale, tri = delta_system(k, alpha, beta, lambda s: feature_kernel(s, params, cfg), cfg)
    rhs = torch.cat([beta.unsqueeze(-1) * v, (beta * scale).unsqueeze(-1) * fk], dim=-1)
    Ub, Wk = torch.linalg.solve_triangular(tri, rhs, upper=False, unitriangular=True).split(
        [v.shape[-1], fk.shape[-1]], dim=-1
    )
    P = LA * feature_kernel(q @ k.mT, params, cfg)
    last = LA[..., -1, :, None]
    eye = torch.eye(fk.shape[-1], dtype=fk.dtype, device=fk.device)
    M = A[..., -1, None, None] * eye - Wk.mT @ (last * fk)
    return A.unsqueeze(-1) * fq - P @ Wk, P @ Ub, M, last * Ub


def _halo(halo: torch.Tensor, seq: torch.Tensor, end: int) -> torch.Tensor:
    """The h tokens before sequence position `end` (reaching into the incoming halo when end < h)."""
    h = halo.shape[2]
    if end >= h:
        return seq[:, :, end - h : end]
    return torch.cat([halo[:, :, end:], seq[:, :, :end]], dim=2)
