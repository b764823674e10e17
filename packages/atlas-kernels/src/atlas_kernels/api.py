"""Public entry points of the memory op, with backend dispatch."""

from __future__ import annotations

import os
from typing import Literal

import torch

from atlas_kernels.config import MemoryConfig
from atlas_kernels.ops.dispatch import triton_available
from atlas_kernels.ops.memory.chunk import memory_chunk_torch
from atlas_kernels.ops.memory.state import MemoryState

Backend = Literal["auto", "torch", "compiled", "triton"]
BACKENDS = ("auto", "torch", "compiled", "triton")


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def triton_unsupported(cfg: MemoryConfig, q: torch.Tensor | None = None):
    """None when a Triton kernel covers this call, else (field, reason) of the first unsupported setting.

    memory="linear" -> `triton.linear`, memory="mlp" | "gated_mlp" -> `triton.mlp`.
    """
    if cfg.memory in ("mlp", "gated_mlp"):
        from atlas_kernels.ops.memory.triton.mlp import triton_unsupported as mlp_unsupported

        return mlp_unsupported(cfg, q)
    if cfg.memory != "linear":
        return "memory", f"memory={cfg.memory!r} (the Triton ops implement memory='linear', 'mlp' and 'gated_mlp')"
    from atlas_kernels.ops.memory.triton.linear import triton_unsupported as linear_unsupported

    return linear_unsupported(cfg, q)


# The Triton MLP-memory kernels match the torch op under the interpreter (float64, any shape) and on an H200 at
# small tiles, but not at the paper's shapes (head dim 64, hidden 256, bf16): error ratios 1.5-2 against a torch
# bf16 baseline of 3e-3 (benchmarks/gpu/results-2026-11-30-h200.md). Until the cause is found, "auto" keeps MLP
# memories on the torch op; backend="triton" still runs the kernel, and this variable lets "auto" pick it again.
MLP_TRITON_ENV = "ATLAS_KERNELS_MLP_TRITON"


def auto_excluded(cfg: MemoryConfig) -> str | None:
    """Why backend="auto" does not pick a Triton kernel that covers `cfg` (None: nothing holds it back)."""
    if cfg.memory in ("mlp", "gated_mlp") and os.environ.get(MLP_TRITON_ENV) != "1":
        return (
            f"memory={cfg.memory!r}: the Triton MLP kernels fail the GPU check at real shapes; "
            f"set {MLP_TRITON_ENV}=1 to use them under 'auto'"
        )
    return None


def select_backend(q: torch.Tensor, cfg: MemoryConfig, backend: str = "auto") -> str:
    """The backend `memory_chunk` runs: "torch", "compiled" or "triton" (see `memory_chunk` for the rules).

    Raises ValueError for an unknown backend, and for backend="triton" on a configuration the kernels do not
    cover (the message names the unsupported field), without a triton install, or on CPU tensors without
    TRITON_INTERPRET=1.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {', '.join(BACKENDS)}, got {backend!r}")
    if backend in ("torch", "compiled"):
        return backend
    if backend == "auto":
        if not (isinstance(q, torch.Tensor) and q.is_cuda and isinstance(cfg, MemoryConfig)):
            return "torch"
        if q.dtype == torch.float64 or not triton_available():
            return "torch"
        if auto_excluded(cfg) is not None:
            return "torch"
        return "torch" if triton_unsupported(cfg, q) is not None else "triton"
    if not isinstance(cfg, MemoryConfig):
        raise ValueError(f"cfg: expected a MemoryConfig, got {type(cfg).__name__}")
    if not triton_available():
        raise ValueError("backend: 'triton' needs the triton package (pip install triton; Linux only)")
    unsupported = triton_unsupported(cfg, q if isinstance(q, torch.Tensor) else None)
    if unsupported is not None:
        field, reason = unsupported
        raise ValueError(f"{field}: not supported by backend='triton': {reason}; use backend='torch' or 'auto'")
    if isinstance(q, torch.Tensor) and not q.is_cuda and not _interpreting():
        raise ValueError(
            f"backend: 'triton' needs CUDA tensors (got device {q.device}); on CPU set TRITON_INTERPRET=1 before "
            "importing atlas_kernels' Triton modules (tests only: about 1000x slower), or use backend='torch'"
        )
    return "triton"


def memory_chunk(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    gates: dict[str, torch.Tensor],
    params: dict[str, torch.Tensor],
    cfg: MemoryConfig,
    state: MemoryState | None = None,
    backend: Backend = "auto",
) -> tuple[torch.Tensor, MemoryState]:
    """Run the memory over a segment, chunkwise-parallel (chunk size cfg.chunk_size).

    Args:
        q, k: [B, T, H, Dk] queries and keys, l2-normalised by the caller (the feature map is applied here).
        v: [B, T, H, Dv] values.
        gates: dict of [B, T, H] tensors: "eta" (inner learning rate, >= 0; required), "alpha" (retention in
            (0, 1]; default 1), "theta" (momentum decay in [0, 1); required for momentum/muon), "gamma"
            (window gate of each token in [0, 1]; default 1). Values are used as given (no clamping).
        params: outer-loop parameters of the layer (`init_memory_params` makes them):
            "W" [H, Dv, D] (linear) or "W1" [H, Dv, Dh], "W2" [H, Dh, D] (+ "W3" [H, Dh, D] gated): the
            initial inner weights W_0, with D = cfg.feature_dim(Dk); "ln_weight", "ln_bias" [H, Dv] when
            cfg.memory_norm (MLP memories); "feature_coeffs" [H, p + 1] or [p + 1] (a_i >= 0) for poly features;
            for exp features the first layer has no explicit W_0: "init_keys" [H, P, Dk] and
            "init_values.<name>" [H, P, out] give W_0 phi*(x) = sum_p values_p exp(keys_p . x)
            (P = cfg.exp_init_keys; absent when P = 0, i.e. W_0 = 0 on that layer).
        cfg: the MemoryConfig.
        state: the `MemoryState` returned by a previous call (segments chain exactly), or None to start
            from W_0, S_0 = 0 and an empty window.
        backend: "auto" | "torch" | "compiled" | "triton".
            "torch": the PyTorch chunk op (every configuration, every dtype and device).
            "compiled": the PyTorch chunk op with every full chunk under `torch.compile(fullgraph=True)`
                (`memory_chunk_torch(compiled=True)`): the same values up to rounding, fewer and fused operations
                per chunk; the first calls compile (tens of seconds). Raises ValueError for feature_map="exp" and
                window="global", whose state grows with every chunk. Not chosen by "auto" (docs/chunkwise.md,
                "Compilation").
            "triton": the Triton kernels (`ops/memory/triton/linear.py`, `ops/memory/triton/mlp.py`), which cover
                memory "linear", "mlp" or "gated_mlp" (with or without memory_norm / residual, gelu or silu),
                feature_map="identity", optimizer "gd" or "momentum", bias l2 or dot, a finite window with
                c - 1 <= 64, decay_first (linear), chunk_size <= 128, Dk <= 256, float16/bfloat16/float32
                (float64 too: exact under the interpreter, for tests; not meant for GPUs). Both backwards are
                Triton kernels that recompute each chunk from its stored start state.
                Raises ValueError naming the field for anything else; needs CUDA tensors, or CPU tensors with
                TRITON_INTERPRET=1 (set before the Triton modules are imported). Outputs, states and every
                gradient match the torch op; states interoperate both ways (resume of pending tokens included).
            "auto": "triton" for CUDA tensors in a configuration it covers (float64 excluded) when triton is
                installed, "torch" otherwise.
    Returns:
        (o [B, T, H, Dv] in the dtype of v, the MemoryState after the last token).
    """
    if select_backend(q, cfg, backend) == "triton":
        if cfg.memory in ("mlp", "gated_mlp"):
            from atlas_kernels.ops.memory.triton.mlp import memory_chunk_triton_mlp

            return memory_chunk_triton_mlp(q, k, v, gates, params, cfg, state)
        from atlas_kernels.ops.memory.triton.linear import memory_chunk_triton

        return memory_chunk_triton(q, k, v, gates, params, cfg, state)
    return memory_chunk_torch(q, k, v, gates, params, cfg, state, compiled=backend == "compiled")


def memory_step(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    gates: dict[str, torch.Tensor],
    params: dict[str, torch.Tensor],
    cfg: MemoryConfig,
    state: MemoryState | None = None,
    backend: Backend = "auto",
) -> tuple[torch.Tensor, MemoryState]:
    """Decode one token: q, k [B, H, Dk], v [B, H, Dv], gates [B, H] -> (o [B, H, Dv], state).

    Equal to `memory_chunk` on a length-1 segment: with chunk size b > 1 the state keeps the current chunk's
    start weights and its tokens so far, so decoding reproduces the chunked forward exactly at O(b) work
    per token; memory stays constant in the sequence length (except exp features, whose dual-form first
    layer grows like a KV cache). `backend` as in `memory_chunk`.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 3:
            raise ValueError(f"{name}: expected [B, H, D] for one decoding step, got {getattr(t, 'shape', t)}")
    step_gates = {n: g.unsqueeze(1) for n, g in gates.items() if g is not None}
    o, state = memory_chunk(
        q.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1), step_gates, params, cfg, state, backend=backend
    )
    return o.squeeze(1), state
