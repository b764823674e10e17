"""Tokenizers: deterministic BPE trained on the training split only; pretrained ones from a local dir."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from atlas_data import (
    ConfigError,
    DataConfig,
    SplitConfig,
    TokenizerConfig,
    dtype_for_vocab,
    load_manifest,
    load_tokenizer,
    prepare,
)
from atlas_data.tokenizer import build_tokenizer


def _decoded_documents(data_dir: Path, split: str) -> list[str]:
    """Rebuild a split's documents from its shards and offsets (EOS stripped)."""
    manifest = load_manifest(data_dir)
    stream = np.concatenate(
        [np.fromfile(data_dir / s.file, dtype=manifest.np_dtype) for s in manifest.splits[split].shards]
    )
    offsets = manifest.doc_offsets(split)
    tok = load_tokenizer(data_dir)
    docs = []
    for start, end in zip(offsets[:-1], offsets[1:]):
        assert stream[end - 1] == manifest.tokenizer.eos_id  # EOS closes every document
        docs.append(tok.decode(stream[start : end - 1].tolist()))
    return docs


def test_bpe_is_deterministic(tmp_path: Path, texts: list[str]) -> None:
    cfg = TokenizerConfig(vocab_size=400, min_frequency=1)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = build_tokenizer(cfg, texts, tmp_path / "a")
    b = build_tokenizer(cfg, texts, tmp_path / "b")
    digest = hashlib.sha256((tmp_path / "a" / "tokenizer.json").read_bytes()).hexdigest()
    assert a.sha256 == b.sha256 == digest
    assert a.vocab_size == 400 and a.eos_id == 0 and a.eos_token == "<|endoftext|>"
    c = build_tokenizer(dataclasses.replace(cfg, vocab_size=401), texts, tmp_path / "b")
    assert c.sha256 != a.sha256


def test_bpe_is_deterministic_across_processes(texts: list[str]) -> None:
    # Rust hash maps are seeded per process: only a fresh interpreter shows that merges do not depend on them.
    script = (
        "import hashlib, json, sys\n"
        "from atlas_data.tokenizer import TokenizerConfig, train_bpe\n"
        "tok = train_bpe(TokenizerConfig(vocab_size=400, min_frequency=1), json.load(sys.stdin))\n"
        "print(hashlib.sha256(tok.to_str().encode()).hexdigest())\n"
    )
    digests = {
        subprocess.run(
            [sys.executable, "-c", script], input=json.dumps(texts), capture_output=True, text=True, check=True
        ).stdout
        for _ in range(2)
    }
    assert len(digests) == 1 and len(digests.pop().strip()) == 64


def test_bpe_never_sees_validation_documents(
    tmp_path: Path, write_txt: Callable[[list[str]], str], config_for: Callable[..., DataConfig]
) -> None:
    # Each document is one made-up word repeated 30 times: trained on, the word becomes one token.
    words = [f"zx{chr(97 + i // 26)}{chr(97 + i % 26)}q" for i in range(40)]
    cfg = config_for(write_txt([" ".join([w] * 30) for w in words]), split=SplitConfig(validation_fraction=0.25))
    cfg = dataclasses.replace(cfg, tokenizer=TokenizerConfig(vocab_size=1000, min_frequency=2))
    out = tmp_path / "data"
    prepare(cfg, out, progress=False)
    val_words = {doc.split()[0] for doc in _decoded_documents(out, "validation")}
    train_words = {doc.split()[0] for doc in _decoded_documents(out, "train")}
    assert val_words and train_words and val_words.isdisjoint(train_words)
    assert val_words | train_words == set(words)
    tok = load_tokenizer(out)
    assert all(len(tok.encode(" " + w, add_special_tokens=False)) == 1 for w in train_words)
    assert all(len(tok.encode(" " + w, add_special_tokens=False)) > 1 for w in val_words)


def test_pretrained_tokenizer_from_a_local_directory(
    tmp_path: Path, texts: list[str], write_txt: Callable[[list[str]], str], config_for: Callable[..., DataConfig]
) -> None:
    from transformers import PreTrainedTokenizerFast

    from atlas_data.tokenizer import train_bpe

    local = tmp_path / "my-tokenizer"
    bpe = train_bpe(TokenizerConfig(vocab_size=350, min_frequency=1, special_tokens=("<s>", "</s>")), texts)
    bpe.enable_truncation(8)  # saved into tokenizer.json, as some hub tokenizers ship it: must not cut documents
    PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="</s>").save_pretrained(local)

    cfg = dataclasses.replace(config_for(write_txt(texts)), tokenizer=TokenizerConfig(spec=f"hf:{local}"))
    out = tmp_path / "data"
    manifest = prepare(cfg, out, progress=False)
    assert manifest.tokenizer.spec == f"hf:{local}"
    assert (manifest.tokenizer.vocab_size, manifest.tokenizer.eos_token, manifest.tokenizer.eos_id) == (350, "</s>", 1)
    assert manifest.dtype == "uint16"
    decoded = _decoded_documents(out, "train") + _decoded_documents(out, "validation")
    assert sorted(decoded) == sorted(texts)


def test_pretrained_tokenizer_without_eos_needs_eos_token(tmp_path: Path, texts: list[str]) -> None:
    from transformers import PreTrainedTokenizerFast

    from atlas_data.tokenizer import train_bpe

    local = tmp_path / "no-eos"
    PreTrainedTokenizerFast(tokenizer_object=train_bpe(TokenizerConfig(vocab_size=300), texts)).save_pretrained(local)
    with pytest.raises(ConfigError, match="data.tokenizer.eos_token: .* defines no EOS token"):
        build_tokenizer(TokenizerConfig(spec=f"hf:{local}"), [], tmp_path)
    info = build_tokenizer(TokenizerConfig(spec=f"hf:{local}", eos_token="<|endoftext|>"), [], tmp_path)
    assert info.eos_id == 0


def test_missing_pretrained_tokenizer_is_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="cannot load tokenizer 'no-such-org/no-such-tokenizer'"):
        build_tokenizer(TokenizerConfig(spec="hf:no-such-org/no-such-tokenizer"), [], tmp_path)


def test_dtype_is_uint16_up_to_65536_ids_then_uint32(
    tmp_path: Path, write_txt: Callable[[list[str]], str], config_for: Callable[..., DataConfig]
) -> None:
    assert dtype_for_vocab(8192) == np.uint16 and dtype_for_vocab(65536) == np.uint16
    assert dtype_for_vocab(65537) == np.uint32

    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"w{i}": i for i in range(70_000)} | {"<eos>": 70_000, "<unk>": 70_001}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    local = tmp_path / "wide"
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", unk_token="<unk>").save_pretrained(local)

    docs = ["w69999 w1 w65536", "w3 w65535 w70"]
    cfg = dataclasses.replace(config_for(write_txt(docs)), tokenizer=TokenizerConfig(spec=f"hf:{local}"))
    manifest = prepare(cfg, tmp_path / "data", progress=False)
    assert manifest.dtype == "uint32" and manifest.tokenizer.vocab_size == 70_002
    tokens = np.concatenate(
        [
            np.fromfile(tmp_path / "data" / s.file, dtype="<u4")
            for split in manifest.splits.values()
            for s in split.shards
        ]
    )
    assert sorted(tokens.tolist()) == sorted([69999, 1, 65536, 70_000, 3, 65535, 70, 70_000])
