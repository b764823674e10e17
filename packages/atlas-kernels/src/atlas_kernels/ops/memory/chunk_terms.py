"""The state-independent terms of a chunk, for one chunk or for every full chunk of a sequence at once
(docs/chunkwise.md, "The state-independent terms of every chunk at once").

A chunk step (`chunk._chunk_step`) starts from terms that depend on the inputs only: the window (the carried halo,
then the chunk's tokens), the features of its keys and of the chunk's queries, the window x gamma gates G, the
decays, the update coefficients C and the query-window kernel matrix. Only the halo comes from the state, and the
halo is the previous c - 1 input tokens, so for the full chunks of one call all of these can be built up front: the
chunks folded into the batch dimension, every window a slice of halo + sequence. Polynomial features stay with
each chunk (built for every chunk at once, their products ran 1.2-1.7x slower on a CPU, out of cache; identity
features are the inputs themselves). The per-chunk loop then runs only what depends on the chunk-start
state (the memory's forward and gradients at W_0, the retrieval and the end state): at the 340M shape that moves
about two fifths of the gd MLP memory's per-chunk operations out of the sequential part (benchmarks/op_counts.md).

Scope (`batched_terms_apply`): a finite window, explicit features (identity or polynomial; the exp features' dual
keys grow with every chunk) and not the exact delta rule (its chunk system is `delta.py`'s, and the linear memories
that use it run `linear_scan`). The same values as the per-chunk loop up to rounding (tests/test_chunk_terms.py,
float64).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from atlas_kernels.config import MemoryConfig
from atlas_kernels.ops.memory.coefficients import (
    ChunkDecays,
    chunk_decays,
    momentum_end_coefficients,
    update_coefficients,
    window_gates,
)
from atlas_kernels.ops.memory.functional import explicit_features, feature_kernel
from atlas_kernels.ops.memory.inputs import OpInputs
from atlas_kernels.ops.memory.state import MemoryState, halo_size


@dataclass
class ChunkTerms:
    """One chunk's state-independent terms, [B, H, ...] with W = halo + L window tokens.

    wk, wv, wg: the window's keys [W, Dk], values [W, Dv] and gamma row [W] (presence under gamma="per_step");
    fk, fq: the features of wk and of the chunk's queries (None for exp features, whose first layer is dual, and
    for polynomial features in `batched_chunk_terms`; `chunk_features` computes those per chunk);
    G [L, W]: window x gamma gates; d: the chunk's decays; C [L, W]: update coefficients and kern [L, W]: the
    query-window feature kernel, both only for the dual path (gd and momentum; C not under decay_first with the l2
    bias, whose two coefficient matrices `chunk._decay_first_chunk` forms), else None.
    """

    wk: torch.Tensor
    wv: torch.Tensor
    wg: torch.Tensor
    fk: torch.Tensor | None
    fq: torch.Tensor | None
    G: torch.Tensor | None
    d: ChunkDecays | None
    C: torch.Tensor | None
    kern: torch.Tensor | None
    CK: torch.Tensor | None
    r: torch.Tensor | None


def chunk_terms(xc: OpInputs, state: MemoryState, params, cfg: MemoryConfig) -> ChunkTerms:
    """The terms of the chunk `xc` (its L <= b tokens) after the halo carried in `state`."""
    per_step = cfg.gamma == "per_step"
    wk = torch.cat([state.halo_k, xc.k], dim=2)
    wv = torch.cat([state.halo_v, xc.v], dim=2)
    # gamma="per_step": the window row holds presence (padding 0), the c gates stay with the step that uses them
    wg = torch.cat([state.halo_gamma, torch.ones_like(xc.k[..., 0]) if per_step else xc.gamma], dim=2)
    exp = cfg.feature_map == "exp"
    fk = None if exp else explicit_features(wk, params, cfg, allow_triton=True)
    fq = None if exp else explicit_features(xc.q, params, cfg, allow_triton=True)
    return _terms(xc, wk, wv, wg, fk, fq, state.halo_k.shape[2], params, cfg)


def chunk_features(t: ChunkTerms, qc: torch.Tensor, params, cfg: MemoryConfig):
    """(features of the window keys, of the chunk's queries): the terms' own, else computed here (polynomial
    features, which `batched_chunk_terms` leaves to each chunk); (None, None) for exp features."""
    if t.fk is not None or cfg.feature_map == "exp":
        return t.fk, t.fq
    feats = lambda x: explicit_features(x, params, cfg, allow_triton=True)  # noqa: E731
    return feats(t.wk), feats(qc)


def _terms(xc: OpInputs, wk, wv, wg, fk, fq, halo: int, params, cfg: MemoryConfig) -> ChunkTerms:
    """The gates, decays and coefficients over given windows; every tensor [N, H, ...] for any batch N."""
    if cfg.exact_delta:  # `delta.delta_chunk_step` builds its own system
        return ChunkTerms(wk, wv, wg, fk, fq, None, None, None, None, None, None)
    per_step = cfg.gamma == "per_step"
    G = window_gates(wg, xc.k.shape[2], halo, cfg, steps=xc.gamma if per_step else None)
    d = chunk_decays(xc.alpha, xc.theta, cfg)
    C = kern = CK = r = None
    if cfg.optimizer != "muon":
        kern = feature_kernel(xc.q @ wk.mT, params, cfg)
        if not (cfg.decay_first and cfg.bias == "l2"):
            C = update_coefficients(d, xc.eta, G, cfg)
            CK = C * kern
            r = momentum_end_coefficients(d, xc.eta, G) if cfg.optimizer == "momentum" else None
    return ChunkTerms(wk, wv, wg, fk, fq, G, d, C, kern, CK, r)


def batched_terms_apply(cfg: MemoryConfig) -> bool:
    """Whether `batched_chunk_terms` covers this configuration (module docstring)."""
    return not cfg.is_global and cfg.feature_map != "exp" and not cfg.exact_delta


def batched_chunk_terms(x: OpInputs, state: MemoryState, params, cfg: MemoryConfig) -> list[ChunkTerms]:
    """The terms of the n full chunks of `x` (T = n b tokens, n >= 1) from the halo of `state`, built as one batch;
    entry c equals `chunk_terms` of chunk c after the halo the loop would carry into it."""
    B, H, T = x.k.shape[:3]
    b, h = cfg.chunk_size, halo_size(cfg)
    n = T // b
    if not batched_terms_apply(cfg) or n * b != T or n < 1 or state.halo_k.shape[2] != h:
        raise ValueError(f"batched_chunk_terms: expected a finite window, explicit features, T a positive multiple "
                         f"of {b} and a halo of {h}; got {cfg.window=}, {cfg.feature_map=}, {cfg.exact_delta=}, "
                         f"T={T} and a halo of {state.halo_k.shape[2]}")  # fmt: skip
    gamma_row = torch.ones_like(x.k[..., 0]) if cfg.gamma == "per_step" else x.gamma
    wk = windows(state.halo_k, x.k, n, b)
    wv = windows(state.halo_v, x.v, n, b)
    wg = windows(state.halo_gamma, gamma_row, n, b)
    # identity features are the keys and queries themselves; polynomial ones stay with each chunk's step
    # (`chunk_features`): built for all chunks at once they ran 1.2-1.7x slower on a CPU (benchmarks/chunk_terms.md)
    xf = OpInputs(**{name: fold(getattr(x, name), n, b) for name in OpInputs.__dataclass_fields__})
    fk, fq = (wk, xf.q) if cfg.feature_map == "identity" else (None, None)
    terms = _terms(xf, wk, wv, wg, fk, fq, h, params, cfg)
    # chunk c as a [B, H, ...] batch; unbind, not indexing: the backward of t[c] would zero-fill a gradient of all n
    # chunks once per chunk (O(n^2)), unbind's stacks the chunks' gradients once
    per_chunk = lambda t: None if t is None else t.reshape(n, B, *t.shape[1:]).unbind(0)  # noqa: E731
    # __dataclass_fields__, not dataclasses.fields: torch.compile traces the former (the op is compiled whole)
    split = {name: per_chunk(getattr(terms, name)) for name in ChunkTerms.__dataclass_fields__ if name != "d"}
    decays = {name: per_chunk(getattr(terms.d, name)) for name in ChunkDecays.__dataclass_fields__}
    at = lambda parts, c: {name: None if p is None else p[c] for name, p in parts.items()}  # noqa: E731
    return [ChunkTerms(**at(split, c), d=ChunkDecays(**at(decays, c))) for c in range(n)]


def fold(t: torch.Tensor, n: int, size: int) -> torch.Tensor:
    """[B, H, n size, ...] -> [n B, H, size, ...], chunk-major so that chunk c is rows c B .. (c + 1) B - 1."""
    B, H = t.shape[:2]
    return t.reshape(B, H, n, size, *t.shape[3:]).movedim(2, 0).reshape(n * B, H, size, *t.shape[3:])


def windows(halo: torch.Tensor, seq: torch.Tensor, n: int, b: int) -> torch.Tensor:
    """Each chunk's window (its halo, then its tokens) from [B, H, h, ...] + [B, H, n b, ...] -> [n B, H, b + h,
    ...]: the extended sequence's rows c b .. c b + b + h - 1 for chunk c."""
    ext = torch.cat([halo, seq], dim=2)
    h = halo.shape[2]
    win = ext.unfold(2, b + h, b)  # [B, H, n, ..., b + h]
    win = win.movedim(-1, 3) if seq.dim() == 4 else win  # rows before the feature dim
    return win.movedim(2, 0).reshape(n * seq.shape[0], seq.shape[1], b + h, *seq.shape[3:])
