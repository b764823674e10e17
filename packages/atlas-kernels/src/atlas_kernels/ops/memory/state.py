"""`MemoryState`: everything a segment hands to the next one (and decoding consumes token by token)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from atlas_kernels.config import MemoryConfig
from atlas_kernels.ops.memory.inputs import GATE_DEFAULTS, GATE_NAMES


def halo_size(cfg: MemoryConfig) -> int:
    """The halo length of a finite window of c tokens: the c - 1 tokens before a chunk (or a decoding step) that
    its window reaches back into (docs/chunkwise.md#halo). The global window's halo is every past token: 0 at the
    start of a sequence, growing after."""
    return 0 if cfg.is_global else cfg.window - 1


@dataclass
class MemoryState:
    """Recurrent state of the memory op, per batch element and head.

    Attributes:
        weights: inner weights W_t by name ("W" | "W1", "W2"[, "W3"]), each [B, H, out, in].
            For feature_map="exp" the first-layer weights (those acting on phi*) are held in dual form by
            the chunk op and the decoder: weights[name] is then a coefficient tensor [B, H, N, out] over the
            keys in `kernel_keys`, i.e. W phi*(x) = sum_n weights[name][n] exp(kernel_keys[n] . x). The naive
            oracle holds them as explicit truncated-Taylor matrices instead (`explicit_exp` = True).
        momentum: S_t by name, same shapes as `weights` (None for optimizer="gd").
        halo_k, halo_v, halo_gamma: the halo, the last `halo = halo_size(cfg)` = c - 1 keys [B, H, halo, Dk],
            values [B, H, halo, Dv] and window gates [B, H, halo] (oldest first). Their gradients are re-evaluated
            at the next chunk's start weights. Padding at the start of a sequence has gamma = 0. With
            window="global" they hold every past token. With cfg.gamma="per_step" the gates live with the step that
            uses them (each token's c-vector), so halo_gamma is instead the presence of each halo token: 1 for a
            token of the sequence, 0 for the padding before its start (the only thing later steps need besides k
            and v).
        kernel_keys: [B, H, N, Dk] keys of the dual-form weights (exp features only): the P learned initial
            keys followed by every token seen so far.
        explicit_exp: True when exp-feature weights are explicit Taylor matrices (naive oracle state).
        resume, pending: when the sequence so far ends inside a chunk (chunked semantics, b > 1), the state at
            that chunk's start and the chunk's tokens so far (public layout: k [B, n, H, Dk], v, and the four
            gates [B, n, H]; gamma [B, n, H, c] under gamma="per_step"). The next call re-runs those n < b tokens
            from `resume`, so chunk boundaries are absolute positions and any split into segments (or
            token-by-token decoding) gives the same result as one call. The other fields are the state after
            the last token.
    """

    weights: dict[str, torch.Tensor]
    momentum: dict[str, torch.Tensor] | None
    halo_k: torch.Tensor
    halo_v: torch.Tensor
    halo_gamma: torch.Tensor
    kernel_keys: torch.Tensor | None = None
    explicit_exp: bool = False
    resume: MemoryState | None = None
    pending: dict[str, torch.Tensor] | None = None

    def tensors(self) -> dict[str, torch.Tensor]:
        """Every tensor of the state under a flat name (for tests and serialisation)."""
        out = {f"weights.{k}": v for k, v in self.weights.items()}
        if self.momentum is not None:
            out.update({f"momentum.{k}": v for k, v in self.momentum.items()})
        out.update(halo_k=self.halo_k, halo_v=self.halo_v, halo_gamma=self.halo_gamma)
        if self.kernel_keys is not None:
            out["kernel_keys"] = self.kernel_keys
        return out

    @classmethod
    def from_tensors(cls, flat: dict[str, torch.Tensor]) -> MemoryState:
        """The inverse of `tensors()` (a state without resume / pending tokens or explicit-Taylor weights)."""

        def pick(prefix: str) -> dict[str, torch.Tensor]:
            return {n[len(prefix) :]: t for n, t in flat.items() if n.startswith(prefix)}

        return cls(
            pick("weights."), pick("momentum.") or None, flat["halo_k"], flat["halo_v"], flat["halo_gamma"],
            flat.get("kernel_keys"),
        )  # fmt: skip

    def detach(self) -> MemoryState:
        """A copy cut from the autograd graph (truncated backprop between segments)."""
        return MemoryState(
            weights={k: v.detach() for k, v in self.weights.items()},
            momentum=None if self.momentum is None else {k: v.detach() for k, v in self.momentum.items()},
            halo_k=self.halo_k.detach(),
            halo_v=self.halo_v.detach(),
            halo_gamma=self.halo_gamma.detach(),
            kernel_keys=None if self.kernel_keys is None else self.kernel_keys.detach(),
            explicit_exp=self.explicit_exp,
            resume=None if self.resume is None else self.resume.detach(),
            pending=None if self.pending is None else {k: v.detach() for k, v in self.pending.items()},
        )


def pending_inputs(x, start: int) -> dict[str, torch.Tensor]:
    """The tokens [start:] of heads-first op inputs, stored in the public layout ([B, n, H, ...])."""
    out = {name: getattr(x, name)[:, :, start:].transpose(1, 2) for name in ("k", "v")}
    out.update({name: getattr(x, name)[:, :, start:].transpose(1, 2) for name in GATE_NAMES})
    return out


def resume_inputs(q, k, v, gates, state: MemoryState | None):
    """Prepend a state's pending (partial-chunk) tokens to new inputs and restart from the chunk start.

    Returns (q, k, v, gates, state, n_pending); the caller drops the first n_pending outputs. The pending
    tokens' queries are never read (their outputs are dropped), so their keys stand in for them.
    """
    if state is None or state.pending is None:
        return q, k, v, gates, state, 0
    p = state.pending
    n = p["k"].shape[1]
    if p["k"].shape[0] != k.shape[0] or p["k"].shape[2:] != k.shape[2:]:
        raise ValueError(f"state: pending keys {tuple(p['k'].shape)} do not continue k {tuple(k.shape)}")
    cat = lambda a, b: torch.cat([a.to(b.dtype), b], dim=1)  # noqa: E731
    new_gates = {}
    for name in GATE_NAMES:
        g = gates.get(name) if isinstance(gates, dict) else None
        if g is None and name in GATE_DEFAULTS:  # a window-gamma default takes the pending gates' c
            g = k.new_full((*k.shape[:3], *p[name].shape[3:]), GATE_DEFAULTS[name])
        if g is not None:  # a missing required gate is reported by prepare_inputs
            dtype = torch.promote_types(p[name].dtype, g.dtype)  # gates keep float32 under bf16 inputs
            new_gates[name] = torch.cat([p[name].to(dtype), g.to(dtype)], dim=1)
    return cat(p["k"], q), cat(p["k"], k), cat(p["v"], v), new_gates, state.resume, n
