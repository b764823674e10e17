"""TokenWindowLoader at its edges: the saved state's exact content, stream reads at the stream's ends, the smallest
legal arguments, a rank with no share of the last batch, and the defaults (seed 0, verified shards).

Written against the mutants `make mutants` left alive in loader.py (docs/testing.md).
"""

from __future__ import annotations

import itertools
import logging
from pathlib import Path

import numpy as np
import pytest
import torch

from atlas_data import Manifest, load_manifest
from atlas_data.errors import ShardChecksumError
from atlas_data.loader import SplitStream, TokenWindowLoader


@pytest.fixture(scope="module")
def manifest(prepared_dir: Path) -> Manifest:
    return load_manifest(prepared_dir)


def _stream(manifest: Manifest, split: str = "train") -> np.ndarray:
    return np.concatenate([np.fromfile(manifest.path(s.file), dtype="<u2") for s in manifest.splits[split].shards])


def test_state_dict_is_the_documented_checkpoint_format(manifest: Manifest) -> None:
    # a checkpoint stores this dict; a change of any value (the version included) breaks resuming old runs
    loader = TokenWindowLoader(manifest, "train", seq_len=20, batch_size=3, seed=5, rank=1, world_size=2)
    next(iter(loader))
    assert loader.state_dict() == {
        "version": 1,
        "position": 6,
        "epoch": 0,
        "seed": 5,
        "split": "train",
        "seq_len": 20,
        "n_windows": loader.n_windows,
        "shuffle": True,
    }
    assert loader.manifest is manifest and loader.split == "train"


def test_position_zero_loads_and_bad_positions_are_refused(manifest: Manifest) -> None:
    loader = TokenWindowLoader(manifest, "train", seq_len=20, batch_size=2)
    fresh = loader.state_dict()
    next(iter(loader))
    loader.load_state_dict(fresh)  # position 0: the start of the run
    assert loader.position == 0
    for bad in (-1, "3", 2.0, None):
        with pytest.raises(ValueError, match="position must be an int >= 0"):
            loader.load_state_dict({**fresh, "position": bad})


def test_reads_reach_both_ends_of_the_stream_and_no_further(manifest: Manifest) -> None:
    stream = SplitStream(manifest, "train")
    tokens = _stream(manifest)
    assert stream.n_tokens == len(tokens)
    assert np.array_equal(stream.read(0, 5), tokens[:5])
    assert np.array_equal(stream.read(len(tokens) - 7, 7), tokens[-7:])  # ends exactly at the stream's end
    shard = manifest.splits["train"].shards[0].n_tokens
    assert np.array_equal(stream.read(shard - 3, 6), tokens[shard - 3 : shard + 3])  # across a shard boundary
    for offset, length in ((-1, 2), (len(tokens) - 6, 7), (len(tokens), 1)):
        with pytest.raises(IndexError, match="outside a stream"):
            stream.read(offset, length)


def test_smallest_legal_arguments_and_the_first_illegal_ones(manifest: Manifest) -> None:
    tokens = _stream(manifest)
    one = TokenWindowLoader(manifest, "train", seq_len=1, batch_size=1, shuffle=False)
    assert torch.equal(next(iter(one)), torch.from_numpy(tokens[:2].astype(np.int64)).view(1, 2))
    for seq_len, batch_size in ((0, 1), (1, 0), (0, 0)):
        with pytest.raises(ValueError, match="must be >= 1"):
            TokenWindowLoader(manifest, "train", seq_len=seq_len, batch_size=batch_size)


def test_a_rank_without_a_share_of_the_last_batch_yields_one_batch_fewer(manifest: Manifest) -> None:
    # batch 1 per rank, world 7: the final global batch has n % 7 windows, so the last ranks get none of it
    n = TokenWindowLoader(manifest, "train", seq_len=20, batch_size=1).n_windows
    assert 0 < n % 7 < 6
    per_rank = [
        list(TokenWindowLoader(manifest, "train", seq_len=20, batch_size=1, rank=r, world_size=7, epochs=1))
        for r in range(7)
    ]
    assert [len(b) for b in per_rank] == [n // 7 + (r < n % 7) for r in range(7)]
    assert all(batch.shape == (1, 21) for batches in per_rank for batch in batches)


def test_a_global_batch_of_exactly_all_windows_is_not_warned_about(manifest: Manifest, caplog) -> None:
    n = TokenWindowLoader(manifest, "train", seq_len=20, batch_size=1).n_windows
    with caplog.at_level(logging.WARNING, logger="atlas_data.loader"):
        TokenWindowLoader(manifest, "train", seq_len=20, batch_size=n)
    assert not caplog.records
    with caplog.at_level(logging.WARNING, logger="atlas_data.loader"):
        TokenWindowLoader(manifest, "train", seq_len=20, batch_size=n + 1)
    assert "exceeds the" in caplog.text


def test_defaults_are_seed_zero_and_verified_shards(manifest: Manifest, prepared_copy: Path) -> None:
    def first(**kw) -> torch.Tensor:
        return next(iter(TokenWindowLoader(manifest, "train", seq_len=20, batch_size=4, **kw)))

    assert torch.equal(first(), first(seed=0)) and not torch.equal(first(), first(seed=1))

    shard = prepared_copy / load_manifest(prepared_copy).splits["train"].shards[0].file
    data = bytearray(shard.read_bytes())
    data[10] ^= 1  # same size: only the checksum can tell
    shard.write_bytes(bytes(data))
    with pytest.raises(ShardChecksumError, match="corrupt"):
        TokenWindowLoader(prepared_copy, "train", seq_len=20, batch_size=1)
    batches = TokenWindowLoader(prepared_copy, "train", seq_len=20, batch_size=1, verify=False)
    assert next(itertools.islice(iter(batches), 0, None)).shape == (1, 21)
