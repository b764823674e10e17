"""Ops of atlas-kernels, one folder each: naive reference, chunkwise PyTorch, Triton."""
