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
    """A fast TrainConfig mapping: tiny Transformer++ on the CPU in fp32, seq 32, 2 micro-batches of 4 per step
    (the golden harness's base run, `golden.BASE`, on the data at `data`)."""
    base = golden.merge(golden.BASE, {"data": {"path": str(data)}})
    return golden.merge(base, over)


@pytest.fixture
def one_thread():
    """torch on one intra-op thread for the test (`golden.one_thread`): on 2 shared cores a second thread mostly
    waits on the first (several times slower), and one thread also fixes the reduction order."""
    with golden.one_thread():
        yield


@pytest.fixture
def claims_header() -> dict:
    """The top of a schema-2 claims file (both rules registered, nothing amended): tests add protocols, arms and
    claims."""
    return {
        "schema": 2, "registered": "2026-12-01", "rule": {"alpha": 0.05, "ci_level": 0.90, "min_seeds": 3},
        "paper": {"version": "v1", "note": "x"},
        "rule_v2": {"registered": "2026-12-03", "alpha": 0.05, "ci_level": 0.90, "exact_max_n": 12,
                    "correction": "holm", "power": {"effect": 2.0, "target": 0.8, "min_seeds": 5}},
        "amendments": [], "tuning_history": [], "not_registered": [],
    }  # fmt: skip
