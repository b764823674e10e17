"""Building blocks of the models: token mixers (memory, attention, hybrids), convolution, gates, MLP."""

from atlas_model.layers.attention import Attention, KVWindow
from atlas_model.layers.context import StepContext
from atlas_model.layers.conv import ShortConvolution
from atlas_model.layers.gates import LowRankGates
from atlas_model.layers.hybrid import MACMixer, MAGMixer
from atlas_model.layers.memory import MemoryLayer
from atlas_model.layers.memory_params import MemoryParameters
from atlas_model.layers.mlp import SwiGLU

__all__ = [
    "Attention",
    "KVWindow",
    "LowRankGates",
    "MACMixer",
    "MAGMixer",
    "MemoryLayer",
    "MemoryParameters",
    "ShortConvolution",
    "StepContext",
    "SwiGLU",
]
