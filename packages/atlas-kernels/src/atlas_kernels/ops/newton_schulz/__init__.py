"""Batched Newton-Schulz orthogonalisation (the inner optimizer of Atlas, Muon-style)."""

from atlas_kernels.ops.newton_schulz.naive import newton_schulz

__all__ = ["newton_schulz"]
