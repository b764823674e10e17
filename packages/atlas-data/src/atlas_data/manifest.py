"""manifest.json: the single record of a prepared dataset, written last and read first.

A directory counts as prepared only when manifest.json exists; every other file is written
before it, each atomically, so a crash at any point leaves either the previous complete dataset or
no manifest at all. Nothing in the manifest depends on time, host or worker count: preparing the
same config twice gives a byte-identical manifest.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from atlas_data._io import atomic_write_bytes, sha256_file
from atlas_data.errors import (
    ManifestError,
    MissingDataFileError,
    ShardChecksumError,
    TokenizerMismatchError,
)
from atlas_data.shards import SplitInfo
from atlas_data.tokenizer import TokenizerInfo, read_tokenizer_file

MANIFEST_FILE = "manifest.json"
FORMAT = "atlas-data/token-shards"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class Manifest:
    """A prepared dataset. `root` is the directory it was loaded from (not serialized)."""

    config: dict[str, Any]
    tokenizer: TokenizerInfo
    dtype: str
    splits: dict[str, SplitInfo]
    versions: dict[str, str]
    format_version: int = FORMAT_VERSION
    root: Path | None = field(default=None, compare=False)

    @property
    def np_dtype(self) -> np.dtype:
        return np.dtype(self.dtype).newbyteorder("<")

    def split(self, name: str) -> SplitInfo:
        if name not in self.splits:
            raise ValueError(f"no split {name!r} in {self.where}; splits: {', '.join(self.splits)}")
        return self.splits[name]

    def path(self, file: str) -> Path:
        if self.root is None:
            raise ValueError("manifest has no root directory; load it with load_manifest(dir)")
        return self.root / file

    @property
    def where(self) -> str:
        return str(self.root / MANIFEST_FILE) if self.root else "manifest"

    def files(self) -> list[str]:
        """Every file the manifest owns, relative to `root`, manifest.json excluded."""
        out = list(self.tokenizer.files)
        for info in self.splits.values():
            out.append(info.doc_offsets.file)
            out.extend(s.file for s in info.shards)
        return out

    def doc_offsets(self, split: str) -> np.ndarray:
        """uint64 [n_documents + 1]: start of each document in the split stream, then its length."""
        return np.load(self.path(self.split(split).doc_offsets.file), allow_pickle=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "format_version": self.format_version,
            "versions": self.versions,
            "config": self.config,
            "tokenizer": self.tokenizer.to_dict(),
            "dtype": self.dtype,
            "splits": {name: info.to_dict() for name, info in self.splits.items()},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], root: Path | None = None) -> Manifest:
        where = str(root / MANIFEST_FILE) if root else "manifest"
        if data.get("format") != FORMAT or data.get("format_version") != FORMAT_VERSION:
            raise ManifestError(
                f"{where}: format {data.get('format')!r} version {data.get('format_version')!r} is not "
                f"{FORMAT!r} version {FORMAT_VERSION}; prepare the data again"
            )
        try:
            manifest = cls(
                config=data["config"],
                tokenizer=TokenizerInfo.from_dict(data["tokenizer"]),
                dtype=data["dtype"],
                splits={name: SplitInfo.from_dict(s) for name, s in data["splits"].items()},
                versions=data["versions"],
                root=root,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ManifestError(f"{where}: malformed manifest ({exc!r})") from exc
        for name, info in manifest.splits.items():
            if sum(s.n_tokens for s in info.shards) != info.n_tokens:
                raise ManifestError(f"{where}: split {name!r} shard lengths do not add up to n_tokens")
        return manifest


def write_manifest(manifest: Manifest, out_dir: Path) -> Path:
    """Write manifest.json atomically; call it after every other file is in place."""
    path = Path(out_dir) / MANIFEST_FILE
    atomic_write_bytes(path, (json.dumps(manifest.to_dict(), indent=2) + "\n").encode())
    return path


def load_manifest(data_dir: str | Path, verify: bool = True) -> Manifest:
    """Read manifest.json and check the files it lists.

    Always checks that every file exists and every shard has the size its dtype and length imply;
    with `verify`, also every sha256 and the tokenizer's vocab size. Errors name the file at fault:
    `MissingDataFileError`, `ShardChecksumError`, `TokenizerMismatchError`, `ManifestError`.
    """
    root = Path(data_dir)
    path = root / MANIFEST_FILE
    if not path.is_file():
        raise MissingDataFileError(f"{path} not found: {root} was never prepared, or preparation did not finish")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ManifestError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise ManifestError(f"{path}: expected a JSON object")
    manifest = Manifest.from_dict(data, root)
    check_tokenizer(manifest, verify=verify)
    for info in manifest.splits.values():
        _check_file(manifest.path(info.doc_offsets.file), info.doc_offsets.sha256, None, verify)
        for shard in info.shards:
            _check_file(manifest.path(shard.file), shard.sha256, shard.n_tokens * manifest.np_dtype.itemsize, verify)
    return manifest


def check_tokenizer(manifest: Manifest, tokenizer_file: str | Path | None = None, verify: bool = True) -> None:
    """Check a tokenizer.json (default: the manifest's own) against the manifest's vocab size and sha256."""
    path = Path(tokenizer_file) if tokenizer_file is not None else manifest.path(manifest.tokenizer.file)
    if not path.is_file():
        raise MissingDataFileError(f"tokenizer file not found: {path} (listed in {manifest.where})")
    if not verify:
        return
    vocab_size, _ = read_tokenizer_file(path)
    if vocab_size != manifest.tokenizer.vocab_size:
        raise TokenizerMismatchError(
            f"tokenizer {path} has vocab size {vocab_size}, but {manifest.where} was tokenized with "
            f"vocab size {manifest.tokenizer.vocab_size}"
        )
    digest = sha256_file(path)
    if digest != manifest.tokenizer.sha256:
        raise TokenizerMismatchError(
            f"tokenizer {path} has sha256 {digest[:16]}..., but {manifest.where} expects "
            f"{manifest.tokenizer.sha256[:16]}...: the shards were made with a different tokenizer"
        )


def _check_file(path: Path, sha256: str, size: int | None, verify: bool) -> None:
    if not path.is_file():
        raise MissingDataFileError(f"data file not found: {path}")
    actual = path.stat().st_size
    if size is not None and actual != size:
        raise ShardChecksumError(f"{path} has {actual} bytes, the manifest expects {size}")
    if verify:
        digest = sha256_file(path)
        if digest != sha256:
            raise ShardChecksumError(
                f"{path} is corrupt: sha256 {digest[:16]}... does not match the manifest's {sha256[:16]}..."
            )
