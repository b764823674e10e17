"""Train/validation split by document, decided per document without knowing the corpus size.

A document goes to validation when ``blake2b(seed, group)`` read as a uniform number in [0, 1) is
below `validation_fraction`. Keying on the document's group (not its position in a shuffled list)
keeps the split streaming-friendly and stable: capping the corpus with `max_documents` keeps every
remaining document in the split it had, and equal groups (one chapter in two translations) share a
split.

With at least two documents and a non-zero fraction neither split may end up empty: the assigner
holds the latest document back, and if the stream ends with one split still empty, that last
document goes there. This only matters for tiny corpora (fraction x documents below ~3). A
corpus of one document is all training.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Generic, TypeVar

from atlas_data._schema import MappingConfig, bounded

TRAIN = "train"
VALIDATION = "validation"
SPLITS = (TRAIN, VALIDATION)

T = TypeVar("T")


@dataclass(frozen=True)
class SplitConfig(MappingConfig):
    """How documents are divided between the training and validation splits."""

    WHERE = "data.split"

    validation_fraction: float = bounded(0.01, min=0.0, max=0.5)


def hashed_split(group: str, seed: int, fraction: float) -> str:
    """The split a document of `group` draws, before the non-empty fallback."""
    digest = hashlib.blake2b(f"{seed}\x00{group}".encode(), digest_size=8).digest()
    return VALIDATION if int.from_bytes(digest, "big") / 2.0**64 < fraction else TRAIN


class SplitAssigner(Generic[T]):
    """Streams items (texts or token arrays) into splits, one item behind, so `finish` can fix an empty split.

    Feed every document with `push` in source order and commit what it returns; then commit what
    `finish` returns. Both passes over a corpus (tokenizer training, shard writing) use this class,
    so they agree on every document's split.
    """

    def __init__(self, fraction: float, seed: int) -> None:
        self.fraction = fraction
        self.seed = seed
        self.counts = dict.fromkeys(SPLITS, 0)
        self._held: tuple[T, str] | None = None

    def push(self, item: T, group: str) -> list[tuple[T, str]]:
        ready = [self._commit(*self._held)] if self._held is not None else []
        self._held = (item, hashed_split(group, self.seed, self.fraction))
        return ready

    def finish(self) -> list[tuple[T, str]]:
        if self._held is None:
            return []
        item, split = self._held
        self._held = None
        other = VALIDATION if split == TRAIN else TRAIN
        if self.counts[TRAIN] + self.counts[VALIDATION] == 0:
            split = TRAIN  # a lone document is better trained on than held out
        elif self.fraction > 0 and self.counts[other] == 0:
            split = other
        return [self._commit(item, split)]

    def _commit(self, item: T, split: str) -> tuple[T, str]:
        self.counts[split] += 1
        return item, split
