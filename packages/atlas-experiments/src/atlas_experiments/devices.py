"""Which torch device a command runs on: `atlas train` (`train.device`), the LM evaluations and the synthetic
tasks (`--device`) all resolve their setting here, so "auto" means the same everywhere."""

from __future__ import annotations

import torch


def resolve_device(name: str | None, *, index: int | None = None, unavailable: str | None = None) -> torch.device:
    """`auto` (or None, ""): CUDA when available, else the CPU; anything else as torch reads it. `index` picks
    the CUDA device when the name gives none (a torchrun rank's local GPU). Asking for CUDA on a machine without
    it raises ValueError with `unavailable` (default: the `--device` option's message)."""
    if name in (None, "", "auto"):
        name = "cuda" if torch.cuda.is_available() else "cpu"
    elif torch.device(name).type == "cuda" and not torch.cuda.is_available():
        raise ValueError(unavailable or f"--device {name}: CUDA is not available on this machine")
    device = torch.device(name)
    if device.type == "cuda" and device.index is None and index is not None:
        device = torch.device("cuda", index)
    return device
