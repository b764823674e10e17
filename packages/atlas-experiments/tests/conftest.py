"""Fixtures for the CLI tests: a small prepared dataset and a fast training config."""

from __future__ import annotations

import copy
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
    """A fast TrainConfig mapping: tiny Transformer++ on the CPU in fp32, seq 32, 2 micro-batches of 4 per step
    (the golden harness's base run, `golden.BASE`, on the data at `data`)."""
    base = copy.deepcopy(golden.BASE)
    base["data"] = {**base["data"], "path": str(data)}
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
