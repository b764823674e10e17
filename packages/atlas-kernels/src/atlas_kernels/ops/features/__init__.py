"""Feature maps phi applied to l2-normalised keys and queries before the memory."""

from atlas_kernels.ops.features.poly import (
    exp_taylor_coeffs,
    poly_feature_dim,
    poly_features,
    poly_init_coeffs,
    poly_kernel,
)

__all__ = ["exp_taylor_coeffs", "poly_feature_dim", "poly_features", "poly_init_coeffs", "poly_kernel"]
