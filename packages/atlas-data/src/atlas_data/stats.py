"""Statistics of a prepared corpus that serve as baselines for what a language model has learned."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from atlas_data.loader import SplitStream
from atlas_data.manifest import load_manifest
from atlas_data.splits import TRAIN, VALIDATION

_BLOCK = 1 << 22


def _counts(stream: SplitStream, vocab_size: int) -> np.ndarray:
    counts = np.zeros(vocab_size, dtype=np.int64)
    for start in range(0, stream.n_tokens, _BLOCK):
        block = stream.read(start, min(_BLOCK, stream.n_tokens - start))
        counts += np.bincount(block.astype(np.int64), minlength=vocab_size)[:vocab_size]
    return counts


def unigram_cross_entropy(data_dir: str | Path, *, train: str = TRAIN, evaluate: str = VALIDATION) -> float:
    """Cross-entropy in nats per token of `evaluate`'s tokens under the unigram distribution of `train` (add-one
    smoothed over the vocabulary): the loss of a model that ignores its context. A language model whose validation
    loss is not below it has learned nothing beyond token frequencies."""
    manifest = load_manifest(data_dir, verify=False)
    vocab = int(manifest.tokenizer.vocab_size)
    train_counts = _counts(SplitStream(manifest, train), vocab) + 1
    eval_counts = _counts(SplitStream(manifest, evaluate), vocab)
    if eval_counts.sum() == 0:
        raise ValueError(f"{manifest.where}: split {evaluate!r} has no tokens")
    log_p = np.log(train_counts) - np.log(train_counts.sum())
    return float(-(eval_counts * log_p).sum() / eval_counts.sum())
