"""Helpers for tests of the memory op (ours and downstream): random inputs, the valid configuration grid,
and flash-linear-attention-style error ratios."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import torch
import torch.nn.functional as F

from atlas_kernels.config import (
    BIAS_KINDS,
    FEATURE_KINDS,
    MEMORY_KINDS,
    OPTIMIZER_KINDS,
    MemoryConfig,
    MemoryConfigError,
)


def random_inputs(
    B: int,
    T: int,
    H: int,
    Dk: int,
    Dv: int | None = None,
    *,
    dtype: torch.dtype = torch.float64,
    seed: int = 0,
    requires_grad: bool = False,
    gate_low: float = 0.5,
    eta_scale: float = 1.0,
):
    """(q, k, v, gates): l2-normalised q, k [B, T, H, Dk]; v [B, T, H, Dv]; gates in [gate_low, 1), eta scaled.

    Large inner learning rates make long recurrences chaotic (a 1e-14 change in v moves outputs by O(1)
    after ~60 tokens); long-sequence comparisons use eta_scale ~0.1, where they are stable.
    """
    g = torch.Generator().manual_seed(seed)
    Dv = Dk if Dv is None else Dv
    q = F.normalize(torch.randn(B, T, H, Dk, generator=g, dtype=dtype), dim=-1)
    k = F.normalize(torch.randn(B, T, H, Dk, generator=g, dtype=dtype), dim=-1)
    v = torch.randn(B, T, H, Dv, generator=g, dtype=dtype)
    gates = {
        name: gate_low + (1 - gate_low) * torch.rand(B, T, H, generator=g, dtype=dtype)
        for name in ("alpha", "eta", "theta", "gamma")
    }
    gates["eta"] = gates["eta"] * eta_scale
    if requires_grad:
        q, k, v = (t.requires_grad_() for t in (q, k, v))
        gates = {n: t.requires_grad_() for n, t in gates.items()}
    return q, k, v, gates


def leaf_inputs(
    cfg: MemoryConfig,
    H: int,
    B=1,
    T=11,
    Dk=4,
    Dv=None,
    *,
    dtype=torch.float64,
    seed=3,
    eta_scale=1.0,
    device="cpu",
    requires_grad=True,
):
    """(q, k, v, gates, params) as leaves in `dtype` on `device`: `random_inputs` (no theta without momentum) and
    `init_memory_params`, both drawn in float64 so that every dtype sees the same values. LayerNorm parameters are
    moved away from their (1, 0) init, so that they matter."""
    from atlas_kernels.ops.memory.params import init_memory_params

    Dv = Dv or Dk
    q, k, v, gates = random_inputs(B, T, H, Dk, Dv, seed=seed, eta_scale=eta_scale)
    if not cfg.uses_momentum:
        del gates["theta"]
    p = init_memory_params(cfg, H, Dk, Dv, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    if "ln_weight" in p:
        g = torch.Generator().manual_seed(seed + 1)
        p["ln_weight"] = p["ln_weight"] + 0.3 * torch.randn(p["ln_weight"].shape, generator=g, dtype=torch.float64)
        p["ln_bias"] = 0.3 * torch.randn(p["ln_bias"].shape, generator=g, dtype=torch.float64)

    def leaf(t):
        return t.to(device=device, dtype=dtype).requires_grad_(requires_grad)

    return leaf(q), leaf(k), leaf(v), {n: leaf(g) for n, g in gates.items()}, {n: leaf(t) for n, t in p.items()}


def valid_configs(**fixed) -> Iterator[MemoryConfig]:
    """Every memory x optimizer x feature x bias combination MemoryConfig accepts; `fixed` pins any field."""
    axes = {
        "memory": MEMORY_KINDS,
        "optimizer": OPTIMIZER_KINDS,
        "feature_map": FEATURE_KINDS,
        "bias": BIAS_KINDS,
    }
    choices = {name: (fixed.pop(name),) if name in fixed else kinds for name, kinds in axes.items()}
    for combo in itertools.product(*choices.values()):
        try:
            yield MemoryConfig(**dict(zip(choices, combo)), **fixed)
        except MemoryConfigError:
            continue


def config_id(cfg: MemoryConfig) -> str:
    batch = "-padded" if cfg.muon_batch == "padded" else ""
    return f"{cfg.memory}-{cfg.optimizer}-{cfg.feature_map}-{cfg.bias}-c{cfg.window}-b{cfg.chunk_size}{batch}"


def rel_err(ref: torch.Tensor, out: torch.Tensor) -> float:
    """max |ref - out| / max |ref| (0 when both are zero or empty)."""
    if ref.shape != out.shape:
        raise AssertionError(f"shape mismatch: {tuple(ref.shape)} vs {tuple(out.shape)}")
    if ref.numel() == 0:
        return 0.0
    scale = ref.abs().max().item()
    diff = (ref - out).abs().max().item()
    return diff / scale if scale > 0 else diff


def random_loss_grads(o: torch.Tensor, state, inputs: dict[str, torch.Tensor], seed: int = 7):
    """(o, {state tensor: value}, {input: gradient or None}), all detached, of the loss <o, R_o> + sum_t <t, R_t>
    over the outputs and every final state tensor that requires grad (`MemoryState.tensors()` order). The R are
    standard normal draws of `seed` made in float64 whatever the dtype, so that runs in different precisions take
    the gradient of the same loss (torch draws other numbers in float32 than in float64 from one seed)."""
    gen = torch.Generator().manual_seed(seed)

    def weight(t: torch.Tensor) -> torch.Tensor:
        return torch.randn(t.shape, dtype=torch.float64, generator=gen).to(t.device, t.dtype)

    loss = (o * weight(o)).sum()
    final = state.tensors()
    for t in final.values():
        if t.requires_grad:
            loss = loss + (t * weight(t)).sum()
    grads = torch.autograd.grad(loss, list(inputs.values()), allow_unused=True)
    return o.detach(), {n: t.detach() for n, t in final.items()}, dict(zip(inputs, grads))


def rounded_run(cfg: MemoryConfig, H: int, T: int, Dk: int, dtype, compute, **op_kwargs):
    """`random_loss_grads` of the torch chunk op (`op_kwargs` its options) on `leaf_inputs` (B 2, eta scale 0.5) drawn
    in float64, rounded to `dtype`, then run in `compute`: the same values in either, so a low-precision run and a
    float64 run of one input compare (relative-error ratios against another path's, tests of the batched paths)."""
    from atlas_kernels.ops.memory.chunk import memory_chunk_torch

    q, k, v, gates, params = leaf_inputs(cfg, H, B=2, T=T, Dk=Dk, dtype=dtype, eta_scale=0.5)
    leaves = {"q": q, "k": k, "v": v, **{f"gate.{n}": g for n, g in gates.items()}, **params}
    leaves = {n: t.detach().to(compute).requires_grad_() for n, t in leaves.items()}
    gates = {n[5:]: t for n, t in leaves.items() if n.startswith("gate.")}
    params = {n: t for n, t in leaves.items() if n not in ("q", "k", "v") and not n.startswith("gate.")}
    o, s = memory_chunk_torch(leaves["q"], leaves["k"], leaves["v"], gates, params, cfg, **op_kwargs)
    return random_loss_grads(o, s, leaves)


def result_errors(ref, out) -> dict[str, float]:
    """`rel_err` (in float64) of "o", of every state tensor ("state.<name>") and of every input gradient
    ("grad.<name>") between two `random_loss_grads` results: the same state tensors, a gradient wherever `ref` has
    one, and where `ref` has none, none or a zero one in `out`."""
    (o_ref, s_ref, g_ref), (o, s, g) = ref, out
    assert s_ref.keys() == s.keys(), (sorted(s_ref), sorted(s))
    errs = {"o": rel_err(o_ref.double(), o.double())}
    errs.update({f"state.{n}": rel_err(s_ref[n].double(), s[n].double()) for n in s_ref})
    for name, gr in g_ref.items():
        if gr is None:
            assert g[name] is None or g[name].abs().max() == 0, name
            continue
        assert g[name] is not None, name
        errs[f"grad.{name}"] = rel_err(gr.double(), g[name].double())
    return errs


def oracle_cases(grid, extra) -> list[tuple[MemoryConfig, int, float, float]]:
    """(cfg, T, eta_scale, tol) of the float64 chunk-op-against-oracle comparisons of one option: every config of
    `grid` at T = 7 (eta 0.5, tol 1e-11) and at T = 33 (eta 0.1, tol 1e-10: the memory LayerNorm makes long
    recurrences at large eta chaotic, README "Numerics"), and the `extra` paths at T = 7.

    Muon's short cases get 1e-10 as well: its momenta are rank-deficient and Newton-Schulz lifts their null
    directions by up to a^k, so a 1e-15 relative perturbation of every Newton-Schulz input moves the input gradients
    by up to 5e-11 at T = 7, eta 0.5; the chunk op's factored Muon (ns_form="lowrank") rounds differently from the
    oracle's Gram-space Newton-Schulz and lands at up to 1e-11 there (tests/test_muon_lowrank.py)."""

    def short(c):
        return 7, 0.5, 1e-10 if c.optimizer == "muon" else 1e-11

    long = (33, 0.1, 1e-10)
    return [(c, *short(c)) for c in grid] + [(c, *long) for c in grid] + [(c, *short(c)) for c in extra]


def oracle_case_id(case) -> str:
    return f"T{case[1]}-{config_id(case[0])}"


def assert_matches_oracle(q, k, v, gates, params, cfg: MemoryConfig, oracle, tol: float) -> dict[str, float]:
    """The largest `rel_err` of `memory_chunk` against `oracle` (a token loop with the same signature) must be
    below `tol`; returns them all by name: the output "o", every
    final state tensor by name, and "grad.<leaf>" for every input, gate ("gate.<name>") and parameter, of the
    loss sum(o^2) + sum of the squared weights and momenta of the state. A leaf that one side leaves without a
    gradient must be unused by both. With exp features the first layer's state is dual coefficients in the chunk
    op but explicit Taylor matrices in the oracle: those tensors are neither compared nor in the loss."""
    from atlas_kernels.api import memory_chunk

    def dual(name):
        return cfg.feature_map == "exp" and name.split(".")[-1] in cfg.feature_input_weights

    def loss(o, state):
        total = o.pow(2).sum()
        for name, t in state.tensors().items():
            if name.startswith(("weights", "momentum")) and not dual(name):
                total = total + t.pow(2).sum()
        return total

    o, s = memory_chunk(q, k, v, gates, params, cfg)
    o_ref, s_ref = oracle(q, k, v, gates, params, cfg)
    errors = {"o": rel_err(o_ref, o)}
    if cfg.feature_map != "exp":
        ref_state, state = s_ref.tensors(), s.tensors()
        assert ref_state.keys() == state.keys()
        errors.update({name: rel_err(ref_state[name], state[name]) for name in state})
    leaves = {"q": q, "k": k, "v": v, **{f"gate.{n}": g for n, g in gates.items()}, **params}
    grads = torch.autograd.grad(loss(o, s), list(leaves.values()), allow_unused=True)
    ref_grads = torch.autograd.grad(loss(o_ref, s_ref), list(leaves.values()), allow_unused=True)
    for name, g, g_ref in zip(leaves, grads, ref_grads):
        if g is None and g_ref is None:
            continue
        assert g is not None and g_ref is not None, name
        errors[f"grad.{name}"] = rel_err(g_ref, g)
    worst = max(errors, key=errors.get)
    assert errors[worst] < tol, (worst, errors[worst])
    return errors


def assert_results_match(ref, out, tol: float, grad_tol: float | None = None) -> dict[str, float]:
    """`ref` and `out` are (o, state, {leaf: gradient}) of two runs of an op on the same inputs: same output shape,
    finite outputs, the same state tensors, a gradient wherever `ref` has one, and every `rel_err` (computed in
    float64) below `tol` (`grad_tol` for the gradients when given; NaN fails). Returns the errors by name:
    "o", "state.<tensor>", "grad.<leaf>"."""
    (o_ref, s_ref, g_ref), (o, s, g) = ref, out
    assert o.shape == o_ref.shape and torch.isfinite(o).all()
    errs = {"o": rel_err(o_ref.double(), o.double())}
    t_ref, t_out = s_ref.tensors(), s.tensors()
    assert t_ref.keys() == t_out.keys()
    errs.update({f"state.{n}": rel_err(t_ref[n].double(), t_out[n].double()) for n in t_ref})
    for name, gr in g_ref.items():
        assert g[name] is not None, name
        errs[f"grad.{name}"] = rel_err(gr.double(), g[name].double())
    bad = {n: e for n, e in errs.items() if not e < (grad_tol if grad_tol and n.startswith("grad") else tol)}
    assert not bad, bad
    return errs


def assert_pieces_match_one_call(
    q, k, v, gates, params, cfg: MemoryConfig, cuts, decode_from: int, tol: float, *, ops=None, decode_backend=None
):
    """One `memory_chunk` call over [0, T) against the same sequence run in pieces: `memory_chunk` over each
    (a, b) of `cuts` (chaining the state), then `memory_step` token by token from `decode_from` to T. Outputs and
    every final state tensor must agree within `tol` (`rel_err`).

    `ops` (one per cut) replaces `memory_chunk` on the pieces, and `decode_backend` decodes with `memory_chunk`
    on one-token segments of that backend instead of `memory_step`: states handed between two implementations."""
    from atlas_kernels.api import memory_chunk, memory_step

    def piece(a, b):
        return q[:, a:b], k[:, a:b], v[:, a:b], {n: g[:, a:b] for n, g in gates.items()}, params, cfg

    o_full, s_full = memory_chunk(q, k, v, gates, params, cfg)
    outs, state = [], None
    for (a, b), op in zip(cuts, ops or [memory_chunk] * len(cuts)):
        o, state = op(*piece(a, b), state)
        outs.append(o)
    for t in range(decode_from, q.shape[1]):
        if decode_backend is not None:
            o, state = memory_chunk(*piece(t, t + 1), state, backend=decode_backend)
            outs.append(o)
            continue
        step_gates = {n: g[:, t] for n, g in gates.items()}
        o, state = memory_step(q[:, t], k[:, t], v[:, t], step_gates, params, cfg, state)
        outs.append(o[:, None])
    err = rel_err(o_full, torch.cat(outs, 1))
    assert err < tol, f"outputs differ: {err:.3e}"
    full, pieces = s_full.tensors(), state.tensors()
    assert full.keys() == pieces.keys(), (sorted(full), sorted(pieces))
    for name in full:
        err = rel_err(full[name], pieces[name])
        assert err < tol, f"state {name} differs: {err:.3e}"


def assert_state_handoff(op, q, k, v, gates, params, cfg: MemoryConfig, tol: float = 1e-12):
    """States handed between the torch op and a Triton op `op` (`memory_chunk`'s signature): `memory_chunk`, `op`,
    `memory_chunk` over tokens [0, 3), [3, 9), [9, 13), then token by token through backend="triton", == one
    `memory_chunk` call (`assert_pieces_match_one_call`). Needs T > 13."""
    from atlas_kernels.api import memory_chunk

    ops = [memory_chunk, op, memory_chunk]
    cuts = [(0, 3), (3, 9), (9, 13)]
    assert_pieces_match_one_call(q, k, v, gates, params, cfg, cuts, 13, tol, ops=ops, decode_backend="triton")


def assert_empty_input(op, q, k, v, gates, params, cfg: MemoryConfig):
    """`op` over a sequence of no tokens, without an incoming state: an empty output and the initial state (the
    weights in `params` for every batch row, zero momenta)."""
    o, s = op(q, k, v, gates, params, cfg)
    B, T, H, _ = q.shape
    assert T == 0 and o.shape == (B, 0, H, v.shape[-1])
    for name, w in s.weights.items():
        torch.testing.assert_close(w, params[name].expand(B, *params[name].shape))
    for name, m in (s.momentum or {}).items():
        assert not m.any(), name
