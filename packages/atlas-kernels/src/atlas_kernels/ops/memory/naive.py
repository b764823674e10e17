"""The token-by-token recurrence of the memory op: the oracle every fast path is tested against.

It follows the op's definition (docs/memory-op.md) literally: at every token t the window objective
L_t(W) = sum_{i=t-c+1..t} gamma_i l(f(phi(k_i); W), v_i) (gamma="per_step": gamma_{t-i}^(t), token t's own
gate of offset t - i) is differentiated with autograd at the base
weights, the optimizer updates the weights, and y_t = f(phi(q_t); W_t) is read after the update.
`create_graph=True` keeps the whole recurrence differentiable, so outer-loop gradients reach q, k, v,
every gate, the feature coefficients, the LayerNorm and the initial weights. It is slow by design.

Two semantics:
- `memory_naive`: base weights W_{t-1} (the exact recurrence, chunk size 1);
- `memory_naive_chunked`: base weights W_{t'} of the current chunk start t' (cfg.chunk_size), the
  semantics the chunkwise-parallel op computes in closed form. Chunks are counted from the segment start.
With decay_first (gated-delta ordering) the base weights are decayed first: alpha_t W_{t-1}, resp.
(alpha_{t'+1} ... alpha_t) W_{t'}.
With decay_target="init" every decay a W becomes W_0 + a (W - W_0), W_0 the initial weights of `params`.
With norm_placement="readout" the window objective differentiates f without its LayerNorm and only the
read-out y_t applies it.
With feature_map="exp" the oracle uses explicit truncated-Taylor features of phi* (degree
cfg.exp_taylor_degree): keep the key dim small (<= 4) and compare at ~1e-8; its state holds explicit
matrices (`explicit_exp`) and cannot be handed to the chunk op.
"""

from __future__ import annotations

import torch

from atlas_kernels.config import MemoryConfig
from atlas_kernels.ops.memory.functional import bias_loss, explicit_features, memory_forward
from atlas_kernels.ops.memory.inputs import prepare_inputs
from atlas_kernels.ops.memory.params import initial_state
from atlas_kernels.ops.memory.state import MemoryState, halo_size, pending_inputs, resume_inputs
from atlas_kernels.ops.newton_schulz import newton_schulz, newton_schulz_gram
from atlas_kernels.ops.newton_schulz.gram import apply_ns_polynomial, ns_polynomial_of


def memory_naive(q, k, v, gates, params, cfg: MemoryConfig, state: MemoryState | None = None):
    """Exact token recurrence. Arguments and returns as `atlas_kernels.memory_chunk`."""
    return _recurrence(q, k, v, gates, params, cfg, state, chunk_size=1)


def memory_naive_chunked(q, k, v, gates, params, cfg: MemoryConfig, state: MemoryState | None = None):
    """Token loop with every inner gradient taken at the chunk-start weights (chunk size cfg.chunk_size)."""
    return _recurrence(q, k, v, gates, params, cfg, state, chunk_size=cfg.chunk_size)


def _recurrence(q, k, v, gates, params, cfg, state, chunk_size):
    q, k, v, gates, state, n_pending = resume_inputs(q, k, v, gates, state)
    x = prepare_inputs(q, k, v, gates, params, cfg)
    B, H, T, Dk, Dv = x.shape
    if state is None:
        state = initial_state(params, cfg, x.k, Dv, dual_exp=False)
    elif cfg.feature_map == "exp" and not state.explicit_exp:
        raise ValueError("state: the naive oracle needs an explicit-Taylor exp state (from memory_naive)")
    # decay toward W_0 (decay_target="init", same W_0 however the state was seeded) or toward 0
    target = initial_state(params, cfg, x.k, Dv, dual_exp=False).weights if cfg.decay_target == "init" else None

    def decay(a, weights):
        if target is None:
            return {n: a * w for n, w in weights.items()}
        return {n: target[n] + a * (w - target[n]) for n, w in weights.items()}

    W = dict(state.weights)
    S = None if state.momentum is None else dict(state.momentum)
    win_k, win_v, win_g = state.halo_k, state.halo_v, state.halo_gamma
    halo = None if cfg.is_global else halo_size(cfg)
    outputs = []
    # Split once: indexing the full tensors per token makes the backward zero-fill a length-T gradient per
    # token and input (O(T^2)); the backward of split / unbind concatenates once.
    qs, ks, vs, gammas = (t.split(1, dim=2) for t in (x.q, x.k, x.v, x.gamma))
    alphas, etas, thetas = (g.unbind(2) for g in (x.alpha, x.eta, x.theta))
    per_step = cfg.gamma == "per_step"
    polys = {}
    with torch.enable_grad():
        for t in range(T):
            alpha = alphas[t][:, :, None, None]
            win_k = torch.cat([win_k, ks[t]], dim=2)
            win_v = torch.cat([win_v, vs[t]], dim=2)
            # gamma="per_step": the window holds each token's presence; the step's own c gates weight it
            win_g = torch.cat([win_g, torch.ones_like(ks[t][..., 0]) if per_step else gammas[t]], dim=2)
            weight = _step_weights(win_g, gammas[t]) if per_step else win_g
            if t % chunk_size == 0:
                base, decay_prod = W, 1.0
                chunk_start = MemoryState(W, S, win_k[:, :, :-1], win_v[:, :, :-1], win_g[:, :, :-1])
            if cfg.decay_first:
                decay_prod = decay_prod * alpha
                grads = _window_grads(win_k, win_v, weight, decay(decay_prod, base), params, cfg)
            else:
                grads = _window_grads(win_k, win_v, weight, base, params, cfg)
            eta = etas[t][:, :, None, None]
            kept = decay(alpha, W)
            if cfg.optimizer == "gd":
                W = {n: kept[n] - eta * grads[n] for n in W}
            else:
                theta = thetas[t][:, :, None, None]
                if cfg.optimizer == "momentum":
                    S = {n: theta * S[n] + eta * grads[n] for n in W}
                    W = {n: kept[n] - S[n] for n in W}
                else:
                    S = {n: theta * S[n] + grads[n] for n in W}
                    if t % chunk_size == 0 and cfg.muon_polynomial == "chunk":  # the chunk's first momentum
                        polys = {n: ns_polynomial_of(S[n], cfg.ns_steps, cfg.ns_coeffs, cfg.ns_eps) for n in W}
                    W = {n: kept[n] - eta * _muon_direction(S[n], polys.get(n), cfg) for n in W}
            if halo is not None:
                start = win_k.shape[2] - halo
                win_k, win_v, win_g = win_k[:, :, start:], win_v[:, :, start:], win_g[:, :, start:]
            qt = qs[t]
            outputs.append(memory_forward(qt, explicit_features(qt, params, cfg), W, params, cfg))
    o = torch.cat(outputs, dim=2) if outputs else x.v.new_zeros(B, H, 0, Dv)
    final = MemoryState(
        weights=W,
        momentum=S,
        halo_k=win_k,
        halo_v=win_v,
        halo_gamma=win_g,
        explicit_exp=cfg.feature_map == "exp",
    )
    if T % chunk_size:
        chunk_start.explicit_exp = final.explicit_exp
        final.resume, final.pending = chunk_start, pending_inputs(x, T - T % chunk_size)
    return o[:, :, n_pending:].transpose(1, 2), final


def _muon_direction(S: torch.Tensor, poly: torch.Tensor | None, cfg: MemoryConfig) -> torch.Tensor:
    """NS_k(S), or with muon_polynomial="chunk" the chunk's polynomial `poly` applied to S's normalised matrix."""
    if poly is not None:
        return apply_ns_polynomial(S, poly, cfg.ns_eps)
    ns = newton_schulz if cfg.ns_form in ("materialise", "auto") else newton_schulz_gram
    return ns(S, cfg.ns_steps, cfg.ns_coeffs, cfg.ns_eps)


def _step_weights(presence: torch.Tensor, gamma_t: torch.Tensor) -> torch.Tensor:
    """Weights of the window tokens (oldest first, [B, H, n]) from step t's gates [B, H, 1, c] (offset j = 0 is t)."""
    n = presence.shape[2]
    by_position = gamma_t[:, :, 0].flip(-1)  # oldest first: offsets c-1, ..., 0
    return presence * by_position[..., by_position.shape[-1] - n :]


def _window_grads(win_k, win_v, win_g, weights, params, cfg):
    """grad_W sum_i gamma_i l(f(phi(k_i); W), v_i), per batch element and head (weights [B, H, o, i])."""
    # A view made under no_grad of a parameter that requires grad (W_0 expanded over the batch when the op runs
    # under torch.no_grad) is a leaf that requires grad, but autograd.grad returns the gradient of its base,
    # summed over the expanded batch: differentiate a detached copy instead.
    leaves = {n: w if _differentiable(w) else w.detach().requires_grad_(True) for n, w in weights.items()}
    f = memory_forward(win_k, explicit_features(win_k, params, cfg), leaves, params, cfg, inner=True)
    loss = (win_g * bias_loss(f, win_v, cfg)).sum()
    names = list(leaves)
    grads = torch.autograd.grad(loss, [leaves[n] for n in names], create_graph=True, allow_unused=True)
    return {n: (g if g is not None else torch.zeros_like(leaves[n])) for n, g in zip(names, grads)}


def _differentiable(w: torch.Tensor) -> bool:
    return w.requires_grad and not (w.is_leaf and w._base is not None)
