"""Exact chunkwise form of the online delta rule (linear memory, l2 bias, c = 1, gd): the WY/UT trick.

The chunk-start semantics of chunk.py approximate every gradient of a chunk at its start weights. For the
linear delta rule the recurrence is linear in W, so the exact token recurrence also has a chunkwise form
(flash-linear-attention's chunk_delta_rule / chunk_gated_delta_rule):

    W_j = A_j W_0 + sum_{i <= j} (A_j / A_i) u_i phi(k_i)^T,         A_j = alpha_1 ... alpha_j
    u_j = beta_j (v_j - s_j W_{j-1} phi(k_j)),                        beta_j = eta_j gamma_j

with s_j = 1 (gradient at W_{j-1}) or s_j = alpha_j (decay_first, the gated-delta ordering). Expanding
W_{j-1} phi(k_j) gives the unit lower-triangular system (I + M) U = beta (V - c A W_0 phi(K)) with
M[j, i] = beta_j c_j (A_{j-1} / A_i) K(k_i, k_j) for i < j (c_j A_{j-1} = A_j for decay_first), solved per
chunk by forward substitution. Outputs are y_j = A_j W_0 phi(q_j) + sum_{i <= j} (A_j / A_i) K(k_i, q_j) u_i.
Enabled by `MemoryConfig.exact_delta`; chunk size then only trades parallelism for work, never semantics.
"""

from __future__ import annotations

import torch

from atlas_kernels.ops.memory.coefficients import _log_cumprod, _ratio_matrix
from atlas_kernels.ops.memory.state import MemoryState


def delta_system(kc, alpha, beta, kernel, cfg):
    """The state-independent parts of a chunk of the exact delta rule: (A [B, H, L], LA [B, H, L, L], scale [B, H, L],
    I + M [B, H, L, L]): the decays, W_0's scale in token j's read weights (A_j with decay_first, else A_{j-1}) and
    the unit lower-triangular matrix of (C10). Shared by `delta_chunk_step` and the batched chunks (`linear_scan`)."""
    log_a = _log_cumprod(alpha, cfg.gate_eps)
    A = torch.exp(log_a)
    LA = _ratio_matrix(log_a)  # [j, i] = A_j / A_i, i <= j
    L = kc.shape[2]
    strict = torch.ones(L, L, dtype=torch.bool, device=kc.device).tril(-1)
    kk = kernel(kc @ kc.mT)  # [j, i] = K(k_j, k_i)
    # read weights of token j: A_j W0 (decay_first) or A_{j-1} W0 = A_j W0 / alpha_j
    scale = A if cfg.decay_first else A / torch.clamp(alpha, min=cfg.gate_eps)
    inner = LA if cfg.decay_first else LA / torch.clamp(alpha, min=cfg.gate_eps).unsqueeze(-1)
    M = (beta.unsqueeze(-1) * inner * kk) * strict
    eye = torch.eye(L, dtype=kc.dtype, device=kc.device)
    return A, LA, scale, eye + M


def delta_chunk_step(qc, kc, vc, alpha, beta, fq, fk, kernel, state: MemoryState, cfg, target=None):
    """One chunk of the exact delta rule. Shapes: qc, kc [B, H, L, Dk]; vc [B, H, L, Dv]; alpha, beta [B, H, L];
    fq, fk the explicit features [B, H, L, D]; kernel(scores) -> phi(x).phi(y). Returns (y, W_L).

    target: W_init [H, Dv, D] for decay_target="init" (decay toward W_init): the rule is linear in W, so it
    runs on D = W - W_init with values v - W_init phi(k), and W_init phi(q), W_init are added back."""
    W0 = state.weights["W"]
    if target is not None:
        W0 = W0 - target
        vc = vc - fk @ target.mT
    A, LA, scale, tri = delta_system(kc, alpha, beta, kernel, cfg)
    rhs = beta.unsqueeze(-1) * (vc - scale.unsqueeze(-1) * (fk @ W0.mT))
    U = torch.linalg.solve_triangular(tri, rhs, upper=False, unitriangular=True)
    y = A.unsqueeze(-1) * (fq @ W0.mT) + (LA * kernel(qc @ kc.mT)) @ U
    W = A[..., -1, None, None] * W0 + (LA[..., -1, :].unsqueeze(-1) * U).mT @ fk
    if target is not None:
        y, W = y + fq @ target.mT, W + target
    return y, W
