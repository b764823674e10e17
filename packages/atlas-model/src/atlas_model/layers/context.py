"""`StepContext`: what every token mixer needs to know about the tokens of one forward call."""

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class StepContext:
    """Positions and padding of the T tokens of one forward call.

    Attributes:
        start: absolute position of the first token (tokens already held by the cache).
        length: T.
        valid: [B, T] bool, False at padding; None when no token is padding (the fast path).
    """

    start: int
    length: int
    valid: torch.Tensor | None = None

    def positions(self, device: torch.device) -> torch.Tensor:
        """Absolute positions [T] of the tokens."""
        return torch.arange(self.start, self.start + self.length, device=device)

    def slice(self, a: int, b: int) -> "StepContext":
        """The context of tokens [a, b) of this call."""
        valid = None if self.valid is None else self.valid[:, a:b]
        return StepContext(self.start + a, b - a, valid)
