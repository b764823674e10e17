"""Text contexts of the long-context samples (S-NIAH, BABILong): a tokenizer adapter, haystacks of corpus
sentences, and filling a prompt with haystack up to a token length with inserts (needles, facts) at given depths.

Split from `atlas_data.synthetic.niah`, which re-exports every name here, so both import paths keep working.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# --------------------------------------------------------------------------------------------------------------
# tokenizer adapter
# --------------------------------------------------------------------------------------------------------------


class TextTokenizer:
    """Token counting and offsets over a `tokenizers.Tokenizer`, a HF fast tokenizer, or a tokenizer.json path.

    Special tokens (BOS/EOS) are never added: a prompt's token count is what the model is fed.
    """

    def __init__(self, tokenizer: Any) -> None:
        if isinstance(tokenizer, TextTokenizer):
            tokenizer = tokenizer.raw
        if isinstance(tokenizer, str | Path):
            from tokenizers import Tokenizer

            path = Path(tokenizer)
            tokenizer = Tokenizer.from_file(str(path / "tokenizer.json" if path.is_dir() else path))
        from tokenizers import Tokenizer

        self.raw = tokenizer
        self._is_tokenizers = isinstance(tokenizer, Tokenizer)
        if not self._is_tokenizers and not callable(tokenizer):
            raise TypeError(f"not a tokenizer: {type(tokenizer).__name__}")

    def encode(self, text: str) -> list[int]:
        if self._is_tokenizers:
            return list(self.raw.encode(text, add_special_tokens=False).ids)
        return list(self.raw(text, add_special_tokens=False)["input_ids"])

    def encode_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """Token ids and each token's character span ``[start, end)`` in `text`."""
        if self._is_tokenizers:
            enc = self.raw.encode(text, add_special_tokens=False)
            return list(enc.ids), [tuple(o) for o in enc.offsets]
        enc = self.raw(text, add_special_tokens=False, return_offsets_mapping=True)
        return list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def count_many(self, texts: Sequence[str]) -> list[int]:
        if not texts:
            return []
        if self._is_tokenizers:
            return [len(e.ids) for e in self.raw.encode_batch(list(texts), add_special_tokens=False)]
        return [len(ids) for ids in self.raw(list(texts), add_special_tokens=False)["input_ids"]]

    def decode(self, ids: Sequence[int]) -> str:
        return self.raw.decode(list(ids))


def token_index_at(offsets: Sequence[tuple[int, int]], char: int) -> int:
    """Index of the first token whose span ends after character `char` (the token holding `char`)."""
    lo, hi = 0, len(offsets)
    while lo < hi:  # offsets are sorted by end
        mid = (lo + hi) // 2
        if offsets[mid][1] > char:
            hi = mid
        else:
            lo = mid + 1
    return lo


# --------------------------------------------------------------------------------------------------------------
# haystacks
# --------------------------------------------------------------------------------------------------------------

# RULER's "repeat" haystack (the passkey filler of Mohtashami & Jaggi 2023).
REPEAT_FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\s*\n+\s*")


def split_sentences(text: str, max_words: int = 24) -> list[str]:
    """Sentences of `text` (split after . ! ? and at line breaks); longer ones cut into `max_words` pieces."""
    out: list[str] = []
    for sentence in _SENTENCE_END.split(text):
        words = sentence.split()
        for i in range(0, len(words), max_words):
            out.append(" ".join(words[i : i + max_words]))
    return [s for s in out if s]


def load_split_texts(
    data_dir: str | Path,
    split: str = "validation",
    max_documents: int | None = None,
    max_tokens: int | None = None,
) -> list[str]:
    """The documents of a prepared split (default: the held-out validation split), decoded back to text.

    Documents come in stream order; `max_documents` / `max_tokens` stop after that many documents / once the
    documents read hold that many tokens (a big validation split need not be decoded whole for a haystack).
    """
    import numpy as np
    from tokenizers import Tokenizer

    from atlas_data.loader import SplitStream
    from atlas_data.manifest import load_manifest

    manifest = load_manifest(data_dir, verify=False)
    offsets = manifest.doc_offsets(split)
    stream = SplitStream(manifest, split)
    tok = Tokenizer.from_file(str(manifest.path(manifest.tokenizer.file)))
    eos = manifest.tokenizer.eos_id
    n = len(offsets) - 1 if max_documents is None else min(len(offsets) - 1, max_documents)
    texts = []
    for i in range(n):
        if max_tokens is not None and int(offsets[i]) >= max_tokens:
            break
        ids = stream.read(int(offsets[i]), int(offsets[i + 1] - offsets[i]))
        ids = ids[ids != eos] if eos is not None else ids
        text = tok.decode(np.asarray(ids, dtype=np.int64).tolist(), skip_special_tokens=False).strip()
        if text:
            texts.append(text)
    return texts


def embedded_texts(versions: Sequence[str] = ("kjv",), max_documents: int | None = None) -> list[str]:
    """Chapters of the embedded public-domain corpus (`atlas_data.sources`, KJV/ASV), one text per chapter."""
    from atlas_data.sources import SourceConfig, iter_documents

    cfg = SourceConfig(kind="embedded", versions=tuple(versions), max_documents=max_documents)
    return [doc.text for doc in iter_documents(cfg)]


@dataclass
class Haystack:
    """Filler units (sentences) and their token counts; contexts take consecutive units, wrapping around."""

    units: list[str]
    counts: list[int]
    kind: str = "essay"

    @classmethod
    def from_texts(cls, texts: Iterable[str], tokenizer: Any, max_words: int = 24) -> Haystack:
        tok = TextTokenizer(tokenizer)
        units = [s for text in texts for s in split_sentences(text, max_words)]
        if not units:
            raise ValueError("haystack: the texts hold no sentences")
        return cls(units, tok.count_many([" " + u for u in units]), "essay")

    @classmethod
    def repeat(cls, tokenizer: Any, filler: str = REPEAT_FILLER) -> Haystack:
        units = split_sentences(filler)
        return cls(units, TextTokenizer(tokenizer).count_many([" " + u for u in units]), "repeat")

    @property
    def n_tokens(self) -> int:
        return sum(self.counts)

    def take(self, start: int, budget: int) -> tuple[list[str], list[int], bool]:
        """Consecutive units from `start` (cyclic) while their token estimate stays within `budget`.

        Returns (units, counts, wrapped): `wrapped` is True when the context had to reuse units (for an essay
        haystack shorter than the context; always for the repeat filler).
        """
        units: list[str] = []
        counts: list[int] = []
        total, i, n = 0, start % len(self.units), len(self.units)
        while total + self.counts[i] <= budget:
            units.append(self.units[i])
            counts.append(self.counts[i])
            total += self.counts[i]
            i = (i + 1) % n
            if len(units) > 64 * n + budget:  # zero-token units cannot loop forever
                break
        return units, counts, len(units) > n


def boundaries_for(counts: Sequence[int], fractions: Sequence[float]) -> list[int]:
    """For each fraction, the unit boundary (0..len(counts)) whose share of the tokens before it is closest."""
    total = sum(counts)
    cum = [0]
    for c in counts:
        cum.append(cum[-1] + c)
    out = []
    for f in fractions:
        target = f * total
        out.append(min(range(len(cum)), key=lambda k: (abs(cum[k] - target), k)))
    return out


def assemble(units: Sequence[str], inserts: Sequence[tuple[int, str]]) -> tuple[str, list[int]]:
    """Join units with spaces, putting each insert (boundary, text) before unit `boundary` (inserts at one
    boundary keep their order). Returns the text and each insert's character start, in the order given."""
    by_boundary: dict[int, list[int]] = {}
    for j, (b, _) in enumerate(inserts):
        by_boundary.setdefault(b, []).append(j)
    pieces: list[str] = []
    starts = [0] * len(inserts)
    pos = 0
    for b in range(len(units) + 1):
        for j in by_boundary.get(b, []):
            if pieces:
                pos += 1
            starts[j] = pos
            pieces.append(inserts[j][1])
            pos += len(inserts[j][1])
        if b < len(units):
            if pieces:
                pos += 1
            pieces.append(units[b])
            pos += len(units[b])
    return " ".join(pieces), starts


@dataclass
class FilledPrompt:
    prompt: str
    ids: list[int]
    offsets: list[tuple[int, int]]
    context_start: int  # character span of the context (haystack + inserts) in the prompt
    context_end: int
    insert_starts: list[int]  # characters, in the prompt
    n_units: int
    wrapped: bool


def fill_prompt(
    tokenizer: TextTokenizer,
    haystack: Haystack | None,
    render: Callable[[str], tuple[str, int]],
    inserts: Sequence[str],
    fractions: Sequence[float],
    length: int,
    reserve: int,
    start: int,
) -> FilledPrompt:
    """Fill `render(context)` with haystack units up to ``tokens + reserve <= length``.

    `render(context)` returns the prompt and the character offset of the context in it. Each insert `j` goes to
    the unit boundary closest to `fractions[j]` of the haystack tokens. `length <= 0` or no haystack: the
    context is the inserts alone.
    """

    def build(units: list[str], counts: list[int]) -> tuple[str, int, str, list[int]]:
        bounds = boundaries_for(counts, fractions) if units else [0] * len(inserts)
        context, starts = assemble(units, list(zip(bounds, inserts)))
        prompt, offset = render(context)
        return prompt, offset, context, [offset + s for s in starts]

    units: list[str] = []
    counts: list[int] = []
    wrapped = False
    if haystack is not None and length > 0:
        prompt, *_ = build([], [])
        budget = length - reserve - tokenizer.count(prompt)
        if budget < 0:
            raise ValueError(
                f"length {length}: the prompt without haystack already takes {tokenizer.count(prompt)} tokens "
                f"(+{reserve} to generate); use a longer length"
            )
        units, counts, wrapped = haystack.take(start, budget)
    for _ in range(1000):
        prompt, offset, context, starts = build(units, counts)
        ids, offsets = tokenizer.encode_offsets(prompt)
        over = len(ids) + reserve - length
        if length <= 0 or over <= 0 or not units:
            break
        removed = 0  # drop units from the end until the overflow is paid (token counts are nearly additive)
        while units and removed < over:
            units.pop()
            removed += counts.pop()
    if length > 0 and len(ids) + reserve > length:
        raise ValueError(f"length {length}: cannot fit the prompt ({len(ids)} tokens + {reserve} to generate)")
    return FilledPrompt(prompt, ids, offsets, offset, offset + len(context), starts, len(units), wrapped)


def sample_rng(seed: int, *parts: object) -> random.Random:
    """The generator of one sample: seeded by a string, identical in every process and Python version."""
    return random.Random("/".join([str(seed), *map(str, parts)]))
