"""atlas-data: corpora, tokenizers, packed token shards and loaders for the ATLAS reproduction.

    cfg = DataConfig()                                   # embedded KJV+ASV corpus, BPE 8192
    manifest = prepare(cfg, "results/data/embedded")     # idempotent; writes manifest.json last
    loader = TokenWindowLoader("results/data/embedded", "train", seq_len=256, batch_size=32, seed=0)
    x = next(iter(loader))                               # LongTensor [32, 257]

`TokenWindowLoader` is imported lazily so that tokenizer worker processes never import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from atlas_data.errors import (
    ConfigError,
    CorpusFormatError,
    DataIntegrityError,
    EmptyCorpusError,
    ManifestError,
    MissingDataFileError,
    ShardChecksumError,
    TokenizerMismatchError,
)
from atlas_data.manifest import MANIFEST_FILE, Manifest, check_tokenizer, load_manifest
from atlas_data.prepare import DataConfig, prepare
from atlas_data.shards import ShardConfig, SplitInfo, dtype_for_vocab
from atlas_data.sources import Document, SourceConfig, iter_documents
from atlas_data.splits import SPLITS, TRAIN, VALIDATION, SplitConfig
from atlas_data.tokenizer import TokenizerConfig, TokenizerInfo, load_tokenizer

if TYPE_CHECKING:
    from atlas_data.loader import TokenWindowLoader

__version__ = "0.2.0"

__all__ = [
    "MANIFEST_FILE",
    "SPLITS",
    "TRAIN",
    "VALIDATION",
    "ConfigError",
    "CorpusFormatError",
    "DataConfig",
    "DataIntegrityError",
    "Document",
    "EmptyCorpusError",
    "Manifest",
    "ManifestError",
    "MissingDataFileError",
    "ShardChecksumError",
    "ShardConfig",
    "SourceConfig",
    "SplitConfig",
    "SplitInfo",
    "TokenWindowLoader",
    "TokenizerConfig",
    "TokenizerInfo",
    "TokenizerMismatchError",
    "check_tokenizer",
    "dtype_for_vocab",
    "iter_documents",
    "load_manifest",
    "load_tokenizer",
    "prepare",
]


def __getattr__(name: str) -> Any:
    if name == "TokenWindowLoader":
        from atlas_data.loader import TokenWindowLoader

        return TokenWindowLoader
    raise AttributeError(f"module 'atlas_data' has no attribute {name!r}")
