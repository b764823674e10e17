"""Softmax attention with RoPE (Transformer++), its sliding-window variant, and the masked core MAC reuses."""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from atlas_model.layers.context import StepContext


@dataclass
class KVWindow:
    """Cached keys and values of one attention layer: the last n tokens before absolute position `end`.

    Attributes:
        keys, values: [B, H, n, dh], RoPE already applied to the keys.
        valid: [B, n] bool, False at padding.
        end: absolute position just after the last cached token (positions are end - n .. end - 1).
    """

    keys: torch.Tensor
    values: torch.Tensor
    valid: torch.Tensor
    end: int

    def positions(self) -> torch.Tensor:
        n = self.keys.shape[2]
        return torch.arange(self.end - n, self.end, device=self.keys.device)

    def extend(self, keys: torch.Tensor, values: torch.Tensor, valid: torch.Tensor) -> "KVWindow":
        """Append T new tokens: keys, values [B, H, T, dh], valid [B, T]."""
        return KVWindow(
            torch.cat([self.keys, keys], dim=2),
            torch.cat([self.values, values], dim=2),
            torch.cat([self.valid, valid], dim=1),
            self.end + keys.shape[2],
        )

    def last(self, keep: int | None) -> "KVWindow":
        """The last `keep` tokens (None: all)."""
        if keep is None or self.keys.shape[2] <= keep:
            return self
        cut = self.keys.shape[2] - keep
        return KVWindow(self.keys[:, :, cut:], self.values[:, :, cut:], self.valid[:, cut:], self.end)


def rope_cos_sin(
    positions: torch.Tensor, dim: int, theta: float, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [T, dim] of the rotary embedding at integer positions [T] (computed in >= float32)."""
    work = torch.float64 if dtype == torch.float64 else torch.float32
    inv_freq = 1.0 / theta ** (torch.arange(0, dim, 2, device=positions.device, dtype=work) / dim)
    angles = positions.to(work)[:, None] * inv_freq[None, :]  # [T, dim / 2]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x [B, H, T, dh] by the angles of its positions (rotate-half convention, as Llama)."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


def attention_mask(
    q_pos: torch.Tensor, k_pos: torch.Tensor, k_valid: torch.Tensor | None, window: int | None
) -> torch.Tensor:
    """Boolean mask [B or 1, 1, T, S] (True = attend): causal, within `window`, not on padded keys.

    A query may always attend to a key at its own position, so that a padded query (all of whose keys are
    padding) gets a finite output instead of NaN; its output is never read.
    """
    rel = q_pos[:, None] - k_pos[None, :]  # [T, S]
    allowed = rel >= 0
    if window is not None:
        allowed = allowed & (rel < window)
    allowed = allowed[None]
    if k_valid is not None:
        allowed = (allowed & k_valid[:, None, :]) | (rel == 0)[None]
    return allowed[:, None]


class Attention(nn.Module):
    """Multi-head causal softmax attention with RoPE; `window` = None (full) or w (sliding window of w keys)."""

    def __init__(self, hidden_size: int, num_heads: int, rope_theta: float, window: int | None) -> None:
        super().__init__()
        self.num_heads, self.head_dim = num_heads, hidden_size // num_heads
        self.rope_theta, self.window = rope_theta, window
        self.q_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.k_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.v_proj = nn.Linear(hidden_size, hidden_size, bias=False)
        self.o_proj = nn.Linear(hidden_size, hidden_size, bias=False)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        return x.view(B, T, self.num_heads, self.head_dim).transpose(1, 2)  # [B, H, T, dh]

    def rope(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        cos, sin = rope_cos_sin(positions, self.head_dim, self.rope_theta, x.dtype)
        return apply_rope(x, cos, sin)

    def queries(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """x [B, T, d] -> rotated queries [B, H, T, dh]."""
        return self.rope(self.split_heads(self.q_proj(x)), positions)

    def keys_values(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [B, T, d] -> rotated keys and values [B, H, T, dh]."""
        return self.rope(self.split_heads(self.k_proj(x)), positions), self.split_heads(self.v_proj(x))

    def output(self, o: torch.Tensor) -> torch.Tensor:
        """Attention output [B, H, T, dh] -> [B, T, d]."""
        B, H, T, dh = o.shape
        return self.o_proj(o.transpose(1, 2).reshape(B, T, H * dh))

    def forward(self, x: torch.Tensor, ctx: StepContext, store: dict | None = None) -> torch.Tensor:
        """x [B, T, d] -> [B, T, d]; `store` (the layer's cache entry) holds the KV window across calls."""
        positions = ctx.positions(x.device)
        q = self.queries(x, positions)
        k, v = self.keys_values(x, positions)
        past: KVWindow | None = None if store is None else store.get("kv")
        valid = ctx.valid if ctx.valid is not None else all_valid(x)
        end = ctx.start + ctx.length
        window = KVWindow(k, v, valid, end) if past is None else past.extend(k, v, valid)
        if past is None and ctx.valid is None and self.window is None:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            mask = attention_mask(positions, window.positions(), window.valid, self.window)
            o = F.scaled_dot_product_attention(q, window.keys, window.values, attn_mask=mask)
        if store is not None:
            # The next query at position p sees keys p - w + 1 .. p: the last w - 1 cached ones suffice.
            store["kv"] = window.last(None if self.window is None else self.window - 1)
        return self.output(o)


def all_valid(x: torch.Tensor) -> torch.Tensor:
    """[B, T] all-True padding mask for x [B, T, ...]."""
    return torch.ones(x.shape[:2], dtype=torch.bool, device=x.device)
