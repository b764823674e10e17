"""atlas-kernels: the memory op behind every recurrent model of ATLAS (docs/memory-op.md).

Public API (layout [B, T, H, D]; see `memory_chunk` for every name and shape):
    MemoryConfig, MemoryState, memory_chunk, memory_naive, memory_naive_chunked, memory_step, memory_read,
    init_memory_params, initial_state, newton_schulz, poly_features, poly_kernel.
"""

from atlas_kernels.api import memory_chunk, memory_step
from atlas_kernels.config import MemoryConfig, MemoryConfigError
from atlas_kernels.ops.features import poly_feature_dim, poly_features, poly_init_coeffs, poly_kernel
from atlas_kernels.ops.memory import (
    MemoryState,
    init_memory_params,
    initial_state,
    memory_naive,
    memory_naive_chunked,
    memory_read,
)
from atlas_kernels.ops.newton_schulz import newton_schulz

__version__ = "0.4.0"

__all__ = [
    "MemoryConfig",
    "MemoryConfigError",
    "MemoryState",
    "init_memory_params",
    "initial_state",
    "memory_chunk",
    "memory_naive",
    "memory_naive_chunked",
    "memory_read",
    "memory_step",
    "newton_schulz",
    "poly_feature_dim",
    "poly_features",
    "poly_init_coeffs",
    "poly_kernel",
]
