"""atlas-kernels test setup: the Triton interpreter on machines without CUDA, and NaN-poisoned torch.empty.

TRITON_INTERPRET must be set before any module that defines @triton.jit functions is imported (the decorator
reads it); the Triton modules of atlas_kernels are imported lazily (only by the Triton tests and the "triton"
backend), so setting it here, at conftest import, is early enough.
"""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


def _poisoned(factory):
    def wrapper(*args, **kwargs):
        out = factory(*args, **kwargs)
        if out.is_floating_point() or out.is_complex():
            out.fill_(float("nan"))
        return out

    return wrapper


@pytest.fixture
def nan_empty(monkeypatch):
    """Fill every torch.empty / torch.empty_like / Tensor.new_empty result with NaN (flash-linear-attention style):
    an output element a kernel forgets to write then shows up as NaN instead of as stale memory."""
    monkeypatch.setattr(torch, "empty", _poisoned(torch.empty))
    monkeypatch.setattr(torch, "empty_like", _poisoned(torch.empty_like))
    monkeypatch.setattr(torch.Tensor, "new_empty", _poisoned(torch.Tensor.new_empty))
    yield
