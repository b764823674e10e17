"""Fixtures for the CLI tests: a small prepared dataset and a fast training config."""

from __future__ import annotations

from pathlib import Path

import pytest

from atlas_experiments.train import golden


@pytest.fixture(scope="session")
def prepared_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """160 pseudo-sentence documents, BPE vocab 300, prepared once per session (read-only for tests); the same
    recipe as the golden runs (`atlas_experiments.train.golden.prepare_data`)."""
    return golden.prepare_data(tmp_path_factory.mktemp("train-data"))


@pytest.fixture
def train_dict():
    """`make(data_dir, **overrides)`: a fast TrainConfig mapping."""
    return make_train_dict


def make_train_dict(data: Path, **over) -> dict:
    """A fast TrainConfig mapping: tiny Transformer++ on the CPU in fp32, seq 32, 2 micro-batches of 4 per step."""
    base = {
        "model": {"preset": "transformer_pp", "size": "tiny"},
        "data": {"path": str(data), "seq_len": 32},
        "global_batch_tokens": 256,
        "micro_batch": 4,
        "steps": 8,
        "seed": 3,
        "optim": {"lr": 3e-3, "warmup_steps": 2},
        # "auto" would mean GPU + bf16 on a CUDA host, where the bit-exact and golden-loss comparisons do not hold
        "device": "cpu",
        "precision": "fp32",
        "tracking": {"enabled": False},
    }
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            base[key] = {**base[key], **value}
        else:
            base[key] = value
    return base


@pytest.fixture
def one_thread():
    """torch on one intra-op thread for the test: on 2 shared cores a second thread mostly waits on the first
    (several times slower), and one thread also fixes the reduction order."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
