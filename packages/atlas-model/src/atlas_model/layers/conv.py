"""Causal depthwise short convolution (the width-4 conv after the q, k, v projections)."""

import math

import torch
import torch.nn.functional as F
from torch import nn
from transformers import initialization as init


class ShortConvolution(nn.Module):
    """y_t = SiLU(sum_{j<W} w_j * x_{t-j}) per channel, causal; decoding carries the last W - 1 inputs.

    The weight is a plain [C, W] parameter (not an nn.Conv1d) so that the generic linear init of
    `PreTrainedModel` does not shrink it to N(0, 0.02): it keeps PyTorch's Conv1d init.
    """

    def __init__(self, channels: int, width: int) -> None:
        super().__init__()
        self.channels, self.width = channels, width
        self.weight = nn.Parameter(torch.empty(channels, width))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """PyTorch's Conv1d default (Kaiming uniform, fan_in = width); skipped for weights loaded from a checkpoint."""
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))

    def forward(self, x: torch.Tensor, state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """x [B, T, C], state [B, W - 1, C] (the inputs before x; None = zeros) -> (y [B, T, C], new state)."""
        B, T, C = x.shape
        if state is None:
            state = x.new_zeros(B, self.width - 1, C)
        padded = torch.cat([state.to(x.dtype), x], dim=1)  # [B, W - 1 + T, C]
        y = F.conv1d(padded.transpose(1, 2), self.weight.unsqueeze(1), groups=C)  # [B, C, T]
        return F.silu(y.transpose(1, 2)), padded[:, padded.shape[1] - (self.width - 1) :]
