"""`atlas data prepare|verify|info` end to end on a tiny local corpus."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from atlas_experiments.cli import main
from atlas_experiments.commands.data import read_data_config

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    corpus = tmp_path / "corpus.jsonl"
    words = ["salt", "river", "mill", "barley", "harbour", "rain", "stone", "boat"]
    corpus.write_text(
        "".join(json.dumps({"text": " ".join(words[(i + k) % 8] for k in range(12 + i % 5))}) + "\n" for i in range(40))
    )
    cfg = {
        "source": {"kind": "local", "paths": [str(corpus)]},
        "tokenizer": {"spec": "bpe", "vocab_size": 280, "min_frequency": 1},
        "split": {"validation_fraction": 0.1},
        "shards": {"shard_tokens": 128},
        "seed": 0,
        "workers": 1,
    }
    path = tmp_path / "data.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_prepare_verify_info(config_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["data", "prepare", "--config", str(config_file), "--out", str(out), "--no-progress"]) == 0
    assert "| train |" in capsys.readouterr().out
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["tokenizer"]["vocab_size"] == 280 and manifest["splits"]["validation"]["n_documents"] >= 1

    assert main(["data", "prepare", "--config", str(config_file), "--out", str(out), "--workers", "2"]) == 0
    assert "skipping" in (out / "prepare.log").read_text()
    capsys.readouterr()
    assert main(["data", "verify", "--dir", str(out)]) == 0
    assert capsys.readouterr().out.startswith("ok: ")
    assert main(["data", "info", "--dir", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == manifest


def test_corrupt_shard_fails_verify_with_one_line(config_file: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    assert main(["data", "prepare", "--config", str(config_file), "--out", str(out), "--no-progress"]) == 0
    shard = out / "train_000000.bin"
    shard.write_bytes(bytes([shard.read_bytes()[0] ^ 1]) + shard.read_bytes()[1:])
    capsys.readouterr()
    assert main(["data", "verify", "--dir", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("atlas: error: ") and str(shard) in err and err.count("\n") == 1


def test_bad_key_exits_2_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("data:\n  tokenizer:\n    vocab_size: abc\n")
    assert main(["data", "prepare", "--config", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert "data.tokenizer.vocab_size: expected int >= 256, got 'abc'" in capsys.readouterr().err
    bad.write_text("source:\n  kind: embedded\n  paths: [x.txt]\n")
    assert main(["data", "prepare", "--config", str(bad), "--out", str(tmp_path / "o")]) == 2
    assert "data.source.paths: unknown key" in capsys.readouterr().err
    assert main(["data", "prepare", "--config", str(tmp_path / "missing.yaml"), "--out", str(tmp_path / "o")]) == 2
    assert (
        main(
            [
                "data",
                "prepare",
                "--config",
                str(REPO / "config/data/embedded.yaml"),
                "--out",
                str(tmp_path / "o"),
                "--workers",
                "0",
            ]
        )
        == 2
    )
    assert "data.workers: expected int >= 1, got 0" in capsys.readouterr().err


def test_shipped_configs_parse() -> None:
    embedded = read_data_config(REPO / "config" / "data" / "embedded.yaml")
    assert embedded.source.kind == "embedded" and embedded.source.versions == ("kjv", "asv")
    assert embedded.tokenizer.vocab_size == 8192 and embedded.workers == 2
    assert 0.01 <= embedded.split.validation_fraction <= 0.02
    for path in sorted((REPO / "config" / "data").glob("*.yaml")):
        read_data_config(path)
