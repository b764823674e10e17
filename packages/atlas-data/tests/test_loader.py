"""TokenWindowLoader: window contents, epoch permutations, DDP coverage, resume."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
import torch

from atlas_data import Manifest, load_manifest
from atlas_data.loader import TokenWindowLoader

SEQ = 20  # windows of 21 tokens straddle the fixture's 512-token shard boundaries


@pytest.fixture(scope="module")
def manifest(prepared_dir: Path) -> Manifest:
    return load_manifest(prepared_dir)


def _stream(manifest: Manifest, split: str = "train") -> np.ndarray:
    return np.concatenate([np.fromfile(manifest.path(s.file), dtype="<u2") for s in manifest.splits[split].shards])


@pytest.fixture(scope="module")
def window_id(manifest: Manifest) -> dict[tuple[int, ...], int]:
    """Window content -> window id; asserts the fixture's windows are distinguishable by content."""
    stream = _stream(manifest)
    n = len(stream) // (SEQ + 1)
    ids = {tuple(stream[w * (SEQ + 1) : (w + 1) * (SEQ + 1)].tolist()): w for w in range(n)}
    assert len(ids) == n
    return ids


def _ids(batch: torch.Tensor, window_id: dict[tuple[int, ...], int]) -> list[int]:
    return [window_id[tuple(row.tolist())] for row in batch]


def test_windows_are_consecutive_slices_of_the_stream(manifest: Manifest) -> None:
    loader = TokenWindowLoader(manifest, "train", seq_len=SEQ, batch_size=4, shuffle=False)
    stream = _stream(manifest)
    assert loader.n_windows == len(stream) // (SEQ + 1)
    batches = list(itertools.islice(iter(loader), 3))
    expected = torch.from_numpy(stream[: 12 * (SEQ + 1)].astype(np.int64)).view(3, 4, SEQ + 1)
    assert all(b.dtype == torch.int64 and b.shape == (4, SEQ + 1) for b in batches)
    assert torch.equal(torch.stack(batches), expected)

    pairs = TokenWindowLoader(manifest, "train", seq_len=SEQ, batch_size=4, shuffle=False, return_pairs=True)
    x, y = next(iter(pairs))
    assert x.shape == y.shape == (4, SEQ) and torch.equal(x, batches[0][:, :-1]) and torch.equal(y, batches[0][:, 1:])


def test_each_epoch_is_a_seeded_permutation_with_carry_over(manifest: Manifest, window_id: dict) -> None:
    loader = TokenWindowLoader(manifest, "train", seq_len=SEQ, batch_size=7, seed=3)
    n = loader.n_windows
    assert n % 7 != 0  # the remainder path is exercised
    steps = 3 * n // 7 + 1
    seen = [w for batch in itertools.islice(iter(loader), steps) for w in _ids(batch, window_id)]
    epochs = [seen[e * n : (e + 1) * n] for e in range(3)]
    assert all(sorted(e) == list(range(n)) for e in epochs)  # every window once per epoch, none dropped
    assert epochs[0] != epochs[1] and epochs[1] != epochs[2] and epochs[0] != epochs[2]
    assert epochs[0] != list(range(n))
    assert epochs[1] == loader.window_ids(1).tolist()
    again = TokenWindowLoader(manifest, "train", seq_len=SEQ, batch_size=7, seed=3)
    other = TokenWindowLoader(manifest, "train", seq_len=SEQ, batch_size=7, seed=4)
    assert torch.equal(
        next(iter(again)), next(iter(TokenWindowLoader(manifest, "train", seq_len=SEQ, batch_size=7, seed=3)))
    )
    assert not torch.equal(next(iter(again)), next(iter(other)))


def test_two_ranks_cover_each_epoch_exactly_once(manifest: Manifest, window_id: dict) -> None:
    ranks = [
        TokenWindowLoader(manifest, "train", seq_len=SEQ, batch_size=5, seed=0, rank=r, world_size=2) for r in range(2)
    ]
    n = ranks[0].n_windows
    assert n % 10 != 0
    steps = 2 * n // 10 + 1  # two epochs and a bit, crossing both epoch boundaries
    per_rank = [[_ids(b, window_id) for b in itertools.islice(iter(loader), steps)] for loader in ranks]
    assert all(len(b) == 5 for batches in per_rank for b in batches)  # full batches at every step
    order = [w for step in range(steps) for r in range(2) for w in per_rank[r][step]]
    for epoch in range(2):
        window_ids = order[epoch * n : (epoch + 1) * n]
        assert sorted(window_ids) == list(range(n))
    for step in range(steps):
        assert not set(per_rank[0][step]) & set(per_rank[1][step])


def test_finite_mode_splits_the_final_partial_batch(manifest: Manifest, window_id: dict) -> None:
    loaders = [
        TokenWindowLoader(manifest, "train", seq_len=SEQ, batch_size=4, rank=r, world_size=3, epochs=1)
        for r in range(3)
    ]
    n = loaders[0].n_windows
    full_steps, tail = divmod(n, 12)
    assert tail > 3  # every rank gets a share of the final global batch
    per_rank = [[_ids(b, window_id) for b in loader] for loader in loaders]
    tail_sizes = [len(per_rank[r][-1]) for r in range(3)]
    assert all([len(b) for b in per_rank[r][:-1]] == [4] * full_steps for r in range(3))
    assert sum(tail_sizes) == tail and max(tail_sizes) - min(tail_sizes) <= 1
    assert sorted(w for batches in per_rank for b in batches for w in b) == list(range(n))
    assert list(loaders[0]) == []  # exhausted after one epoch


def test_resume_continues_with_exactly_the_next_batch(manifest: Manifest) -> None:
    def make() -> TokenWindowLoader:
        return TokenWindowLoader(manifest, "train", seq_len=SEQ, batch_size=6, seed=11, rank=1, world_size=2)

    reference = make()
    n_steps = reference.n_windows // 12 + 5  # run past an epoch boundary
    expected = list(itertools.islice(iter(reference), n_steps))
    for cut in (1, n_steps - 4):
        first = make()
        it = iter(first)
        for _ in range(cut):
            next(it)
        state = first.state_dict()
        assert state["position"] == cut * 12 and state["epoch"] == cut * 12 // first.n_windows
        resumed = make()
        resumed.load_state_dict(state)
        got = list(itertools.islice(iter(resumed), 3))
        assert all(torch.equal(a, b) for a, b in zip(got, expected[cut : cut + 3]))


def test_state_from_a_different_data_order_is_rejected(manifest: Manifest) -> None:
    loader = TokenWindowLoader(manifest, "train", seq_len=SEQ, batch_size=2, seed=1)
    with pytest.raises(ValueError, match="loader state seed=2 does not match this loader's 1"):
        loader.load_state_dict({**loader.state_dict(), "seed": 2})
    with pytest.raises(ValueError, match="loader state seq_len=7"):
        loader.load_state_dict({**loader.state_dict(), "seq_len": 7})


def test_bad_arguments(manifest: Manifest, prepared_dir: Path) -> None:
    with pytest.raises(ValueError, match="fewer than one window"):
        TokenWindowLoader(manifest, "validation", seq_len=10**6, batch_size=1)
    with pytest.raises(ValueError, match="no split 'test'"):
        TokenWindowLoader(manifest, "test", seq_len=8, batch_size=1)
    with pytest.raises(ValueError, match="rank < world_size"):
        TokenWindowLoader(prepared_dir, "train", seq_len=8, batch_size=1, rank=2, world_size=2)
