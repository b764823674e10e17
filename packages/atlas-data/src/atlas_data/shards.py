"""Tokenize documents in parallel and pack them into flat binary token shards.

Each split is one stream of tokens -- every document's tokens followed by EOS, in source order --
cut into shard files of `shard_tokens` tokens (the last one shorter). A shard is a headerless
little-endian array (``uint16`` when every id fits, else ``uint32``) meant for `np.memmap`; the
manifest holds its dtype, length and sha256. Document boundaries go to ``<split>_doc_offsets.npy``:
``uint64[n_documents + 1]`` start offsets into the split stream, the last entry being its length.

Parallelism: batches of documents are encoded by `workers` spawned processes, each loading the
tokenizer once, and results are consumed strictly in submission order with a bounded number in
flight, so the output is byte-identical for any worker count and memory stays flat on a streaming
source.
"""

from __future__ import annotations

import io
import logging
import multiprocessing
import os
from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from atlas_data._io import atomic_write_bytes, sha256_bytes
from atlas_data._schema import MappingConfig, bounded, to_mapping
from atlas_data.sources import Document
from atlas_data.splits import SPLITS, SplitAssigner

log = logging.getLogger(__name__)

# A task is at most this many documents or characters: big enough to amortise inter-process
# pickling, small enough that a slow batch does not stall the ordered consumer for long.
_TASK_DOCS = 64
_TASK_CHARS = 1 << 19


@dataclass(frozen=True)
class ShardConfig(MappingConfig):
    """Shard size. 2**26 tokens is 128 MiB of uint16 per file."""

    WHERE = "data.shards"

    shard_tokens: int = bounded(1 << 26, min=1)


@dataclass(frozen=True)
class FileInfo:
    """A file of the dataset, relative to the data directory."""

    file: str
    sha256: str


@dataclass(frozen=True)
class ShardInfo:
    file: str
    n_tokens: int
    sha256: str


@dataclass(frozen=True)
class SplitInfo:
    """One split: its token stream's shards and the offsets of its documents."""

    n_tokens: int
    n_documents: int
    doc_offsets: FileInfo
    shards: tuple[ShardInfo, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "n_tokens": self.n_tokens,
            "n_documents": self.n_documents,
            "doc_offsets": to_mapping(self.doc_offsets),
            "shards": [to_mapping(s) for s in self.shards],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SplitInfo:
        return cls(
            n_tokens=int(data["n_tokens"]),
            n_documents=int(data["n_documents"]),
            doc_offsets=FileInfo(**data["doc_offsets"]),
            shards=tuple(ShardInfo(**s) for s in data["shards"]),
        )


def dtype_for_vocab(vocab_size: int) -> np.dtype:
    """uint16 while every id (< vocab_size) fits in 16 bits, else uint32; always little-endian."""
    return np.dtype("<u2") if vocab_size <= 1 << 16 else np.dtype("<u4")


def shard_name(split: str, index: int) -> str:
    return f"{split}_{index:06d}.bin"


def offsets_name(split: str) -> str:
    return f"{split}_doc_offsets.npy"


class SplitWriter:
    """Appends documents to one split's stream, writing each shard as soon as it is full."""

    def __init__(self, out_dir: Path, split: str, dtype: np.dtype, shard_tokens: int) -> None:
        self.out_dir = out_dir
        self.split = split
        self._buf = np.empty(shard_tokens, dtype=dtype)
        self._fill = 0
        self._shards: list[ShardInfo] = []
        self._doc_ends: list[int] = []
        self._n_tokens = 0

    def add(self, tokens: np.ndarray) -> None:
        """Append one document (its tokens, EOS included); documents may span shards."""
        pos, cap = 0, len(self._buf)
        while pos < len(tokens):
            take = min(len(tokens) - pos, cap - self._fill)
            self._buf[self._fill : self._fill + take] = tokens[pos : pos + take]
            self._fill += take
            pos += take
            if self._fill == cap:
                self._flush()
        self._n_tokens += len(tokens)
        self._doc_ends.append(self._n_tokens)

    def _flush(self) -> None:
        name = shard_name(self.split, len(self._shards))
        data = memoryview(self._buf[: self._fill]).cast("B")
        atomic_write_bytes(self.out_dir / name, data)
        self._shards.append(ShardInfo(file=name, n_tokens=self._fill, sha256=sha256_bytes(data)))
        self._fill = 0

    def close(self) -> SplitInfo:
        """Write the partial last shard and the document offsets."""
        if self._fill:
            self._flush()
        offsets = np.zeros(len(self._doc_ends) + 1, dtype="<u8")
        offsets[1:] = self._doc_ends
        blob = io.BytesIO()
        np.save(blob, offsets, allow_pickle=False)
        name = offsets_name(self.split)
        atomic_write_bytes(self.out_dir / name, blob.getbuffer())
        return SplitInfo(
            n_tokens=self._n_tokens,
            n_documents=len(self._doc_ends),
            doc_offsets=FileInfo(file=name, sha256=sha256_bytes(blob.getbuffer())),
            shards=tuple(self._shards),
        )


class _Encoder:
    """Texts -> (tokens with EOS after each document, per-document lengths)."""

    def __init__(self, tokenizer_file: str, eos_id: int, dtype: str) -> None:
        from tokenizers import Tokenizer

        self.tok = Tokenizer.from_file(tokenizer_file)
        # Some hub tokenizer.json files enable truncation or padding, which would silently cut documents.
        self.tok.no_truncation()
        self.tok.no_padding()
        self.eos_id = eos_id
        self.dtype = np.dtype(dtype)

    def __call__(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Returns tokens [sum(lengths)] of `dtype` and lengths [len(texts)] (int64)."""
        ids = [e.ids for e in self.tok.encode_batch(texts, add_special_tokens=False)]  # .ids builds a new list
        lengths = np.fromiter((len(i) + 1 for i in ids), dtype=np.int64, count=len(ids))
        out = np.empty(int(lengths.sum()), dtype=self.dtype)
        pos = 0
        for doc_ids, n in zip(ids, lengths.tolist()):
            out[pos : pos + n - 1] = doc_ids
            out[pos + n - 1] = self.eos_id
            pos += n
        return out, lengths


_worker_encoder: _Encoder | None = None


def _init_worker(tokenizer_file: str, eos_id: int, dtype: str) -> None:
    global _worker_encoder
    # Parallelism comes from processes; Rust threads inside each would oversubscribe the cores.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    _worker_encoder = _Encoder(tokenizer_file, eos_id, dtype)


def _encode_in_worker(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    assert _worker_encoder is not None
    return _worker_encoder(texts)


def _batches(documents: Iterable[Document]) -> Iterator[list[Document]]:
    batch: list[Document] = []
    chars = 0
    for doc in documents:
        batch.append(doc)
        chars += len(doc.text)
        if len(batch) >= _TASK_DOCS or chars >= _TASK_CHARS:
            yield batch
            batch, chars = [], 0
    if batch:
        yield batch


def encode_ordered(
    documents: Iterable[Document], encoder_args: tuple[str, int, str], workers: int
) -> Iterator[tuple[list[Document], np.ndarray, np.ndarray]]:
    """Yield (batch, tokens, lengths) in document order, encoding on `workers` processes.

    workers=1 encodes in this process (where ``tokenizers`` may still use its own threads).
    At most 2*workers batches are in flight, so a huge streaming source is never read ahead.
    """
    if workers == 1:
        encoder = _Encoder(*encoder_args)
        for batch in _batches(documents):
            yield batch, *encoder([d.text for d in batch])
        return
    # spawn, not fork: the parent has already run multi-threaded Rust code (BPE training), and a
    # forked child of a threaded process can deadlock; spawned workers import only numpy+tokenizers.
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(workers, initializer=_init_worker, initargs=encoder_args) as pool:
        pending: deque[tuple[list[Document], Any]] = deque()
        for batch in _batches(documents):
            pending.append((batch, pool.apply_async(_encode_in_worker, ([d.text for d in batch],))))
            if len(pending) >= 2 * workers:
                done, result = pending.popleft()
                yield done, *result.get()
        while pending:
            done, result = pending.popleft()
            yield done, *result.get()


def write_shards(
    documents: Iterable[Document],
    out_dir: Path,
    *,
    tokenizer_file: Path,
    eos_id: int,
    vocab_size: int,
    shard_tokens: int,
    validation_fraction: float,
    seed: int,
    workers: int = 1,
    max_tokens: int | None = None,
    progress: bool = True,
    total_documents: int | None = None,
) -> dict[str, SplitInfo]:
    """Tokenize `documents`, split them by document and write both splits' shards.

    Stops after the document at which the running token count (both splits, EOS included) first
    reaches `max_tokens`. Returns one `SplitInfo` per split (``train``, ``validation``).
    """
    from tqdm.auto import tqdm

    dtype = dtype_for_vocab(vocab_size)
    writers = {s: SplitWriter(out_dir, s, dtype, shard_tokens) for s in SPLITS}
    assigner: SplitAssigner[np.ndarray] = SplitAssigner(validation_fraction, seed)
    total = 0
    capped = False
    encoded = encode_ordered(documents, (str(tokenizer_file), eos_id, dtype.str), workers)
    with closing(encoded), tqdm(total=total_documents, unit="doc", desc="tokenize", disable=not progress) as bar:
        for batch, tokens, lengths in encoded:
            ends = np.cumsum(lengths).tolist()
            start = 0
            for doc, end in zip(batch, ends):
                for item, split in assigner.push(tokens[start:end], doc.group):
                    writers[split].add(item)
                total += end - start
                start = end
                bar.update(1)
                if max_tokens is not None and total >= max_tokens:
                    capped = True
                    break
            bar.set_postfix(tokens=total, refresh=False)
            if capped:
                log.info("reached max_tokens=%d after %d documents", max_tokens, sum(assigner.counts.values()) + 1)
                break
    for item, split in assigner.finish():
        writers[split].add(item)
    return {s: w.close() for s, w in writers.items()}
