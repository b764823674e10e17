"""`devices.resolve_device`: the one rule `atlas train` and every `atlas eval` command read their device by."""

from __future__ import annotations

import pytest
import torch

from atlas_experiments.devices import resolve_device
from atlas_experiments.train.distributed import init_distributed


@pytest.fixture
def no_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.mark.parametrize("name", [None, "", "auto"])
def test_auto_is_the_cpu_without_cuda(no_cuda, name):
    assert resolve_device(name) == torch.device("cpu")
    assert resolve_device(name, index=1) == torch.device("cpu")


def test_auto_is_cuda_when_available(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("auto") == torch.device("cuda")
    assert resolve_device("auto", index=1) == torch.device("cuda", 1)
    assert resolve_device("cuda:0", index=1) == torch.device("cuda", 0)  # the name's index wins


def test_names_pass_through(no_cuda):
    assert resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(RuntimeError):
        resolve_device("no-such-device")


def test_cuda_without_cuda_names_the_option(no_cuda):
    with pytest.raises(ValueError, match=r"^--device cuda:1: CUDA is not available on this machine$"):
        resolve_device("cuda:1")
    with pytest.raises(ValueError, match=r"^train\.device: 'cuda' requested but no CUDA device is available$"):
        init_distributed("cuda")
    assert init_distributed("auto").device == torch.device("cpu")
