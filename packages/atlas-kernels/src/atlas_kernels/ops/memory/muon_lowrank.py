"""Muon in one chunk without per-token momenta or weights (MemoryConfig.ns_form = "lowrank", docs/muon.md,
"Muon without per-token matrices").

Within a chunk every momentum of a weight W [o, i] is the chunk-start momentum plus a low-rank term,

    S_m = Th_m S_0 + sum_w c[m, w] e_w z_w^T        (c = LTh G, e: the gradient signal, z: the layer input),

and NS_k(S_m) = P_m Y_m with Y_m = S_m / (||S_m||_F + eps) (transposed for a tall W) and P_m the r x r polynomial
of the Gram matrix Y_m Y_m^T (`newton_schulz.gram.ns_polynomial`). That Gram matrix needs S_0 S_0^T, S_0 z_w and
z_w . z_v once per chunk and r x r products per token, never the r x n matrix S_m. The outputs need NS_k(S_m) only
applied to the chunk's layer inputs x_j, W_j x_j = A_j W_0 x_j - sum_{m <= j} LA[j, m] eta_m NS_k(S_m) x_j, with
S_m x_j = Th_m S_0 x_j + sum_w c[m, w] e_w (z_w . x_j); only the chunk-end weights and momentum are formed densely.
Same values as `chunk._muon_chunk` up to rounding; the outer backward is autograd's.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from atlas_kernels.config import MemoryConfig
from atlas_kernels.ops.memory.coefficients import decayed
from atlas_kernels.ops.memory.functional import compose_memory
from atlas_kernels.ops.newton_schulz.gram import ns_polynomial
from atlas_kernels.ops.newton_schulz.spectral import ns_polynomial_spectral

# ns_form="auto" on a CPU: the factored path from this many entries of the largest weight Muon updates. Below it a
# per-token path's few large products beat the factored path's many small ones (docs/muon.md, "Choosing the form",
# benchmarks/muon_forms.md: from 4,096 entries the factored path won at 5 of 6 measured shapes, 1.1-2.5x).
FACTORED_MIN_WEIGHT = 4096
# The per-token form ns_form="auto" takes below that size: the Newton-Schulz steps on the r x r Gram matrix, which
# beat the steps on the r x n iterate at every measured shape below the threshold (benchmarks/muon_forms.md).
AUTO_PER_TOKEN_FORM = "gram"


def resolve_ns_form(cfg: MemoryConfig, weight_shapes: Iterable[tuple[int, int]], device: torch.device) -> str:
    """The Muon form a chunk runs: "lowrank" (the factored path here), "gram" or "materialise" (per-token momenta,
    `chunk._muon_chunk`), for the (out, in) shapes of the weights Muon updates."""
    if cfg.muon_polynomial == "chunk" or cfg.ns_form == "lowrank":
        return "lowrank"
    if cfg.ns_form != "auto":
        return cfg.ns_form
    if device.type != "cpu" or max(o * i for o, i in weight_shapes) >= FACTORED_MIN_WEIGHT:
        return "lowrank"
    return AUTO_PER_TOKEN_FORM


def uses_factored_path(cfg: MemoryConfig, weight_shapes: Iterable[tuple[int, int]], device: torch.device) -> bool:
    """Whether a Muon chunk runs here (True) or in `chunk._muon_chunk` (per-token momenta)."""
    return resolve_ns_form(cfg, weight_shapes, device) == "lowrank"


@dataclass
class _Orthogonalised:
    """NS_k(S_m) of every chunk token m of one weight, in factored form.

    In the wide orientation (r = rows <= columns; a tall W is transposed): S'_m = Th_m s0 + left^T diag(c_m) right,
    NS_k(S'_m) = scale_m P_m S'_m, and NS_k(S_m) is that (tall: its transpose).
    """

    poly: torch.Tensor  # P_m [B, H, L, r, r]
    scale: torch.Tensor  # 1 / (||S_m||_F + eps) [B, H, L]
    s0: torch.Tensor  # S_0 or S_0^T [B, H, r, n]
    left: torch.Tensor  # e_w or z_w [B, H, N, r]
    right: torch.Tensor  # z_w or e_w [B, H, N, n]
    coef: torch.Tensor  # c[m, w] [B, H, L, N]
    th: torch.Tensor  # Th_m [B, H, L]
    tall: bool

    def apply(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """sum_m weight[j, m] NS_k(S_m) x_j for the chunk tokens' inputs x [B, H, L, i] -> [B, H, L, o]."""
        w = weight * self.scale.unsqueeze(-2)  # [B, H, j, m]
        if self.tall:  # NS_k(S_m) x = scale_m S_m (P_m^T x): S_m = Th_m S_0 + sum_w c e_w z_w^T, S_0 = s0^T
            u = x.unsqueeze(2) @ self.poly  # [B, H, m, j, i]: (P_m^T x_j)^T
            zu = (u @ self.left.mT.unsqueeze(2)) * self.coef.unsqueeze(-2)  # c[m, w] (z_w . u)
            su = self.th[..., None, None] * (u @ self.s0.unsqueeze(2)) + zu @ self.right.unsqueeze(2)
        else:  # NS_k(S_m) x = scale_m P_m (Th_m S_0 x + sum_w c e_w (z_w . x))
            lowrank = self.coef.unsqueeze(-1) * self.left.unsqueeze(2)  # [B, H, m, w, o]
            sx = (x @ self.s0.mT).unsqueeze(2) * self.th[..., None, None]  # [B, H, m, j, o]
            sx = sx + (x @ self.right.mT).unsqueeze(2) @ lowrank
            su = sx @ self.poly.mT
        return torch.einsum("bhjm,bhmjo->bhjo", w, su)

    def weighted_sum(self, weight: torch.Tensor) -> torch.Tensor:
        """sum_m weight[m] NS_k(S_m) [B, H, o, i] for weights [B, H, L] (the chunk-end update)."""
        w = weight * self.scale
        start = torch.einsum("bhm,bhmrs->bhrs", w * self.th, self.poly) @ self.s0
        pe = self.poly @ self.left.mT.unsqueeze(2)  # P_m e'_w [B, H, m, r, N]
        per_window = torch.einsum("bhmw,bhmrw->bhrw", w.unsqueeze(-1) * self.coef, pe)
        total = start + per_window @ self.right
        return total.mT if self.tall else total


def _oriented(S0, signal, z):
    """(s0, left, right, tall): the factors of S_m in the wide orientation (a tall W is transposed)."""
    tall = S0.shape[-2] > S0.shape[-1]
    return (S0.mT, z, signal, tall) if tall else (S0, signal, z, tall)


def _orthogonalise(S0, signal, z, coef, th, cfg: MemoryConfig, recompute: bool) -> _Orthogonalised:
    """Scale and Newton-Schulz polynomial of every S_m = Th_m S0 + sum_w coef[m, w] signal_w z_w^T.

    S0 [B, H, o, i], signal [B, H, N, o], z [B, H, N, i], coef [B, H, L, N], th [B, H, L]. `recompute`: the
    normalised Gram matrices under a checkpoint, rebuilt from these inputs in the backward.
    """
    s0, left, right, tall = _oriented(S0, signal, z)
    poly, scale = _polynomials(s0, left, right, coef, th, cfg, recompute)
    return _Orthogonalised(poly, scale, s0, left, right, coef, th, tall)


def _orthogonalise_padded(momenta: dict, coef, th, cfg: MemoryConfig, recompute: bool) -> dict[str, _Orthogonalised]:
    """`_orthogonalise` of every weight ({name: (S0, signal, z)}) in one stacked set of operations.

    Each weight's wide factors are zero-padded to the largest r and n and stacked in front. Zero columns of s0 and
    right add nothing to any inner product; zero rows of s0 and columns of left give the Gram matrix zero rows and
    columns, so the norm is unchanged and each Newton-Schulz step a I + b A + c A^2 stays block-diagonal: the
    weight's own r x r block is its polynomial exactly (docs/muon.md, "One batch for all the weights").
    """
    oriented = {name: _oriented(*m) for name, m in momenta.items()}
    r = max(o[0].shape[-2] for o in oriented.values())
    n = max(o[0].shape[-1] for o in oriented.values())

    def pad(t: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
        return F.pad(t, (0, cols - t.shape[-1], 0, rows - t.shape[-2]))

    s0 = torch.stack([pad(o[0], r, n) for o in oriented.values()])  # [W, B, H, r, n]
    left = torch.stack([pad(o[1], o[1].shape[-2], r) for o in oriented.values()])  # [W, B, H, N, r]
    right = torch.stack([pad(o[2], o[2].shape[-2], n) for o in oriented.values()])  # [W, B, H, N, n]
    poly, scale = _polynomials(s0, left, right, coef, th, cfg, recompute)
    out = {}
    for i, (name, (w_s0, w_left, w_right, tall)) in enumerate(oriented.items()):
        rows = w_s0.shape[-2]
        out[name] = _Orthogonalised(poly[i, ..., :rows, :rows], scale[i], w_s0, w_left, w_right, coef, th, tall)
    return out


def orthogonalise_all(momenta: dict, coef, th, cfg: MemoryConfig, recompute: bool) -> dict[str, _Orthogonalised]:
    """{name: _Orthogonalised} for {name: (S0, signal, z)}, per weight or stacked (MemoryConfig.muon_batch)."""
    if cfg.muon_batch == "padded" and len(momenta) > 1:
        return _orthogonalise_padded(momenta, coef, th, cfg, recompute)
    return {name: _orthogonalise(*m, coef, th, cfg, recompute) for name, m in momenta.items()}


def _polynomials(s0, left, right, coef, th, cfg: MemoryConfig, recompute: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(P_m [..., L, r, r], scale_m [..., L]) of the wide factors (any leading dims before B, H)."""
    factors = (s0, left, right, coef, th)
    if recompute and torch.is_grad_enabled() and any(t.requires_grad for t in factors):
        # Same ops on the same inputs in the backward, in the same graph order: the gradients are those of the
        # plain call bit for bit, without keeping the per-token r x r products (docs/muon.md, "Chunk checkpointing")
        gram, scale = torch.utils.checkpoint.checkpoint(
            _normalised_gram, *factors, cfg.ns_eps, use_reentrant=False, preserve_rng_state=False
        )
    else:
        gram, scale = _normalised_gram(*factors, cfg.ns_eps)
    cpu64 = gram.device.type == "cpu" and gram.dtype == torch.float64
    evaluate = ns_polynomial_spectral if cfg.ns_eval == "eigh" or (cfg.ns_eval == "auto" and cpu64) else ns_polynomial
    return evaluate(gram, cfg.ns_steps, cfg.ns_coeffs), scale


def _normalised_gram(s0, left, right, coef, th, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(Y_m Y_m^T [..., B, H, L, r, r], scale_m [..., B, H, L]) of every S'_m = Th_m s0 + left^T diag(coef_m) right;
    s0, left and right may carry leading dims (the stacked weights of `_orthogonalise_padded`)."""
    lowrank = coef.unsqueeze(-1) * left.unsqueeze(-3)  # [B, H, m, w, r]: columns of the low-rank term
    cross = lowrank.mT @ (right @ s0.mT).unsqueeze(-3)  # sum_w c e'_w (S0' z'_w)^T [B, H, m, r, r]
    inner = (right @ right.mT).unsqueeze(-3)  # z'_w . z'_v [B, H, 1, N, N]
    t = th[..., None, None]
    gram = t * t * (s0 @ s0.mT).unsqueeze(-3) + t * (cross + cross.mT) + lowrank.mT @ (inner @ lowrank)
    # ||S_m||_F^2 = tr(S_m S_m^T); the clamp keeps the gradient finite at S_m = 0 (and rounding from going
    # negative), where the norm of a matrix that small is far below eps anyway.
    sq = torch.diagonal(gram, dim1=-2, dim2=-1).sum(-1).clamp(min=torch.finfo(gram.dtype).tiny)
    scale = 1.0 / (sq.sqrt() + eps)
    return gram * (scale * scale)[..., None, None], scale


def lowrank_muon_chunk(qc, fq, factors, d, eta, G, state, params, cfg: MemoryConfig, target, low_memory: bool):
    """One chunk of the Muon recurrence -> (y [B, H, L, Dv], end weights, end momentum); the arguments as
    `chunk._muon_chunk` (factors: {name: (signal [B, H, N, out], layer input [B, H, N, in])}). `low_memory`: the
    Gram matrices are recomputed in the backward (`_orthogonalise`'s `recompute`)."""
    coef = d.LTh @ G  # c[m, w]
    decay_eta = d.LA * eta.unsqueeze(-2)  # [j, m] -> A_j / A_m * eta_m
    dtype = coef.dtype
    acc = torch.float64 if cfg.muon_float64 else dtype  # docs/muon.md, "Precision of the factored path"
    th, coef_acc, decay_acc = d.Th.to(acc), coef.to(acc), decay_eta.to(acc)
    momenta = {name: (state.momentum[name].to(acc), s.to(acc), z.to(acc)) for name, (s, z) in factors.items()}
    if cfg.muon_polynomial == "chunk":  # the polynomial of each chunk's first momentum
        first = orthogonalise_all(momenta, coef_acc[..., :1, :], th[..., :1], cfg, low_memory)
        update = {name: _ChunkPolynomial.of(first[name], *m, coef_acc, th, cfg) for name, m in momenta.items()}
    else:
        update = orthogonalise_all(momenta, coef_acc, th, cfg, low_memory)

    def layer(name: str, x: torch.Tensor) -> torch.Tensor:
        out = d.A.unsqueeze(-1) * (x @ state.weights[name].mT)
        if target is not None:
            out = out + (1.0 - d.A).unsqueeze(-1) * (x @ target[name].mT)
        return out - update[name].apply(x.to(acc), decay_acc).to(dtype)

    y = compose_memory(layer, qc, fq, params, cfg, norm=cfg.memory_norm)
    A_L = d.A[..., -1, None, None]
    weights, momentum = {}, {}
    for name, (signal, z) in factors.items():
        end = decayed(A_L, state.weights[name], name, target)
        weights[name] = end - update[name].weighted_sum(decay_acc[..., -1, :]).to(dtype)
        momentum[name] = d.Th[..., -1, None, None] * state.momentum[name] + torch.einsum(
            "bhw,bhwo,bhwi->bhoi", coef[..., -1, :], signal, z
        )
    return y, weights, momentum


@dataclass
class _ChunkPolynomial:
    """muon_polynomial="chunk": token m's update direction is scale_m P S_m (wide W; tall: scale_m S_m P^T), one
    polynomial P per chunk from the chunk's first momentum, scale_m = 1 / (||S_m||_F + eps) per token.

    Sums over tokens then collapse onto one mixed momentum, as in the momentum optimizer's dual form:
    sum_m w[j, m] scale_m S_m = beta_j S_0 + sum_w C'[j, w] e_w z_w^T with beta = (w scale) Th, C' = (w scale) c.
    """

    poly: torch.Tensor  # P [B, H, r, r]
    scale: torch.Tensor  # [B, H, L]
    S0: torch.Tensor  # [B, H, o, i]
    signal: torch.Tensor  # e_w [B, H, N, o]
    z: torch.Tensor  # z_w [B, H, N, i]
    coef: torch.Tensor  # c[m, w] [B, H, L, N]
    th: torch.Tensor  # [B, H, L]
    tall: bool

    @classmethod
    def of(cls, first: _Orthogonalised, S0, signal, z, coef, th, cfg: MemoryConfig) -> _ChunkPolynomial:
        """From the chunk's first momentum orthogonalised (`orthogonalise_all` on its coef[..., :1, :])."""
        # ||S_m||_F^2 = Th^2 ||S_0||^2 + 2 Th sum_w c_w e_w . S_0 z_w + sum_wv c_w c_v (e_w . e_v)(z_w . z_v)
        cross = (signal * (z @ S0.mT)).sum(-1)  # e_w . S_0 z_w [B, H, N]
        pair = (signal @ signal.mT) * (z @ z.mT)  # [B, H, N, N]
        sq = th * th * S0.pow(2).sum((-2, -1)).unsqueeze(-1) + 2.0 * th * (coef @ cross.unsqueeze(-1)).squeeze(-1)
        sq = (sq + ((coef @ pair) * coef).sum(-1)).clamp(min=torch.finfo(sq.dtype).tiny)  # see _orthogonalise
        scale = 1.0 / (sq.sqrt() + cfg.ns_eps)
        return cls(first.poly[:, :, 0], scale, S0, signal, z, coef, th, first.tall)

    def _mixed(self, weight: torch.Tensor):
        """(beta [B, H, J], C' [B, H, J, N]) of sum_m weight[j, m] scale_m S_m."""
        w = weight * self.scale.unsqueeze(-2)
        return (w @ self.th.unsqueeze(-1)).squeeze(-1), w @ self.coef

    def apply(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """sum_m weight[j, m] scale_m P S_m x_j (tall: ... S_m P^T x_j) for x [B, H, L, i] -> [B, H, L, o]."""
        beta, mixed = self._mixed(weight)
        u = x @ self.poly if self.tall else x  # rows (P^T x_j)^T
        out = beta.unsqueeze(-1) * (u @ self.S0.mT) + (mixed * (u @ self.z.mT)) @ self.signal
        return out if self.tall else out @ self.poly.mT

    def weighted_sum(self, weight: torch.Tensor) -> torch.Tensor:
        """sum_m weight[m] scale_m P S_m (tall: ... S_m P^T) [B, H, o, i] for weights [B, H, L]."""
        beta, mixed = self._mixed(weight.unsqueeze(-2))
        total = beta[..., None] * self.S0 + (mixed.mT * self.signal).mT @ self.z
        return total @ self.poly.mT if self.tall else self.poly @ total
