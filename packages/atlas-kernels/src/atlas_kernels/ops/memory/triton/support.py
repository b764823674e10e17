"""What the Triton memory ops cover: the checks the linear and MLP kernels share (dispatch in `api.py`)."""

from __future__ import annotations

import torch

from atlas_kernels.config import MemoryConfig
from atlas_kernels.ops.memory.inputs import OpInputs, prepare_inputs
from atlas_kernels.ops.memory.state import MemoryState, halo_size, resume_inputs

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
# limits of both memory kernels: chunk length, halo (c - 1 tokens) and key dim held in one program's tiles
MAX_CHUNK = 128
MAX_HALO = 64
MAX_KEY_DIM = 256


def common_unsupported(
    cfg: MemoryConfig, q: torch.Tensor | None, *, memory: tuple[str, ...], op: str, decay_targets=("zero",)
) -> tuple[str, str] | None:
    """None when `cfg` (and the input `q`) fit a Triton op implementing the memories `memory` and the decay targets
    `decay_targets`, else (field, reason) of the first unsupported setting; `op` names the kernel in the reason."""
    if cfg.memory not in memory:
        return "memory", f"memory={cfg.memory!r} ({op} implements memory={' and '.join(map(repr, memory))})"
    if cfg.optimizer not in ("gd", "momentum"):
        return "optimizer", f"optimizer={cfg.optimizer!r} ({op} implements optimizer='gd' and 'momentum')"
    if cfg.feature_map != "identity":
        return "feature_map", f"feature_map={cfg.feature_map!r} ({op} implements feature_map='identity')"
    if cfg.decay_target not in decay_targets:
        return "decay_target", f"decay_target={cfg.decay_target!r} ({op} decays toward 0 only)"
    if cfg.norm_placement != "inner":
        return (
            "norm_placement",
            f"norm_placement={cfg.norm_placement!r} ({op} implements the LayerNorm inside the memory)",
        )
    if cfg.is_global:
        return "window", f"window='global' ({op} implements a finite window c)"
    if cfg.gamma != "token":
        return "gamma", f"gamma={cfg.gamma!r} ({op} implements one window gate per token, gamma='token')"
    if halo_size(cfg) > MAX_HALO:
        return "window", f"window={cfg.window} ({op} supports c - 1 <= {MAX_HALO})"
    if cfg.chunk_size > MAX_CHUNK:
        return "chunk_size", f"chunk_size={cfg.chunk_size} ({op} supports b <= {MAX_CHUNK})"
    if q is not None:
        if q.dtype not in FLOAT_DTYPES:
            return "q", f"dtype {q.dtype}"
        if q.dim() == 4 and q.shape[-1] > MAX_KEY_DIM:
            return "q", f"key dim {q.shape[-1]} ({op} supports Dk <= {MAX_KEY_DIM})"
    return None


def window_tail(seq: torch.Tensor, incoming: torch.Tensor, end: int, halo: int) -> torch.Tensor:
    """Tokens [end - halo, end) of the extended sequence (the incoming halo, then seq) in heads-first layout: the
    halo a state carries to the next call.

    seq: [B, T, H(, D)] public layout; incoming: the call's incoming halo [B, H, halo(, D)].
    """
    if halo == 0:
        return incoming[:, :, :0]
    if end >= halo:
        return seq[:, end - halo : end].transpose(1, 2)
    return torch.cat([incoming[:, :, end:], seq[:, :end].transpose(1, 2).to(incoming.dtype)], dim=2)


def start_call(q, k, v, gates, params, cfg: MemoryConfig, state: MemoryState | None, unsupported):
    """What both Triton ops do first: refuse a call that `unsupported` (their `triton_unsupported`) names, put a
    state's pending tokens in front of the segment, validate. Returns (q, k, v, OpInputs, state, pending count)."""
    if unsupported is not None:
        field, reason = unsupported
        raise ValueError(f"{field}: not supported by the Triton backend: {reason}")
    q, k, v, gates, state, n_pending = resume_inputs(q, k, v, gates, state)
    x: OpInputs = prepare_inputs(q, k, v, gates, params, cfg)  # validation (names the offending argument)
    return q, k, v, x, state, n_pending


def incoming_halo(state: MemoryState | None, k: torch.Tensor, value_dim: int, halo: int, acc_dtype: torch.dtype):
    """(halo_k, halo_v, halo_gamma) a call starts from, contiguous: the state's, or zeros without a state."""
    if state is None:
        B, _, H, K = k.shape
        return (
            k.new_zeros(B, H, halo, K, dtype=acc_dtype),
            k.new_zeros(B, H, halo, value_dim, dtype=acc_dtype),
            k.new_zeros(B, H, halo, dtype=acc_dtype),
        )
    if state.halo_k.shape[2] != halo:
        raise ValueError(f"state: halo of {state.halo_k.shape[2]} tokens, expected window - 1 = {halo}")
    return state.halo_k.contiguous(), state.halo_v.contiguous(), state.halo_gamma.contiguous()


def call_state(groups_of, end, resume, seqs: dict[str, torch.Tensor], incoming, halo: int, chunk: int, acc_dtype):
    """The `MemoryState` after a call: the weight and momentum tensors `end` at its last token, as
    `groups_of(tensors) -> (weights, momentum)` arranges them, and the halo of the last tokens of (incoming halo,
    sequence). A call that ends inside a chunk also keeps the state at that chunk's start (`resume`) and the
    chunk's tokens so far (`pending`, from `seqs`: k, v and the gates, [B, T, ...]), which the next call re-runs.
    """
    T, sources = seqs["k"].shape[1], (seqs["k"], seqs["v"], seqs["gamma"])

    def at(end_token, tensors):
        weights, momentum = groups_of(tensors)
        tails = (window_tail(t, h, end_token, halo).to(acc_dtype) for t, h in zip(sources, incoming))
        halo_k, halo_v, halo_gamma = tails
        return MemoryState(weights=weights, momentum=momentum, halo_k=halo_k, halo_v=halo_v, halo_gamma=halo_gamma)

    state = at(T, end)
    tail = T % chunk
    if tail:
        start = T - tail
        state.resume = at(start, resume)
        state.pending = {n: t[:, start:].to(acc_dtype) for n, t in seqs.items()}
    return state
