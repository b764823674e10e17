"""The chunkwise-parallel memory op (PyTorch), docs/chunkwise.md made code.

Per chunk of L <= b tokens, with start state (W_0, S_0, halo):
1. forward the memory at W_0 over the window tokens (halo + chunk) and write every inner gradient in closed
   form as outer products u_w = e_w z_w^T per layer (e: backpropagated signal, z: layer input);
2. build the coefficients C[j, w] (banded window x gamma gates, or with gamma="per_step" the general matrix of
   each token's c gates; decay and momentum cumulative products);
3. retrieve every y_j = f(q_j; W_j) without per-token weights through the dual form
   W_j x = A_j W_0 x - P_j S_0 x - sum_w C[j, w] e_w (z_w . x), layer by layer (gd, momentum);
   Muon materialises S_j and NS_k(S_j) for the L tokens of this chunk only (memory O(L |W|) per head);
4. form the end state densely (one GEMM per layer) and carry the last c - 1 window tokens as the halo.
Sequences that are not a multiple of b end with a short chunk. The outer backward is autograd's.
With decay_target="init" every A_j W_0 term (cumulative decay of the chunk-start weights) becomes
A_j W_0 + (1 - A_j) W_init, W_init the initial weights in `params` (the recurrence then decays toward them).
With norm_placement="readout" step 1 takes the gradients of the memory without its LayerNorm and step 3 applies
the LayerNorm to the retrieved branch only.
"""

from __future__ import annotations

import functools
import math

import torch
import torch.utils.checkpoint

from atlas_kernels.config import MemoryConfig
from atlas_kernels.ops.memory.checkpoint import checkpoint_groups, default_checkpoint
from atlas_kernels.ops.memory.chunk_terms import batched_chunk_terms, batched_terms_apply, chunk_features, chunk_terms
from atlas_kernels.ops.memory.coefficients import (
    decayed,
)
from atlas_kernels.ops.memory.delta import delta_chunk_step
from atlas_kernels.ops.memory.functional import (
    activation,
    exp_kernel,
    feature_kernel,
    memory_forward,
)
from atlas_kernels.ops.memory.inputs import OpInputs, prepare_inputs
from atlas_kernels.ops.memory.linear_scan import batch_by_default, batched_linear, linear_chunks
from atlas_kernels.ops.memory.muon_lowrank import lowrank_muon_chunk, resolve_ns_form
from atlas_kernels.ops.memory.params import initial_state
from atlas_kernels.ops.memory.state import MemoryState, halo_size, pending_inputs, resume_inputs
from atlas_kernels.ops.newton_schulz import newton_schulz_auto, newton_schulz_gram

_LOW_PRECISION = (torch.float16, torch.bfloat16)


def memory_chunk_torch(
    q,
    k,
    v,
    gates,
    params,
    cfg: MemoryConfig,
    state: MemoryState | None = None,
    checkpoint: bool | None = None,
    compiled: bool | str = False,
    batch_linear: bool | None = None,
    batch_terms: bool = True,
):
    """Chunkwise-parallel memory op in PyTorch. Arguments and returns as `atlas_kernels.memory_chunk`, plus:

    checkpoint: recompute each chunk in the backward instead of keeping its intermediates, so that only the
        chunk-boundary states (and the outputs) stay alive between forward and backward. Same values and
        gradients, one extra chunk forward per chunk in the backward. None (default): on for optimizer="muon"
        when a gradient will be taken and T x the state's bytes exceeds cfg.checkpoint_min_mib, off otherwise
        (see `checkpoint.default_checkpoint`). With cfg.checkpoint_group G > 1 only every G-th boundary state
        stays alive (two-level checkpointing, `checkpoint.checkpoint_groups`).
    compiled: run every full chunk (cfg.chunk_size tokens) through `torch.compile(fullgraph=True, dynamic=False)`
        of the one-chunk step; True compiles with inductor, "reduce-overhead" with inductor and CUDA graphs (each
        chunk one graph replay on a GPU, as torch.compile's mode of that name; not yet timed on a GPU), another
        string names another torch.compile backend. The short last chunk of a length that is not a multiple of b
        runs eagerly (no compilation per tail length).
        The same values as the eager op up to rounding (float64: within 1e-10 in outputs, state and every input
        gradient; tests/test_compiled_chunk.py). The first calls compile (tens of seconds per configuration
        and device; a few variants: the first chunk, whose state comes from `params`, the later ones, and
        without autograd); see `compiled_chunk_step` for what compiles on a CPU. Raises ValueError for
        feature_map="exp" and window="global", whose state grows with every chunk (a new compilation per chunk).
    batch_linear: a linear memory under gd (`linear_scan.batched_linear`) runs its full chunks as one batch of
        state-independent operations and a scan of three per chunk (`linear_scan.linear_chunks`) instead of the
        per-chunk loop, when neither `checkpoint` nor `compiled` is set. None (default): with identity features
        (`linear_scan.batch_by_default`; polynomial features ran 2x slower batched on a CPU, benchmarks/
        linear_scan.md); True: with polynomial features too; False: never (the loop, the reference the batched form
        is tested against).
    batch_terms: in the per-chunk loop, build the state-independent terms of every full chunk (windows, features,
        gates, decays, coefficients, the query-window kernel) as one batch before the loop
        (`chunk_terms.batched_chunk_terms`), when neither `checkpoint` nor `compiled` is set and the configuration
        allows it (`chunk_terms.batched_terms_apply`: a finite window, identity or polynomial features, not the
        exact delta rule). False: every chunk builds its own (the reference the batched terms are tested against).
    """
    if compiled and isinstance(cfg, MemoryConfig) and (cfg.feature_map == "exp" or cfg.is_global):
        grows = "feature_map='exp' (the dual-form keys)" if cfg.feature_map == "exp" else "window='global' (the halo)"
        raise ValueError(
            f"compiled: the state grows with every chunk under {grows}, so each chunk would compile anew "
            "(dynamic=False); run these configurations with compiled=False"
        )
    q, k, v, gates, state, n_pending = resume_inputs(q, k, v, gates, state)
    x = prepare_inputs(q, k, v, gates, params, cfg)
    out_dtype = x.k.dtype
    if out_dtype in _LOW_PRECISION:  # accumulate in float32, return in the input precision
        x = OpInputs(**{name: getattr(x, name).float() for name in OpInputs.__dataclass_fields__})
        params = {n: p.float() for n, p in params.items()}
    B, H, T, Dk, Dv = x.shape
    if state is None:
        state = initial_state(params, cfg, x.k, Dv, dual_exp=True)
    elif state.explicit_exp:
        raise ValueError("state: an explicit-Taylor exp state (from memory_naive) cannot seed the chunk op")
    else:
        state = _cast_state(state, x.k.dtype)
    if checkpoint is None:
        checkpoint = default_checkpoint(x, params, state, cfg)
    if batch_linear is None:
        batch_linear = batch_by_default(cfg)
    batchable = not checkpoint and not compiled and cfg.chunk_size <= T  # eager, at least one full chunk
    if batch_linear and batchable and batched_linear(cfg, Dk):
        outputs, state, chunk_start = _run_linear(x, state, params, cfg)
    elif batch_terms and batchable and batched_terms_apply(cfg):
        full = T - T % cfg.chunk_size  # a short last chunk builds its own terms
        x_full = OpInputs(**{name: getattr(x, name)[:, :, :full] for name in OpInputs.__dataclass_fields__})
        terms = batched_chunk_terms(x_full, state, params, cfg)
        chunks = _split_chunks(x, cfg.chunk_size)
        outputs, state, chunk_start = _run_chunks(chunks, state, params, cfg, False, low_memory=False, terms=terms)
    else:
        chunks = _split_chunks(x, cfg.chunk_size)
        group = cfg.checkpoint_group if checkpoint and torch.is_grad_enabled() else 1
        # Checkpointing is the op's low-memory mode: there the Muon chunks also recompute their Gram matrices
        run = functools.partial(_run_chunks, low_memory=checkpoint, compiled=compiled)
        if group > 1 and len(chunks) > group:
            # Two levels: only every group-th boundary state stays alive between forward and backward
            outputs, state, chunk_start = checkpoint_groups(run, chunks, group, state, params, cfg)
        else:
            outputs, state, chunk_start = run(chunks, state, params, cfg, checkpoint)
    o = torch.cat(outputs, dim=2) if outputs else x.v.new_zeros(B, H, 0, Dv)
    tail = T % cfg.chunk_size
    if tail:
        state.resume, state.pending = chunk_start, pending_inputs(x, T - tail)
    return o[:, :, n_pending:].transpose(1, 2).to(out_dtype), state


def _run_chunks(
    chunks: list[OpInputs],
    state: MemoryState,
    params,
    cfg: MemoryConfig,
    checkpoint: bool,
    low_memory: bool,
    compiled: bool | str = False,
    terms: list | None = None,
):
    """The chunks in order from `state`: (their outputs, the state after the last, the state before the last).
    `checkpoint`: each chunk under its own checkpoint; `low_memory`: passed on to `_chunk_step`; `compiled`: full
    chunks through `compiled_chunk_step` (see `memory_chunk_torch`); `terms`: the first chunks' `ChunkTerms` built
    beforehand (`chunk_terms.batched_chunk_terms`), the later ones build their own."""
    outputs, chunk_start = [], state
    for i, xc in enumerate(chunks):
        chunk_start = state
        full = xc.k.shape[2] == cfg.chunk_size
        step = compiled_chunk_step(compiled, xc.k.device.type) if compiled and full else _chunk_step
        args = (xc, state, params, cfg, low_memory) + ((terms[i],) if terms is not None and i < len(terms) else ())
        if checkpoint:  # non-reentrant, no RNG inside a chunk (no RNG state to preserve)
            y, state = torch.utils.checkpoint.checkpoint(step, *args, use_reentrant=False, preserve_rng_state=False)
        else:
            y, state = step(*args)
        outputs.append(y)
    return outputs, state, chunk_start


def _run_linear(x: OpInputs, state: MemoryState, params, cfg: MemoryConfig):
    """`_run_chunks` for a linear gd memory: the full chunks batched (`linear_scan.linear_chunks`), a short last
    chunk through `_chunk_step`."""
    T, b = x.k.shape[2], cfg.chunk_size
    tail = T % b
    if not tail:
        y, state, chunk_start = linear_chunks(x, state, params, cfg)
        return [y], state, chunk_start
    parts = {name: getattr(x, name).split([T - tail, tail], dim=2) for name in OpInputs.__dataclass_fields__}
    y, chunk_start, _ = linear_chunks(OpInputs(**{n: p[0] for n, p in parts.items()}), state, params, cfg)
    y_tail, state = _chunk_step(OpInputs(**{n: p[1] for n, p in parts.items()}), chunk_start, params, cfg, False)
    return [y, y_tail], state, chunk_start


# `compiled=` value for inductor with CUDA graphs (torch.compile's mode of that name): each compiled chunk is
# replayed as one graph instead of launching its kernels one by one; on a CPU the same as compiled=True
CUDA_GRAPHS = "reduce-overhead"


@functools.cache
def compiled_chunk_step(backend: bool | str, device_type: str):
    """`_chunk_step` under `torch.compile(fullgraph=True, dynamic=False)`, one compiled function per backend and
    device type (True: inductor; CUDA_GRAPHS: inductor with CUDA graphs). On a CPU inductor compiles without
    vectorisation: its vectorised C++ code corrupts the heap in the backward of a one-token chunk with polynomial
    features and a window (torch 2.13, float64: wrong gradients or an abort), which the scalar code does not."""
    from atlas_kernels.ops.features.poly import mark_compile_constants

    mark_compile_constants()
    graphs = backend == CUDA_GRAPHS
    name = "inductor" if backend is True or graphs else backend
    options = {}
    if name == "inductor" and device_type == "cpu":
        options["cpp.simdlen"] = 1
    if graphs:  # what torch.compile's mode="reduce-overhead" sets; a mode cannot be given beside options
        options["triton.cudagraphs"] = True
    return torch.compile(_chunk_step, fullgraph=True, dynamic=False, backend=name, options=options or None)


def _split_chunks(x: OpInputs, size: int) -> list[OpInputs]:
    """The inputs cut into chunks of `size` tokens along time (the last one may be short).

    One split per tensor instead of a slice per chunk: the backward of a slice zero-fills a gradient of the
    full length T, once per chunk (O(T^2 / b), 44% of fwd+bwd at T=4096), while the backward of `split`
    concatenates the chunk gradients once.
    """
    if x.k.shape[2] == 0:  # split would return one empty chunk, not none
        return []
    parts = {name: getattr(x, name).split(size, dim=2) for name in OpInputs.__dataclass_fields__}
    return [OpInputs(**{name: p[i] for name, p in parts.items()}) for i in range(len(parts["k"]))]


def _cast_state(state: MemoryState, dtype: torch.dtype) -> MemoryState:
    if state.halo_k.dtype == dtype:
        return state
    return MemoryState.from_tensors({n: t.to(dtype) for n, t in state.tensors().items()})


def _apply_start(name, x_raw, feats, state: MemoryState, cfg: MemoryConfig, params) -> torch.Tensor:
    """W_0[name] applied to layer inputs [B, H, N, in] -> [B, H, N, out] (dual form for exp first layers)."""
    w = state.weights[name]
    if cfg.feature_map == "exp" and name in cfg.feature_input_weights:
        return exp_kernel(x_raw @ state.kernel_keys.mT, params, cfg) @ w
    return feats @ w.mT


def _activation_grad(a: torch.Tensor, cfg: MemoryConfig) -> torch.Tensor:
    if cfg.activation == "gelu":
        return 0.5 * (1.0 + torch.erf(a / math.sqrt(2.0))) + a * torch.exp(-0.5 * a * a) / math.sqrt(2.0 * math.pi)
    s = torch.sigmoid(a)
    return s * (1.0 + a * (1.0 - s))


def _layer_norm_with_grad(b, e, params, cfg):
    """LN(b) with per-head affine weights, and the backprop of a signal e through it (both [B, H, N, Dv])."""
    mu = b.mean(-1, keepdim=True)
    centred = b - mu
    inv_sd = torch.rsqrt(centred.pow(2).mean(-1, keepdim=True) + cfg.norm_eps)
    y = centred * inv_sd
    w = params["ln_weight"][:, None, :]
    out = y * w + params["ln_bias"][:, None, :]
    if e is None:
        return out, None
    dy = e * w
    db = inv_sd * (dy - dy.mean(-1, keepdim=True) - y * (dy * y).mean(-1, keepdim=True))
    return out, db


def _bias_signal(f0: torch.Tensor, v: torch.Tensor, cfg: MemoryConfig) -> torch.Tensor:
    """dl/df at W_0: l2 -> f - v, dot -> -v."""
    return f0 - v if cfg.bias == "l2" else -v


def _gradient_factors(wk, fk, wv, state, params, cfg):
    """Closed-form inner gradients at W_0 over the window tokens.

    Returns ({name: (signal [B, H, W, out], layer input [B, H, W, in] or None for a dual first layer)}, f0).
    """
    if cfg.memory == "linear":
        f0 = _apply_start("W", wk, fk, state, cfg, params)
        return {"W": (_bias_signal(f0, wv, cfg), fk)}, f0
    a0 = _apply_start("W2", wk, fk, state, cfg, params)
    hs = activation(a0, cfg)
    gate = _apply_start("W3", wk, fk, state, cfg, params) if cfg.memory == "gated_mlp" else None
    h0 = hs * gate if gate is not None else hs
    b0 = h0 @ state.weights["W1"].mT
    if cfg.inner_norm:
        branch, _ = _layer_norm_with_grad(b0, None, params, cfg)
    else:
        branch = b0
    f0 = wk + branch if cfg.residual else branch
    e = _bias_signal(f0, wv, cfg)
    eb = _layer_norm_with_grad(b0, e, params, cfg)[1] if cfg.inner_norm else e
    dh = eb @ state.weights["W1"]
    ds = dh * _activation_grad(a0, cfg)
    factors = {"W1": (eb, h0), "W2": (ds * gate if gate is not None else ds, fk)}
    if gate is not None:
        factors["W3"] = (dh * hs, fk)
    return factors, f0


def _chunk_step(xc: OpInputs, state: MemoryState, params, cfg: MemoryConfig, low_memory: bool, terms=None):
    """One chunk: `xc` holds its L <= b tokens only (see `_split_chunks`). `low_memory`: the factored Muon path
    recomputes its Gram matrices in the backward instead of keeping them (`muon_lowrank.lowrank_muon_chunk`).
    `terms`: the chunk's `ChunkTerms` when built beforehand (`chunk_terms.batched_chunk_terms`), else built here."""
    t = chunk_terms(xc, state, params, cfg) if terms is None else terms
    qc, kc, vc = xc.q, xc.k, xc.v
    eta = xc.eta
    wk, wv, wg = t.wk, t.wv, t.wg
    fk, fq = chunk_features(t, qc, params, cfg)
    halo = state.halo_k.shape[2]
    target = _decay_target(params, cfg)
    if cfg.exact_delta:
        beta = eta * (xc.gamma[..., 0] if cfg.gamma == "per_step" else xc.gamma)  # c = 1: the token's own gate
        kernel = lambda s: feature_kernel(s, params, cfg)  # noqa: E731
        W_init = None if target is None else target["W"]
        y, W = delta_chunk_step(qc, kc, vc, xc.alpha, beta, fq, fk[:, :, halo:], kernel, state, cfg, target=W_init)
        return y, MemoryState(weights={"W": W}, momentum=None, halo_k=wk[:, :, wk.shape[2] :],
                              halo_v=wv[:, :, wv.shape[2] :], halo_gamma=wg[:, :, wg.shape[2] :])  # fmt: skip
    d, G = t.d, t.G
    factors, f0 = _gradient_factors(wk, fk, wv, state, params, cfg)
    form = resolve_ns_form(cfg, _weight_shapes(factors), qc.device) if cfg.optimizer == "muon" else None
    if form == "lowrank":
        y, weights, momentum = lowrank_muon_chunk(qc, fq, factors, d, eta, G, state, params, cfg, target, low_memory)
    elif form is not None:
        y, weights, momentum = _muon_chunk(qc, fq, factors, d, eta, G, state, params, cfg, target, form)
    elif cfg.decay_first and cfg.bias == "l2":
        y, weights = _decay_first_chunk(qc, fk, fq, wv, f0, d, eta, G, t.kern, state, cfg, target)
        momentum = None
    else:
        y, weights, momentum = _dual_chunk(qc, fq, factors, t, state, params, cfg, target)
    cut = 0 if cfg.is_global else wk.shape[2] - halo_size(cfg)  # the next chunk's halo: the last c - 1 tokens
    kernel_keys = None
    if cfg.feature_map == "exp":
        kernel_keys = torch.cat([state.kernel_keys, kc], dim=2)
    new_state = MemoryState(
        weights=weights,
        momentum=momentum,
        halo_k=wk[:, :, cut:],
        halo_v=wv[:, :, cut:],
        halo_gamma=wg[:, :, cut:],
        kernel_keys=kernel_keys,
    )
    return y, new_state


def _decay_target(params, cfg: MemoryConfig) -> dict[str, torch.Tensor] | None:
    """The weights the decay pulls toward when they are not 0: {name: W_init [H, out, in]} for
    decay_target="init" (exp first layers are absent: their W_init is 0, see MemoryConfig), else None."""
    if cfg.decay_target != "init":
        return None
    skip = cfg.feature_input_weights if cfg.feature_map == "exp" else ()
    return {n: params[n] for n in cfg.weight_names if n not in skip}


def _dual_layer(name, x_raw, feats, CK, d, factors, state, params, cfg, target=None):
    """W_j x_j = A_j W_0 x_j - P_j S_0 x_j - sum_w C[j, w] e_w (z_w . x_j) for every chunk token j
    (+ (1 - A_j) W_init x_j with a decay target); CK = C o [z_w . x_j] (the kernel of the layer's inputs)."""
    out = d.A.unsqueeze(-1) * _apply_start(name, x_raw, feats, state, cfg, params)
    if target is not None and name in target:
        out = out + (1.0 - d.A).unsqueeze(-1) * (feats @ target[name].mT)
    if cfg.optimizer == "momentum":
        out = out - d.P.unsqueeze(-1) * (feats @ state.momentum[name].mT)
    return out - CK @ factors[name][0]


def _dual_chunk(qc, fq, factors, t, state, params, cfg, target=None):
    """The dual path (gd, momentum) from the chunk's terms `t` (`ChunkTerms`)."""
    C, d = t.C, t.d
    if cfg.memory == "linear":
        y = _dual_layer("W", qc, fq, t.CK, d, factors, state, params, cfg, target)
    else:
        a = _dual_layer("W2", qc, fq, t.CK, d, factors, state, params, cfg, target)
        hs = activation(a, cfg)
        gated = cfg.memory == "gated_mlp"
        h = hs * _dual_layer("W3", qc, fq, t.CK, d, factors, state, params, cfg, target) if gated else hs
        b = _dual_layer("W1", h, h, C * (h @ factors["W1"][1].mT), d, factors, state, params, cfg, target)
        if cfg.memory_norm:
            b, _ = _layer_norm_with_grad(b, None, params, cfg)
        y = qc + b if cfg.residual else b

    last = C[..., -1, :]
    A_L = d.A[..., -1, None, None]
    weights, momentum = {}, None
    if cfg.optimizer == "momentum":
        r = t.r
        Th_L, P_L = d.Th[..., -1, None, None], d.P[..., -1, None, None]
        momentum = {}
    for name, (signal, z) in factors.items():
        if z is None:
            weights[name] = _dual_end_coefficients(state, name, signal, last, A_L)
            continue
        weights[name] = decayed(A_L, state.weights[name], name, target) - torch.einsum(
            "bhw,bhwo,bhwi->bhoi", last, signal, z
        )
        if momentum is not None:
            weights[name] = weights[name] - P_L * state.momentum[name]
            momentum[name] = Th_L * state.momentum[name] + torch.einsum("bhw,bhwo,bhwi->bhoi", r, signal, z)
    return y, weights, momentum


def _dual_end_coefficients(state, name, signal, last, A_L):
    """End-of-chunk dual coefficients of an exp first layer: decay the old ones, add -C[L, w] e_w per token.

    Halo tokens already own the last `halo` entries of `kernel_keys` (padding entries get a zero coefficient,
    since their gamma is 0); the chunk's tokens are appended.
    """
    coef = A_L * state.weights[name]
    contrib = -last.unsqueeze(-1) * signal
    halo = state.halo_k.shape[2]
    n_tail = min(halo, coef.shape[2])
    if n_tail > 0:
        tail = coef[:, :, coef.shape[2] - n_tail :] + contrib[:, :, halo - n_tail : halo]
        coef = torch.cat([coef[:, :, : coef.shape[2] - n_tail], tail], dim=2)
    return torch.cat([coef, contrib[:, :, halo:]], dim=2)


def _weight_shapes(factors) -> list[tuple[int, int]]:
    """(out, in) of each weight from its gradient factors {name: (signal [..., out], layer input [..., in])}."""
    return [(signal.shape[-1], z.shape[-1]) for signal, z in factors.values()]


def _muon_chunk(qc, fq, factors, d, eta, G, state, params, cfg, target=None, form="materialise"):
    """Muon: S_j for every chunk token, NS_k batched over (B, H, L) in `form` ("gram" or "materialise"), then
    per-token weights and retrieval."""
    LThG = d.LTh @ G
    decay_eta = d.LA * eta.unsqueeze(-2)  # [j, m] -> A_j / A_m * eta_m
    per_token, momentum = {}, {}
    for name, (signal, z) in factors.items():
        S = d.Th[..., None, None] * state.momentum[name].unsqueeze(2)
        S = S + torch.einsum("bhjw,bhwo,bhwi->bhjoi", LThG, signal, z)
        ns = newton_schulz_gram if form == "gram" else newton_schulz_auto
        O = ns(S, cfg.ns_steps, cfg.ns_coeffs, cfg.ns_eps)
        W = d.A[..., None, None] * state.weights[name].unsqueeze(2)
        if target is not None:  # W_init [H, o, i] against the per-token axis
            W = W + (1.0 - d.A)[..., None, None] * target[name].unsqueeze(1)
        per_token[name] = W - torch.einsum("bhjm,bhmoi->bhjoi", decay_eta, O)
        momentum[name] = S[:, :, -1].clone()
    y = memory_forward(qc, fq, per_token, params, cfg)
    # Copies, not views: a view of the last token would keep the chunk's per-token tensors alive with the state.
    return y, {n: w[:, :, -1].clone() for n, w in per_token.items()}, momentum


def _decay_first_chunk(qc, fk, fq, wv, f0, d, eta, G, kern, state, cfg, target=None):
    """Linear memory, l2 bias, gated-delta ordering: token n's gradient is taken at A_n W_0.

    u_w^(n) = (A_n W_0 k_w - v_w) k_w^T splits into two coefficient matrices:
    C1 = LA diag(eta A) G on W_0 k_w and C2 = LA diag(eta) G on v_w.
    With a decay target the gradient is taken at W_init + A_n (W_0 - W_init): the same form on W_0 - W_init
    with values v_w - W_init k_w, and A_j W_0 read as A_j W_0 + (1 - A_j) W_init.
    """
    C1 = d.LA @ ((eta * d.A).unsqueeze(-1) * G)
    C2 = d.LA @ (eta.unsqueeze(-1) * G)
    y = d.A.unsqueeze(-1) * (fq @ state.weights["W"].mT)
    if target is not None:
        g0 = fk @ target["W"].mT
        f0, wv = f0 - g0, wv - g0
        y = y + (1.0 - d.A).unsqueeze(-1) * (fq @ target["W"].mT)
    y = y - (C1 * kern) @ f0 + (C2 * kern) @ wv
    signal_last = C1[..., -1, :, None] * f0 - C2[..., -1, :, None] * wv
    W = decayed(d.A[..., -1, None, None], state.weights["W"], "W", target) - signal_last.mT @ fk
    return y, {"W": W}
