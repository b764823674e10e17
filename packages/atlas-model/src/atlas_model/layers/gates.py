"""Data-dependent gates of the memory layer from low-rank projections (Miras section 5.4)."""

import math

import torch
from torch import nn
from transformers import initialization as init


class LowRankGates(nn.Module):
    """Per-head gate logits x -> r -> (gate, head), one bias per gate and head.

    The bias is a separate parameter so that the model can initialise each gate at a chosen value
    (`initial_bias`) while the projections start near zero.
    """

    def __init__(self, hidden_size: int, rank: int, num_heads: int, initial: dict[str, float]) -> None:
        """initial: gate name -> its value at initialisation in (0, 1) (the sigmoid of the bias)."""
        super().__init__()
        self.names = tuple(initial)
        self.num_heads = num_heads
        self.initial = dict(initial)
        self.down = nn.Linear(hidden_size, rank, bias=False)
        self.up = nn.Linear(rank, len(self.names) * num_heads, bias=False)
        self.bias = nn.Parameter(torch.empty(len(self.names), num_heads))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Bias = logit of each gate's initial value (the projections are initialised as linear layers)."""
        init.copy_(self.bias, self.initial_bias())

    def initial_bias(self) -> torch.Tensor:
        """[n_gates, heads]: logit of each gate's initial value."""
        logits = [math.log(p / (1.0 - p)) for p in self.initial.values()]
        return torch.tensor(logits, dtype=self.bias.dtype, device=self.bias.device)[:, None].expand_as(self.bias)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """x [B, T, d] -> {name: logits [B, T, H]}."""
        B, T, _ = x.shape
        logits = self.up(self.down(x)).view(B, T, len(self.names), self.num_heads) + self.bias
        return {name: logits[:, :, i] for i, name in enumerate(self.names)}
