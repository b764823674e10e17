"""Test setup: never touch the network or the user's HF cache; one CPU thread (tiny tensors, shared machine)."""

import os
import tempfile

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# One fixed directory (not a new one per run): nothing is ever downloaded into it, it only keeps HF's cache
# writes away from the user's ~/.cache.
os.environ.setdefault("HF_HOME", os.path.join(tempfile.gettempdir(), "atlas-model-tests-hf-home"))


@pytest.fixture(autouse=True, scope="module")
def _single_thread():
    """Tiny models run fastest on one thread, and far faster than on two when other jobs share the CPUs."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def make_model():
    """make_model(preset, dtype=float32, seed=0, **overrides) -> a tiny AtlasForCausalLM in eval mode."""
    from atlas_model import AtlasConfig, AtlasForCausalLM

    def make(preset: str, dtype: torch.dtype = torch.float32, seed: int = 0, **overrides):
        torch.manual_seed(seed)
        return AtlasForCausalLM(AtlasConfig.from_preset(preset, "tiny", **overrides)).to(dtype).eval()

    return make


def random_ids(vocab_size: int, batch: int, length: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, vocab_size, (batch, length), generator=torch.Generator().manual_seed(seed))


@pytest.fixture
def make_ids():
    """make_ids(vocab_size, batch, length, seed=1) -> deterministic random token ids [batch, length]."""
    return random_ids
