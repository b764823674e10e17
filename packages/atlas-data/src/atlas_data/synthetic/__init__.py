"""Synthetic token-level tasks and the learnability streams of the ATLAS evaluation (paper sections 6.4-6.5).

Every generator is deterministic given its seed (a `numpy.random.Generator`), has its own vocabulary, and returns
token-id arrays in one format, `TokenDataset`:

    inputs  int64 [N, T]   the tokens the model reads
    targets int64 [N, T]   targets[n, t] is what the model should output at position t, after reading
                           inputs[n, :t + 1]; IGNORE_INDEX (-100) where nothing is scored or trained

So a causal LM is scored directly on `logits[:, t]` vs `targets[:, t]` (no further shift).

    from atlas_data.synthetic import MQARConfig, generate_mqar
    data = generate_mqar(MQARConfig(vocab_size=256, seq_len=64, num_kv_pairs=8), num_examples=1000, seed=0)

Modules (imported lazily, numpy only):
    mqar          multi-query associative recall (Zoology / DeltaNet protocol)
    mad           the six MAD tasks of Poli et al. 2024 (mad-lab), their settings and difficulty grids
    learnability  the five (i_j, o_j) streams of the paper's learnability study (section 6.4)
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

IGNORE_INDEX = -100


@dataclass(frozen=True)
class TokenDataset:
    """A generated token task: `inputs`/`targets` int64 [N, T] (module docstring), its vocabulary and settings.

    Attributes:
        inputs, targets: int64 arrays of the same shape [N, T].
        vocab_size: every token id (inputs and scored targets) lies in [0, vocab_size).
        name: the task ("mqar", "in_context_recall", ...).
        params: the generator settings (JSON-serialisable), for results files.
    """

    inputs: np.ndarray
    targets: np.ndarray
    vocab_size: int
    name: str
    params: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.inputs.ndim != 2 or self.inputs.shape != self.targets.shape:
            raise ValueError(
                f"{self.name}: inputs and targets must be [N, T] arrays of one shape, got "
                f"{self.inputs.shape} and {self.targets.shape}"
            )

    def __len__(self) -> int:
        return int(self.inputs.shape[0])

    @property
    def seq_len(self) -> int:
        return int(self.inputs.shape[1])

    @property
    def answer_mask(self) -> np.ndarray:
        """bool [N, T]: the scored positions."""
        return self.targets != IGNORE_INDEX

    @property
    def num_answers(self) -> int:
        return int(self.answer_mask.sum())

    def majority_accuracy(self) -> float:
        """Micro accuracy of answering the most frequent scored target everywhere: what a model that ignores its
        input scores (a learning gate's floor). Raises ValueError when nothing is scored."""
        scored = self.targets[self.answer_mask]
        if scored.size == 0:
            raise ValueError(f"{self.name}: no scored position")
        return float(np.bincount(scored).max() / scored.size)

    def subset(self, index: np.ndarray | slice) -> TokenDataset:
        return TokenDataset(self.inputs[index], self.targets[index], self.vocab_size, self.name, self.params)

    def validate(self) -> None:
        """Raise ValueError when a token or scored target lies outside [0, vocab_size)."""
        if self.inputs.size and (self.inputs.min() < 0 or self.inputs.max() >= self.vocab_size):
            raise ValueError(f"{self.name}: input token outside [0, {self.vocab_size})")
        scored = self.targets[self.answer_mask]
        if scored.size and (scored.min() < 0 or scored.max() >= self.vocab_size):
            raise ValueError(f"{self.name}: target token outside [0, {self.vocab_size})")


def as_rng(seed: int | np.random.Generator | None) -> np.random.Generator:
    """A numpy Generator from a seed (or the Generator itself)."""
    if isinstance(seed, np.random.Generator):
        return seed
    return np.random.default_rng(seed)


_LAZY = {
    "MQARConfig": "mqar",
    "generate_mqar": "mqar",
    "MAD_TASKS": "mad",
    "MADSetting": "mad",
    "mad_settings": "mad",
    "generate_mad": "mad",
    "mad_instance": "mad",
    "memorization_kv_map": "mad",
    "LEARNABILITY_SETTINGS": "learnability",
    "LearnabilityConfig": "learnability",
    "generate_stream": "learnability",
    "setting_name": "learnability",
    "mad_grid": "mad",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'atlas_data.synthetic' has no attribute {name!r}")
    return getattr(importlib.import_module(f"atlas_data.synthetic.{module}"), name)


__all__ = ["IGNORE_INDEX", "TokenDataset", "as_rng", *_LAZY]
