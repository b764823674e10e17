"""Titans-style hybrids of the memory and attention (docs/memory-op.md, "Hybrids"). MAL needs no module of its own: its
block simply runs a memory layer and then an SWA layer (see `atlas_model.modeling.build_mixers`).

MAG (memory as a gate): both branches read the same input,

    o = RMSNorm(SWA(x)) * sigmoid(RMSNorm(Memory(x)))

(Titans: "normalise the outputs using learnable vector-valued weights, followed by a non-linearity"). Each branch
keeps its own output projection, so the gate acts on the residual-stream width.

MAC (memory as context), per segment S of `mac_segment_size` tokens starting with memory state M_s:

    h_t = Read(M_s, q_t)                    read-out of the memory as it was at the segment start
    y   = Attn(P || h || x)                 full causal attention inside the segment: token t sees the
                                            persistent tokens P and h_j, x_j for j <= t of its segment
    m   = Memory(y)                         the memory is written with (and read after writing by) y
    o   = RMSNorm(y) * sigmoid(RMSNorm(m))

Titans lets every token of a segment see all of h (h depends on the whole segment's queries), which is not
causal; here token t sees h_j only for j <= t, so prefill, chunked prefill and decoding agree exactly.
"""

import torch
import torch.nn.functional as F
from torch import nn
from transformers import initialization as init

from atlas_kernels import MemoryState
from atlas_model.config import AtlasConfig
from atlas_model.layers.attention import Attention, KVWindow, all_valid, attention_mask
from atlas_model.layers.context import StepContext
from atlas_model.layers.conv import ShortConvolution
from atlas_model.layers.memory import MemoryLayer


def substore(store: dict | None, key: str) -> dict | None:
    """The cache entry of a sub-module (None when not caching)."""
    return None if store is None else store.setdefault(key, {})


class MAGMixer(nn.Module):
    """Memory and sliding-window attention in parallel, combined by a normalised sigmoid gate."""

    def __init__(self, config: AtlasConfig) -> None:
        super().__init__()
        d = config.hidden_size
        self.memory = MemoryLayer(config)
        self.swa = Attention(d, config.num_attention_heads, config.rope_theta, window=config.sliding_window)
        self.swa_norm = nn.RMSNorm(d, eps=config.rms_norm_eps)
        self.memory_norm = nn.RMSNorm(d, eps=config.rms_norm_eps)

    def forward(self, x: torch.Tensor, ctx: StepContext, store: dict | None = None) -> torch.Tensor:
        y = self.swa(x, ctx, substore(store, "swa"))
        m = self.memory(x, ctx, substore(store, "memory"))
        return self.swa_norm(y) * torch.sigmoid(self.memory_norm(m))


class MACMixer(nn.Module):
    """Memory as context: segment-wise full attention over memory read-outs and the segment's tokens.

    Cache entries: "memory" (the memory layer's), "conv_read" (read-query conv), "segment" (the current
    segment's start state and its h / x key-value windows).
    """

    def __init__(self, config: AtlasConfig) -> None:
        super().__init__()
        d, H, dh = config.hidden_size, config.memory_heads, config.memory_head_dim
        self.segment_size = config.mac_segment_size
        self.num_heads, self.head_dim = H, dh
        self.attn = Attention(d, config.num_attention_heads, config.rope_theta, window=None)
        self.memory = MemoryLayer(config)
        self.read_q = nn.Linear(d, H * dh, bias=False)
        self.read_conv = ShortConvolution(H * dh, config.conv_size) if config.use_short_conv else None
        self.read_norm = nn.RMSNorm(dh, eps=config.rms_norm_eps)
        self.read_out = nn.Linear(H * dh, d, bias=False)
        P = config.mac_persistent_tokens
        self.persistent = nn.Parameter(torch.empty(P, d)) if P > 0 else None
        self.persistent_std = config.initializer_range
        self.out_norm = nn.RMSNorm(d, eps=config.rms_norm_eps)
        self.memory_norm = nn.RMSNorm(d, eps=config.rms_norm_eps)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Persistent tokens ~ N(0, initializer_range^2) (the sub-modules initialise themselves)."""
        if self.persistent is not None:
            init.normal_(self.persistent, mean=0.0, std=self.persistent_std)

    def forward(self, x: torch.Tensor, ctx: StepContext, store: dict | None = None) -> torch.Tensor:
        """x [B, T, d] -> [B, T, d], segment by segment at absolute segment boundaries."""
        T = x.shape[1]
        # Without a cache the memory state still has to flow from one segment to the next.
        memory_store = {} if store is None else store.setdefault("memory", {})
        q_read = self._read_queries(x, ctx, store)  # [B, T, H, dh]
        segment = None if store is None else store.get("segment")
        outs, a = [], 0
        while a < T:
            pos = ctx.start + a
            b = min(T, a + self.segment_size - pos % self.segment_size)
            if pos % self.segment_size == 0 or segment is None:
                segment = {"start_state": memory_store.get("state"), "h": None, "x": None}
            sub = ctx.slice(a, b)
            h = self._read(q_read[:, a:b], segment["start_state"])
            y = self._attend(x[:, a:b], h, sub, segment)
            m = self.memory(y, sub, memory_store)
            outs.append(self.out_norm(y) * torch.sigmoid(self.memory_norm(m)))
            a = b
        if store is not None:
            store["segment"] = segment
        return torch.cat(outs, dim=1)

    def _read_queries(self, x: torch.Tensor, ctx: StepContext, store: dict | None) -> torch.Tensor:
        B, T, _ = x.shape
        z = self.read_q(x)
        if ctx.valid is not None:
            z = z * ctx.valid[..., None].to(z.dtype)
        if self.read_conv is None:
            z = F.silu(z)
        else:
            z, conv_state = self.read_conv(z, None if store is None else store.get("conv_read"))
            if store is not None:
                store["conv_read"] = conv_state
        return F.normalize(z.view(B, T, self.num_heads, self.head_dim), dim=-1)

    def _read(self, q: torch.Tensor, state: MemoryState | None) -> torch.Tensor:
        """Context tokens h [B, t, d] read from the memory at the segment start."""
        B, t = q.shape[:2]
        o = self.memory.retrieve(q, state)  # [B, t, H, dh]
        return self.read_out(self.read_norm(o).reshape(B, t, self.num_heads * self.head_dim))

    def _attend(self, x: torch.Tensor, h: torch.Tensor, ctx: StepContext, segment: dict) -> torch.Tensor:
        """Causal attention of x's queries over (persistent, h, x) of the segment so far; updates `segment`."""
        positions = ctx.positions(x.device)
        q = self.attn.queries(x, positions)
        valid = ctx.valid if ctx.valid is not None else all_valid(x)
        windows = {}
        for name, z in (("h", h), ("x", x)):
            k, v = self.attn.keys_values(z, positions)
            past = segment[name]
            windows[name] = KVWindow(k, v, valid, ctx.start + ctx.length) if past is None else past.extend(k, v, valid)
        segment.update(windows)
        hw, xw = windows["h"], windows["x"]
        keys = torch.cat([hw.keys, xw.keys], dim=2)
        values = torch.cat([hw.values, xw.values], dim=2)
        mask = attention_mask(
            positions,
            torch.cat([hw.positions(), xw.positions()]),
            torch.cat([hw.valid, xw.valid], dim=1),
            window=None,
        )  # [B, 1, t, S]
        if self.persistent is not None:
            B = x.shape[0]
            pk = self.attn.split_heads(self.attn.k_proj(self.persistent)[None].expand(B, -1, -1))  # no RoPE
            pv = self.attn.split_heads(self.attn.v_proj(self.persistent)[None].expand(B, -1, -1))
            keys, values = torch.cat([pk, keys], dim=2), torch.cat([pv, values], dim=2)
            always = mask.new_ones(*mask.shape[:3], pk.shape[2])
            mask = torch.cat([always, mask], dim=-1)
        o = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
        return self.attn.output(o)
