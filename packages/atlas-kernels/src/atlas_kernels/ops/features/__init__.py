"""Feature maps phi applied to l2-normalised keys and queries before the memory.

`poly_features` is the torch reference; `poly_features_auto` runs the fused Triton kernel (`triton.py`, imported
lazily) on CUDA tensors it supports and the reference elsewhere (the torch chunk op's feature path).
"""

from atlas_kernels.ops.features.auto import poly_features_auto
from atlas_kernels.ops.features.poly import (
    exp_taylor_coeffs,
    poly_feature_dim,
    poly_features,
    poly_init_coeffs,
    poly_kernel,
)

__all__ = [
    "exp_taylor_coeffs",
    "poly_feature_dim",
    "poly_features",
    "poly_features_auto",
    "poly_init_coeffs",
    "poly_kernel",
]
