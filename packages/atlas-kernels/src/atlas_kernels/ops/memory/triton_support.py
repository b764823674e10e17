"""What the Triton memory ops cover: the checks the linear and MLP kernels share (dispatch in `api.py`)."""

from __future__ import annotations

import torch

from atlas_kernels.config import MemoryConfig

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def common_unsupported(
    cfg: MemoryConfig, q: torch.Tensor | None, *, memory: str, op: str, max_halo: int, max_chunk: int, max_key_dim: int
) -> tuple[str, str] | None:
    """None when `cfg` (and the input `q`) fit a Triton op implementing `memory`, else (field, reason) of the first
    unsupported setting; `op` names the kernel in the reason."""
    if cfg.memory != memory:
        return "memory", f"memory={cfg.memory!r} ({op} implements memory={memory!r})"
    if cfg.optimizer not in ("gd", "momentum"):
        return "optimizer", f"optimizer={cfg.optimizer!r} ({op} implements optimizer='gd' and 'momentum')"
    if cfg.feature_map != "identity":
        return "feature_map", f"feature_map={cfg.feature_map!r} ({op} implements feature_map='identity')"
    if cfg.decay_target != "zero":
        return "decay_target", f"decay_target={cfg.decay_target!r} ({op} decays toward 0 only)"
    if cfg.is_global:
        return "window", f"window='global' ({op} implements a finite window c)"
    if cfg.window - 1 > max_halo:
        return "window", f"window={cfg.window} ({op} supports c - 1 <= {max_halo})"
    if cfg.chunk_size > max_chunk:
        return "chunk_size", f"chunk_size={cfg.chunk_size} ({op} supports b <= {max_chunk})"
    if q is not None:
        if q.dtype not in FLOAT_DTYPES:
            return "q", f"dtype {q.dtype}"
        if q.dim() == 4 and q.shape[-1] > max_key_dim:
            return "q", f"key dim {q.shape[-1]} ({op} supports Dk <= {max_key_dim})"
    return None
