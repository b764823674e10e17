"""What the Triton memory ops cover: the checks the linear and MLP kernels share (dispatch in `api.py`)."""

from __future__ import annotations

import torch

from atlas_kernels.config import MemoryConfig
from atlas_kernels.ops.memory.state import halo_size

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
