"""prepare(): determinism, idempotence, crash safety, caps, and the embedded default corpus."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import atlas_data.shards
from atlas_data import (
    MANIFEST_FILE,
    DataConfig,
    EmptyCorpusError,
    MissingDataFileError,
    ShardConfig,
    SourceConfig,
    SplitConfig,
    TokenizerConfig,
    load_manifest,
    prepare,
)
from atlas_data.prepare import LOCK_FILE, LOG_FILE


def _files(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.name != LOG_FILE}


def test_layout_counts_and_shard_sizes(tmp_path: Path, small_cfg: DataConfig) -> None:
    manifest = prepare(small_cfg, tmp_path / "data", progress=False)
    train, val = manifest.splits["train"], manifest.splits["validation"]
    assert train.n_documents + val.n_documents == 60 and val.n_documents > 0
    for name, info in manifest.splits.items():
        sizes = [s.n_tokens for s in info.shards]
        assert all(n == 512 for n in sizes[:-1]) and 0 < sizes[-1] <= 512 and sum(sizes) == info.n_tokens
        offsets = manifest.doc_offsets(name)
        assert offsets.dtype == np.uint64 and len(offsets) == info.n_documents + 1
        assert offsets[0] == 0 and offsets[-1] == info.n_tokens and np.all(np.diff(offsets) > 1), name
    listed = set(manifest.files()) | {MANIFEST_FILE, LOG_FILE, LOCK_FILE}
    assert {p.name for p in (tmp_path / "data").iterdir()} == listed
    assert "prepared" in (tmp_path / "data" / LOG_FILE).read_text()


def test_output_is_byte_identical_across_runs_and_worker_counts(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    write_txt: Callable[[list[str]], str],
    texts_of: Callable[..., list[str]],
    config_for: Callable[..., DataConfig],
) -> None:
    # Small tasks, so two workers really interleave (~40 tasks, 4 in flight).
    monkeypatch.setattr(atlas_data.shards, "_TASK_DOCS", 8)
    cfg = config_for(write_txt(texts_of(300)))
    prepare(cfg, tmp_path / "a", progress=False)
    prepare(cfg, tmp_path / "b", progress=False)
    prepare(dataclasses.replace(cfg, workers=2), tmp_path / "c", progress=False)
    a = _files(tmp_path / "a")
    assert len([n for n in a if n.endswith(".bin")]) > 4
    assert a == _files(tmp_path / "b") == _files(tmp_path / "c")


def test_same_config_is_skipped_and_force_rebuilds(tmp_path: Path, small_cfg: DataConfig) -> None:
    out = tmp_path / "data"
    first = prepare(small_cfg, out, progress=False)
    stamps = {p.name: p.stat().st_mtime_ns for p in out.iterdir() if p.name != LOG_FILE}
    # workers does not change the output, so it does not force a rebuild either.
    assert prepare(dataclasses.replace(small_cfg, workers=2), out, progress=False) == first
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir() if p.name != LOG_FILE} == stamps
    assert "skipping" in (out / LOG_FILE).read_text()
    assert prepare(small_cfg, out, force=True, progress=False) == first
    assert (out / LOG_FILE).read_text().count(": prepared ") == 2


def test_changed_config_rebuilds_and_removes_stale_shards(tmp_path: Path, small_cfg: DataConfig) -> None:
    out = tmp_path / "data"
    prepare(dataclasses.replace(small_cfg, shards=ShardConfig(shard_tokens=64)), out, progress=False)
    many = {p.name for p in out.iterdir()}
    manifest = prepare(small_cfg, out, progress=False)
    remaining = {p.name for p in out.iterdir()}
    assert len(many) > len(remaining)
    assert remaining == set(manifest.files()) | {MANIFEST_FILE, LOG_FILE, LOCK_FILE}
    assert "different config" in (out / LOG_FILE).read_text()


def test_incomplete_existing_data_is_rebuilt(tmp_path: Path, small_cfg: DataConfig) -> None:
    out = tmp_path / "data"
    first = prepare(small_cfg, out, progress=False)
    (out / first.splits["train"].shards[0].file).unlink()
    assert prepare(small_cfg, out, progress=False) == first
    load_manifest(out)


def test_concurrent_prepares_of_one_directory_build_it_once(tmp_path: Path, small_cfg: DataConfig) -> None:
    (tmp_path / "cfg.json").write_text(json.dumps(small_cfg.to_dict()))
    script = (
        "import json, sys\n"
        "from atlas_data import DataConfig, prepare\n"
        "cfg = DataConfig.from_dict(json.load(open(sys.argv[1])))\n"
        "prepare(cfg, sys.argv[2], progress=False)\n"
    )
    args = [sys.executable, "-c", script, str(tmp_path / "cfg.json"), str(tmp_path / "data")]
    procs = [subprocess.Popen(args, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    assert all(p.wait(timeout=120) == 0 for p in procs), [p.stderr.read() for p in procs if p.stderr]
    log = (tmp_path / "data" / LOG_FILE).read_text()
    assert log.count(": prepared ") == 1 and log.count("skipping") == 1
    load_manifest(tmp_path / "data")


def _crash_on_second_write(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let the first shard land, then die half-way through the second like a killed process would."""
    real = atlas_data.shards.atomic_write_bytes
    calls = []

    def write(path: Path, data: bytes) -> None:
        calls.append(path)
        if len(calls) == 1:
            return real(path, data)
        path.with_name(f".{path.name}.999.tmp").write_bytes(bytes(data)[: len(data) // 2])
        raise RuntimeError("simulated crash")

    monkeypatch.setattr(atlas_data.shards, "atomic_write_bytes", write)


def test_crash_mid_write_leaves_no_manifest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small_cfg: DataConfig
) -> None:
    out = tmp_path / "data"
    prepare(small_cfg, out, progress=False)  # a complete dataset that the crashing rebuild replaces
    _crash_on_second_write(monkeypatch)
    with pytest.raises(RuntimeError, match="simulated crash"):
        prepare(dataclasses.replace(small_cfg, seed=1), out, progress=False)
    assert not (out / MANIFEST_FILE).exists()
    assert (out / "train_000000.bin").exists() and list(out.glob(".*.tmp"))
    with pytest.raises(MissingDataFileError, match="never prepared, or preparation did not finish"):
        load_manifest(out)
    assert "prepare failed" in (out / LOG_FILE).read_text()

    monkeypatch.undo()
    prepare(dataclasses.replace(small_cfg, seed=1), out, progress=False)
    prepare(dataclasses.replace(small_cfg, seed=1), tmp_path / "clean", progress=False)
    assert _files(out) == _files(tmp_path / "clean")  # leftovers (temp and stale files) are gone


def test_empty_or_missing_corpus_fails_before_any_manifest(
    tmp_path: Path, write_txt: Callable[[list[str]], str], config_for: Callable[..., DataConfig]
) -> None:
    with pytest.raises(EmptyCorpusError, match=r"source local \['.*corpus/\*\.txt'\] yielded no documents"):
        prepare(config_for(write_txt(["  ", "\n\n"])), tmp_path / "a", progress=False)
    with pytest.raises(MissingDataFileError, match="data.source.paths: file not found: .*missing.txt"):
        prepare(config_for(str(tmp_path / "missing.txt")), tmp_path / "b", progress=False)
    assert not (tmp_path / "a" / MANIFEST_FILE).exists() and not (tmp_path / "b" / MANIFEST_FILE).exists()


def test_max_tokens_caps_the_corpus(
    tmp_path: Path, texts: list[str], write_txt: Callable[[list[str]], str], config_for: Callable[..., DataConfig]
) -> None:
    from transformers import PreTrainedTokenizerFast

    from atlas_data.tokenizer import train_bpe

    local = tmp_path / "tok"
    PreTrainedTokenizerFast(
        tokenizer_object=train_bpe(TokenizerConfig(vocab_size=300), texts), eos_token="<|endoftext|>"
    ).save_pretrained(local)
    pattern = write_txt(texts)
    base = dataclasses.replace(config_for(pattern), tokenizer=TokenizerConfig(spec=f"hf:{local}"))
    full = prepare(base, tmp_path / "full", progress=False)
    capped_cfg = dataclasses.replace(base, source=SourceConfig(kind="local", paths=(pattern,), max_tokens=500))
    capped = prepare(capped_cfg, tmp_path / "capped", progress=False)
    n_tokens = sum(s.n_tokens for s in capped.splits.values())
    n_docs = sum(s.n_documents for s in capped.splits.values())
    assert 500 <= n_tokens < 500 + 100 and n_docs < 60
    # The capped corpus is a prefix of the full one: its training stream starts the same way.
    train = capped.splits["train"].shards[0].file
    head = np.fromfile(tmp_path / "capped" / train, dtype="<u2")
    assert np.array_equal(
        head, np.fromfile(tmp_path / "full" / full.splits["train"].shards[0].file, dtype="<u2")[: len(head)]
    )


def test_embedded_default_corpus(tmp_path: Path) -> None:
    cfg = DataConfig(split=SplitConfig(validation_fraction=0.02), shards=ShardConfig(shard_tokens=1 << 20), workers=2)
    manifest = prepare(cfg, tmp_path / "embedded", progress=False)
    train, val = manifest.splits["train"], manifest.splits["validation"]
    assert train.n_documents + val.n_documents == 2 * 1189
    assert 0.01 < val.n_documents / 2378 < 0.03
    assert manifest.tokenizer.vocab_size == 8192 and manifest.dtype == "uint16"
    assert 1_500_000 < train.n_tokens + val.n_tokens < 2_500_000
    load_manifest(tmp_path / "embedded", verify=True)
