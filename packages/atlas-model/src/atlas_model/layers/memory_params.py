"""The outer-loop parameters of one memory layer, in the form the atlas-kernels op takes them.

`atlas_kernels.init_memory_params` defines the names and shapes ("W" | "W1", "W2"[, "W3"], "ln_weight",
"ln_bias", "feature_coeffs", "init_keys", "init_values.<name>"), each with a leading head dim H. Here:
- the initial weights W_0 (and exp init keys/values) are shared by the heads of a layer ("shared": stored
  [1, ...], expanded to [H, ...]), per head, or absent (W_0 = 0, linear memories);
- the polynomial coefficients a_i are stored through softplus so that a_i >= 0 (init a_i = 1/i!);
- LayerNorm affine weights and a_i are always per head (they are small).
"""

import torch
import torch.nn.functional as F
from torch import nn
from transformers import initialization as init

from atlas_kernels import MemoryConfig, init_memory_params

# Parameters that stay per head even when W_0 is shared.
_PER_HEAD = ("feature_coeffs", "ln_weight", "ln_bias")


def _inverse_softplus(a: torch.Tensor) -> torch.Tensor:
    return a + torch.log(-torch.expm1(-a))  # log(exp(a) - 1), stable for large a


class MemoryParameters(nn.Module):
    """Holds the op's parameters as nn.Parameters; `forward()` returns the dict `memory_chunk` expects."""

    def __init__(
        self,
        cfg: MemoryConfig,
        num_heads: int,
        head_dim: int,
        mode: str,
        init_scale: float,
        output_init: str = "random",
        ln_gain: float = 1.0,
    ) -> None:
        """mode: "shared" | "per_head" | "zero" (AtlasConfig.memory_init); output_init "random" | "zero" (the MLP
        memory's output layer W1 at 0) and ln_gain (the memory LayerNorm's initial weight) as in AtlasConfig."""
        super().__init__()
        self.cfg, self.num_heads, self.head_dim = cfg, num_heads, head_dim
        self.mode, self.init_scale = mode, init_scale
        self.output_init, self.ln_gain = output_init, ln_gain
        # Registered directly on this module (not in a ParameterDict) so that `PreTrainedModel` finds them as
        # this module's own parameters when it decides whether the module still needs initialising.
        self.names: list[str] = []
        self._zero: dict[str, tuple[int, ...]] = {}
        for name, t in init_memory_params(cfg, num_heads, head_dim, head_dim, device="meta").items():
            if mode == "zero" and name not in _PER_HEAD:
                self._zero[name] = tuple(t.shape)
                continue
            lead = num_heads if (mode == "per_head" or name in _PER_HEAD) else 1
            self.register_parameter(_key(name), nn.Parameter(torch.empty(lead, *t.shape[1:])))
            self.names.append(name)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Initialise like `init_memory_params` (W ~ N(0, scale^2 / fan_in), a_i = 1/i!, LN = (1, 0)).

        Uses `transformers.initialization`, which skips tensors already loaded from a checkpoint.
        """
        if not self.names:
            return
        ref = getattr(self, _key(self.names[0]))
        fresh = init_memory_params(
            self.cfg,
            self.num_heads,
            self.head_dim,
            self.head_dim,
            dtype=torch.float32,
            device=ref.device,
            init_scale=self.init_scale,
        )
        for name in self.names:
            param, value = getattr(self, _key(name)), fresh[name]
            value = value[: param.shape[0]]
            if name == "feature_coeffs":
                value = _inverse_softplus(value.double()).float()
            elif name == "ln_weight":
                value = value * self.ln_gain
            elif name == "W1" and self.output_init == "zero":
                value = torch.zeros_like(value)
            init.copy_(param, value.to(param.dtype))

    def forward(self, like: torch.Tensor) -> dict[str, torch.Tensor]:
        """The op's params, every tensor [H, ...] (expanded views for shared ones); W_0 = 0 takes like's dtype."""
        out: dict[str, torch.Tensor] = {}
        for name in self.names:
            param = getattr(self, _key(name))
            value = F.softplus(param) if name == "feature_coeffs" else param
            out[name] = value.expand(self.num_heads, *value.shape[1:])
        for name, shape in self._zero.items():
            out[name] = like.new_zeros(()).expand(shape)
        return out

    def extra_repr(self) -> str:
        zero = f", zero={sorted(self._zero)}" if self._zero else ""
        return f"mode={self.mode}, heads={self.num_heads}, head_dim={self.head_dim}{zero}"


def _key(name: str) -> str:
    """Parameter names cannot hold dots ("init_values.W2" -> "init_values__W2")."""
    return name.replace(".", "__")
