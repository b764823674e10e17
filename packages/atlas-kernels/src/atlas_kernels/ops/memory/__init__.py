"""The unified memory op: naive oracle, chunkwise PyTorch op, decoding step."""

from atlas_kernels.ops.memory.chunk import memory_chunk_torch
from atlas_kernels.ops.memory.naive import memory_naive, memory_naive_chunked
from atlas_kernels.ops.memory.params import init_memory_params, initial_state
from atlas_kernels.ops.memory.read import memory_read
from atlas_kernels.ops.memory.state import MemoryState

__all__ = [
    "MemoryState",
    "init_memory_params",
    "initial_state",
    "memory_chunk_torch",
    "memory_naive",
    "memory_naive_chunked",
    "memory_read",
]
