"""Typed configs: round trips, and errors that name the offending key."""

from __future__ import annotations

import pytest

from atlas_data import ConfigError, DataConfig, SourceConfig, TokenizerConfig


def test_round_trip_preserves_every_field() -> None:
    cfg = DataConfig.from_dict(
        {
            "source": {"kind": "local", "paths": ["a/*.txt", "b.jsonl"], "txt_split": "blank_lines"},
            "tokenizer": {"spec": "bpe", "vocab_size": 512, "special_tokens": ["<eos>", "<pad>"]},
            "split": {"validation_fraction": 0},
            "shards": {"shard_tokens": 4096},
            "seed": 7,
            "workers": 3,
        }
    )
    assert cfg.source.paths == ("a/*.txt", "b.jsonl")
    assert cfg.split.validation_fraction == 0.0 and isinstance(cfg.split.validation_fraction, float)
    assert DataConfig.from_dict(cfg.to_dict()) == cfg
    assert "workers" not in cfg.identity()


def test_to_dict_emits_only_the_keys_of_the_chosen_kind() -> None:
    assert set(SourceConfig().to_dict()) == {"kind", "versions", "max_documents", "max_tokens"}
    assert set(TokenizerConfig(spec="hf:gpt2").to_dict()) == {"spec", "eos_token"}


@pytest.mark.parametrize(
    ("mapping", "message"),
    [
        ({"tokenizer": {"vocab_size": "abc"}}, "data.tokenizer.vocab_size: expected int >= 256, got 'abc'"),
        ({"tokenizer": {"vocab_size": 100}}, "data.tokenizer.vocab_size: expected int >= 256, got 100"),
        ({"tokenizer": {"vocab_size": True}}, "data.tokenizer.vocab_size: expected int >= 256, got True"),
        ({"split": {"validation_fraction": 0.9}}, "data.split.validation_fraction: expected float in [0.0, 0.5]"),
        ({"source": {"kind": "web"}}, "data.source.kind: expected one of 'embedded', 'local', 'hf', got 'web'"),
        ({"source": {"versions": ["kjv", "nrsv"]}}, "data.source.versions: expected list of one of 'kjv', 'asv'"),
        ({"shards": {"shard_tokens": 0}}, "data.shards.shard_tokens: expected int >= 1, got 0"),
        ({"workers": "2"}, "data.workers: expected int >= 1, got '2'"),
        ({"seeed": 1}, "data.seeed: unknown key"),
        ({"tokenizer": {"vocab": 1}}, "data.tokenizer.vocab: unknown key"),
        (
            {"source": {"kind": "embedded", "paths": ["x"]}},
            "data.source.paths: unknown key (not a key of kind 'embedded'",
        ),
        ({"tokenizer": {"spec": "hf:gpt2", "vocab_size": 512}}, "data.tokenizer.vocab_size: unknown key"),
        ({"tokenizer": {"spec": "sentencepiece"}}, "data.tokenizer.spec: expected 'bpe' or 'hf:<name_or_path>'"),
        ({"tokenizer": {"eos_token": "<eos>"}}, "data.tokenizer.eos_token: '<eos>' must be one of special_tokens"),
        ({"source": {"kind": "local"}}, "data.source.paths: a local source needs at least one path"),
        ({"source": {"kind": "hf"}}, "data.source.path: an hf source needs a dataset path"),
        ({"source": {"max_tokens": 1000}}, "data.source.max_tokens: needs a pretrained tokenizer"),
        ({"source": "embedded"}, "data.source: expected a mapping, got 'embedded'"),
    ],
)
def test_errors_name_the_key(mapping: dict, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        DataConfig.from_dict(mapping)
    assert str(info.value).startswith(message), str(info.value)


def test_direct_construction_is_checked_too() -> None:
    with pytest.raises(ConfigError, match=r"data\.source\.max_documents: expected int >= 1 or null, got 0"):
        SourceConfig(max_documents=0)
