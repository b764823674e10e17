"""Batched Newton-Schulz orthogonalisation (the inner optimizer of Atlas, Muon-style).

`newton_schulz` is the torch reference; `newton_schulz_auto` runs the Triton kernel (`triton.py`, imported lazily)
on CUDA tensors it supports and the reference elsewhere (the torch chunk op's Muon path); `newton_schulz_gram`
computes the same map by iterating on the r x r Gram matrix (`gram.py`, MemoryConfig.ns_form = "gram").
"""

from atlas_kernels.ops.newton_schulz.auto import newton_schulz_auto
from atlas_kernels.ops.newton_schulz.gram import newton_schulz_gram
from atlas_kernels.ops.newton_schulz.naive import newton_schulz

__all__ = ["newton_schulz", "newton_schulz_auto", "newton_schulz_gram"]
