"""Corpus baselines: the unigram cross-entropy of a prepared dataset, checked against a direct count."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from atlas_data.loader import SplitStream
from atlas_data.manifest import load_manifest
from atlas_data.stats import unigram_cross_entropy


def test_unigram_cross_entropy_matches_a_direct_count(prepared_dir: Path):
    manifest = load_manifest(prepared_dir)
    vocab = manifest.tokenizer.vocab_size
    train = SplitStream(manifest, "train")
    val = SplitStream(manifest, "validation")
    counts = np.bincount(train.read(0, train.n_tokens).astype(np.int64), minlength=vocab) + 1
    p = counts / counts.sum()
    tokens = val.read(0, val.n_tokens).astype(np.int64)
    expected = -np.mean(np.log(p[tokens]))
    got = unigram_cross_entropy(prepared_dir)
    assert got == pytest.approx(expected, rel=1e-12)
    assert 0 < got < math.log(vocab)  # token frequencies carry information: below the uniform model


def test_unigram_cross_entropy_names_an_unknown_split(prepared_dir: Path):
    with pytest.raises(ValueError, match="no split 'test'"):
        unigram_cross_entropy(prepared_dir, evaluate="test")
