"""The memory token mixer: projections, short convs, gates, the atlas-kernels memory op, normalised gated output.

Per head h (docs/memory-op.md, "The memory layer"):

    q, k, v = SiLU(ShortConv(x W_{q,k,v}))            causal depthwise conv of width 4
    q, k    = q / ||q||, k / ||k||
    alpha   = sigmoid(.), eta = eta_max sigmoid(.), theta = sigmoid(.), gamma = sigmoid(.)   low-rank, per head
              (gamma="per_step": c gamma gates per token, entry j for window position t - j)
    o       = memory_chunk(q, k, v, gates, W_0, ...)   the inner loop (atlas-kernels)
    y       = W_o (RMSNorm(o) * SiLU(x W_g))

Padding (attention_mask = 0) leaves the memory untouched: a padded token gets alpha = theta = 1 and
eta = gamma = 0 (no decay, no momentum decay, no gradient in any window), and its conv inputs are zeroed.
"""

import torch
import torch.nn.functional as F
from torch import nn

from atlas_kernels import MemoryState, memory_chunk, memory_read
from atlas_model.config import AtlasConfig
from atlas_model.layers.context import StepContext
from atlas_model.layers.conv import ShortConvolution
from atlas_model.layers.gates import LowRankGates
from atlas_model.layers.memory_params import MemoryParameters


class MemoryLayer(nn.Module):
    """One memory layer of `config.memory_heads` heads; `store` entries: conv_q/k/v, state (MemoryState),
    gamma_valid (gamma="per_step" after padding: validity of the last c - 1 tokens)."""

    def __init__(self, config: AtlasConfig) -> None:
        super().__init__()
        self.mem_cfg = config.memory_config()
        self.num_heads, self.head_dim = config.memory_heads, config.memory_head_dim
        d, width = config.hidden_size, config.memory_heads * config.memory_head_dim
        self.eta_max = config.eta_max
        self.backend = config.memory_backend

        self.q_proj = nn.Linear(d, width, bias=False)
        self.k_proj = nn.Linear(d, width, bias=False)
        self.v_proj = nn.Linear(d, width, bias=False)
        self.convs = (
            nn.ModuleDict({n: ShortConvolution(width, config.conv_size) for n in ("q", "k", "v")})
            if config.use_short_conv
            else None
        )
        initial = {"eta": config.initial_eta}
        if config.use_alpha_gate:
            initial["alpha"] = config.alpha_init
        if self.mem_cfg.uses_momentum:
            initial["theta"] = config.theta_init
        if config.use_gamma_gate and (self.mem_cfg.is_global or self.mem_cfg.window > 1):
            if self.mem_cfg.gamma == "per_step":  # c gates per token, each starting where the one gate did
                initial.update({f"gamma_{j}": config.gamma_init for j in range(self.mem_cfg.window)})
            else:
                initial["gamma"] = config.gamma_init
        self.gates = LowRankGates(d, config.gate_rank, self.num_heads, initial)
        self.memory = MemoryParameters(
            self.mem_cfg,
            self.num_heads,
            self.head_dim,
            config.memory_init,
            config.memory_init_scale,
            config.memory_output_init,
            config.memory_ln_gain_init,
        )
        self.value_scale = config.memory_value_scale
        self.o_norm = nn.RMSNorm(self.head_dim, eps=config.rms_norm_eps)
        self.g_proj = nn.Linear(d, width, bias=False) if config.use_output_gate else None
        self.o_proj = nn.Linear(width, d, bias=False)

    def forward(self, x: torch.Tensor, ctx: StepContext, store: dict | None = None) -> torch.Tensor:
        """x [B, T, d] -> [B, T, d]. `store` (the layer's cache entry, or None) carries conv and memory state."""
        q, k, v = self.project(x, ctx, store)
        state = None if store is None else store.get("state")
        gates, params = self.gate_values(x, ctx.valid), self.memory(v)
        if self.mem_cfg.gamma == "per_step":
            gates["gamma"] = self.mask_window_gates(gates["gamma"], ctx.valid, store)
        o, state = memory_chunk(q, k, v, gates, params, self.mem_cfg, state, backend=self.backend)
        if store is not None:
            store["state"] = state
        return self.output(o, x)

    def project(
        self, x: torch.Tensor, ctx: StepContext, store: dict | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x [B, T, d] -> q, k (unit norm per head), v, each [B, T, H, dh]."""
        B, T, _ = x.shape
        out = []
        for name, proj in (("q", self.q_proj), ("k", self.k_proj), ("v", self.v_proj)):
            z = proj(x)
            if ctx.valid is not None:
                z = z * ctx.valid[..., None].to(z.dtype)
            if self.convs is None:
                z = F.silu(z)
            else:
                z, conv_state = self.convs[name](z, None if store is None else store.get(f"conv_{name}"))
                if store is not None:
                    store[f"conv_{name}"] = conv_state
            out.append(z.view(B, T, self.num_heads, self.head_dim))
        q, k, v = out
        if self.value_scale is not None:
            v = self.value_scale * F.normalize(v, dim=-1)
        return same_dtype(F.normalize(q, dim=-1), F.normalize(k, dim=-1), v)

    def gate_values(self, x: torch.Tensor, valid: torch.Tensor | None) -> dict[str, torch.Tensor]:
        """Gates [B, T, H] of the op: alpha in (0, 1), eta in (0, eta_max), theta in (0, 1), gamma in (0, 1)."""
        logits = self.gates(x)
        gates = {name: torch.sigmoid(z) for name, z in logits.items()}
        gates["eta"] = self.eta_max * gates["eta"]
        if self.mem_cfg.gamma == "per_step":  # [B, T, H, c]: entry j weights window position t - j
            c = self.mem_cfg.window
            names = [f"gamma_{j}" for j in range(c)]
            stacked = [gates.pop(n) for n in names] if names[0] in gates else [torch.ones_like(gates["eta"])] * c
            gates["gamma"] = torch.stack(stacked, dim=-1)
        if valid is None:
            return gates
        keep = valid[..., None].expand_as(gates["eta"])  # [B, T, H]
        one, zero = torch.ones_like(gates["eta"]), torch.zeros_like(gates["eta"])
        gates["alpha"] = torch.where(keep, gates.get("alpha", one), one)
        gates["eta"] = torch.where(keep, gates["eta"], zero)
        if self.mem_cfg.gamma == "per_step":
            gates["gamma"] = torch.where(keep[..., None], gates["gamma"], 0.0)
        else:
            gates["gamma"] = torch.where(keep, gates.get("gamma", one), zero)
        if "theta" in gates:
            gates["theta"] = torch.where(keep, gates["theta"], one)
        return gates

    def mask_window_gates(self, gamma: torch.Tensor, valid: torch.Tensor | None, store: dict | None) -> torch.Tensor:
        """Zero the window gates [B, T, H, c] that point at padding, in this call or in earlier ones.

        With one gate per token a padded token's gamma = 0 keeps it out of every window; with c gates per step
        each later step must drop it itself (its k, v are 0, but phi(0) != 0 for poly / exp features). The last
        c - 1 validity flags stay in `store["gamma_valid"]` once padding has been seen.
        """
        c = self.mem_cfg.window
        past = None if store is None else store.get("gamma_valid")
        if c == 1 or (valid is None and past is None):
            return gamma
        B, T = gamma.shape[:2]
        if past is None:  # positions before the sequence start are the op's business
            past = torch.ones(B, c - 1, dtype=torch.bool, device=gamma.device)
        current = torch.ones(B, T, dtype=torch.bool, device=gamma.device) if valid is None else valid.bool()
        flags = torch.cat([past, current], dim=1)  # flags[:, c - 1 + t] = validity of token t
        mask = torch.stack([flags[:, c - 1 - j : c - 1 - j + T] for j in range(c)], dim=-1)  # [B, T, c]
        if store is not None:
            store["gamma_valid"] = flags[:, flags.shape[1] - (c - 1) :]
        return gamma * mask[:, :, None, :].to(gamma.dtype)

    def retrieve(self, q: torch.Tensor, state: MemoryState | None) -> torch.Tensor:
        """Read the memory at `state` without writing: q [B, T, H, dh] (unit norm) -> o [B, T, H, dh].

        Each output is f(q_t; W) with W the memory's weights after the state's last token (`memory_read`: no
        gradient step, no Newton-Schulz).
        """
        return memory_read(q, self.memory(q), self.mem_cfg, state)

    def output(self, o: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Memory read-out o [B, T, H, dh] -> W_o (RMSNorm(o) * SiLU(x W_g)) [B, T, d]."""
        B, T = o.shape[:2]
        o = self.o_norm(o).reshape(B, T, self.num_heads * self.head_dim)
        if self.g_proj is not None:
            o = o * F.silu(self.g_proj(x))
        return self.o_proj(o)


def same_dtype(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The tensors in one dtype, as the memory op requires (docs/memory-op.md, "Mixed precision").

    CUDA autocast runs `F.normalize`'s norm in float32 while the projections come out in bf16, and the memory op is
    a custom operation that autocast does not reach: under autocast the inputs take autocast's dtype (bf16 inputs,
    float32 state and accumulation inside the op), otherwise the widest of their dtypes."""
    device = tensors[0].device.type
    try:
        autocast = torch.is_autocast_enabled(device)
    except RuntimeError:  # a device type autocast does not know (meta, in the cost counter)
        autocast = False
    if autocast:
        dtype = torch.get_autocast_dtype(device)
    else:
        dtype = tensors[0].dtype
        for t in tensors[1:]:
            dtype = torch.promote_types(dtype, t.dtype)
    return tuple(t if t.dtype == dtype else t.to(dtype) for t in tensors)
