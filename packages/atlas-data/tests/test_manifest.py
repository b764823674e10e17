"""load_manifest(): every integrity failure is caught and names the file at fault."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from atlas_data import (
    MANIFEST_FILE,
    ManifestError,
    MissingDataFileError,
    ShardChecksumError,
    TokenizerConfig,
    TokenizerMismatchError,
    check_tokenizer,
    load_manifest,
)
from atlas_data.tokenizer import build_tokenizer


def test_clean_dataset_verifies(prepared_dir: Path) -> None:
    manifest = load_manifest(prepared_dir, verify=True)
    assert manifest.root == prepared_dir and len(manifest.splits["train"].shards) > 1


def test_flipped_byte_names_the_shard(prepared_copy: Path) -> None:
    shard = load_manifest(prepared_copy).splits["train"].shards[1].file
    raw = bytearray((prepared_copy / shard).read_bytes())
    raw[len(raw) // 2] ^= 0x01
    (prepared_copy / shard).write_bytes(raw)
    load_manifest(prepared_copy, verify=False)  # same size: only the checksum can tell
    with pytest.raises(ShardChecksumError, match=re.escape(str(prepared_copy / shard)) + " is corrupt"):
        load_manifest(prepared_copy, verify=True)


def test_truncated_or_missing_shard_is_named(prepared_copy: Path) -> None:
    shard = load_manifest(prepared_copy).splits["validation"].shards[0].file
    (prepared_copy / shard).write_bytes((prepared_copy / shard).read_bytes()[:-2])
    with pytest.raises(ShardChecksumError, match=re.escape(shard) + r" has \d+ bytes, the manifest expects"):
        load_manifest(prepared_copy, verify=False)
    (prepared_copy / shard).unlink()
    with pytest.raises(MissingDataFileError, match="data file not found: .*" + re.escape(shard)):
        load_manifest(prepared_copy, verify=False)


def test_corrupt_document_offsets_are_caught(prepared_copy: Path) -> None:
    name = load_manifest(prepared_copy).splits["train"].doc_offsets.file
    raw = bytearray((prepared_copy / name).read_bytes())
    raw[-1] ^= 0x10
    (prepared_copy / name).write_bytes(raw)
    with pytest.raises(ShardChecksumError, match=re.escape(name)):
        load_manifest(prepared_copy)


def test_tokenizer_with_another_vocab_size_is_named(prepared_copy: Path, texts: list[str], tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    build_tokenizer(TokenizerConfig(vocab_size=280, min_frequency=1), texts, other)
    shutil.copy(other / "tokenizer.json", prepared_copy / "tokenizer.json")
    expected = re.escape(str(prepared_copy / "tokenizer.json")) + " has vocab size 280, but .* vocab size 300"
    with pytest.raises(TokenizerMismatchError, match=expected):
        load_manifest(prepared_copy)


def test_tokenizer_with_same_vocab_size_but_other_content_is_named(
    prepared_copy: Path, texts: list[str], tmp_path: Path
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    build_tokenizer(TokenizerConfig(vocab_size=300, min_frequency=1), texts[::-1][:20], other)
    manifest = load_manifest(prepared_copy)
    with pytest.raises(TokenizerMismatchError, match=re.escape(str(other / "tokenizer.json")) + " has sha256"):
        check_tokenizer(manifest, other / "tokenizer.json")
    (prepared_copy / "tokenizer.json").unlink()
    with pytest.raises(MissingDataFileError, match="tokenizer file not found: .*tokenizer.json"):
        load_manifest(prepared_copy, verify=False)


def test_missing_or_foreign_manifest(prepared_copy: Path, tmp_path: Path) -> None:
    with pytest.raises(MissingDataFileError, match=re.escape(str(tmp_path / "nothing" / MANIFEST_FILE))):
        load_manifest(tmp_path / "nothing")
    data = json.loads((prepared_copy / MANIFEST_FILE).read_text())
    data["format_version"] = 99
    (prepared_copy / MANIFEST_FILE).write_text(json.dumps(data))
    with pytest.raises(ManifestError, match="version 99 is not"):
        load_manifest(prepared_copy)
    (prepared_copy / MANIFEST_FILE).write_text("{not json")
    with pytest.raises(ManifestError, match="not valid JSON"):
        load_manifest(prepared_copy)
