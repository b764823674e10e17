"""`TokenWindowLoader`: fixed-length training windows from a prepared split, DDP-aware and resumable.

Windows. The split's shards are read as one token stream of T tokens, cut into
``n_windows = T // (seq_len + 1)`` non-overlapping windows of ``seq_len + 1`` tokens; window ``w``
is ``stream[w * (seq_len + 1) : (w + 1) * (seq_len + 1)]``. The last ``T % (seq_len + 1)`` tokens
of the split form no window. Inputs are ``window[:-1]``, targets ``window[1:]``.

Order. Epoch ``e`` visits all windows once, in the permutation drawn from ``(seed, e)`` (or in
stream order with ``shuffle=False``). Epochs are laid end to end into one sequence of windows, and
global step ``k`` takes positions ``[k * G, (k + 1) * G)`` of it, ``G = world_size * batch_size``;
rank ``r`` takes the ``r``-th run of ``batch_size`` positions. Ranks therefore see disjoint
windows, and between them every window of an epoch exactly once.

Remainder. When ``n_windows % G != 0`` the last global batch of an epoch is filled with the first
windows of the next epoch (infinite mode, ``epochs=None``): no window is dropped, padded or
repeated within an epoch, and every rank yields full ``[batch_size, ...]`` batches at every step,
which DDP needs. With ``epochs=n`` the loader stops after n epochs, and the final, partial global
batch is split across ranks as evenly as possible (sizes differ by at most one; a rank may get
none, in which case it yields one batch fewer) -- meant for evaluation, where per-rank sums are
all-reduced once at the end.

Resume. `state_dict()` holds the global position (windows handed out by all ranks together), so
the same state can be loaded on every rank, and a loader restored from it yields exactly the batch
that would have come next.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from atlas_data.manifest import Manifest, load_manifest

log = logging.getLogger(__name__)

STATE_VERSION = 1
Batch = torch.Tensor | tuple[torch.Tensor, torch.Tensor]


class SplitStream:
    """Random access to one split's token stream across its memory-mapped shards."""

    def __init__(self, manifest: Manifest, split: str) -> None:
        info = manifest.split(split)
        self.dtype = manifest.np_dtype
        self.n_tokens = info.n_tokens
        self._maps = [
            np.memmap(manifest.path(s.file), dtype=self.dtype, mode="r", shape=(s.n_tokens,)) for s in info.shards
        ]
        self._starts = np.cumsum([0] + [s.n_tokens for s in info.shards]).tolist()

    def read(self, offset: int, length: int) -> np.ndarray:
        """Tokens ``[offset, offset + length)`` of the stream, copied out of the shards."""
        if offset < 0 or offset + length > self.n_tokens:
            raise IndexError(f"read [{offset}, {offset + length}) outside a stream of {self.n_tokens} tokens")
        out = np.empty(length, dtype=self.dtype)
        i = bisect.bisect_right(self._starts, offset) - 1
        filled = 0
        while filled < length:
            local = offset + filled - self._starts[i]
            take = min(length - filled, len(self._maps[i]) - local)
            out[filled : filled + take] = self._maps[i][local : local + take]
            filled += take
            i += 1
        return out


class TokenWindowLoader:
    """Batches of token windows, LongTensor [batch_size, seq_len + 1] (or x, y of [batch_size, seq_len]).

    Args:
        data: a `Manifest` or a prepared directory (loaded with `load_manifest(dir, verify)`).
        split: ``"train"`` or ``"validation"``.
        seq_len: model context; a window holds ``seq_len + 1`` tokens.
        batch_size: windows per batch on this rank.
        seed: seeds the per-epoch permutations.
        rank, world_size: this process's place among data-parallel ranks.
        shuffle: permute windows every epoch; False keeps stream order (evaluation).
        epochs: stop after this many epochs; None iterates forever.
        return_pairs: yield ``(x, y) = (window[:, :-1], window[:, 1:])`` instead of windows.
        verify: hash every shard when `data` is a directory.
    """

    def __init__(
        self,
        data: Manifest | str | Path,
        split: str,
        seq_len: int,
        batch_size: int,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        *,
        shuffle: bool = True,
        epochs: int | None = None,
        return_pairs: bool = False,
        verify: bool = True,
    ) -> None:
        if seq_len < 1 or batch_size < 1:
            raise ValueError(f"seq_len and batch_size must be >= 1, got {seq_len} and {batch_size}")
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"need 0 <= rank < world_size, got rank={rank}, world_size={world_size}")
        if epochs is not None and epochs < 1:
            raise ValueError(f"epochs must be >= 1 or None, got {epochs}")
        manifest = data if isinstance(data, Manifest) else load_manifest(data, verify=verify)
        self.manifest = manifest
        self.split = split
        self.seq_len = seq_len
        self.batch_size = batch_size
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.shuffle = shuffle
        self.epochs = epochs
        self.return_pairs = return_pairs
        self._stream = SplitStream(manifest, split)
        self.n_windows = self._stream.n_tokens // (seq_len + 1)
        if self.n_windows == 0:
            raise ValueError(
                f"split {split!r} of {manifest.where} has {self._stream.n_tokens} tokens, fewer than one "
                f"window of seq_len + 1 = {seq_len + 1}"
            )
        if self.global_batch > self.n_windows:
            log.warning(
                "global batch %d exceeds the %d windows of split %r: one batch spans several epochs",
                self.global_batch,
                self.n_windows,
                split,
            )
        self.position = 0
        self._orders: dict[int, np.ndarray] = {}

    @property
    def global_batch(self) -> int:
        """Windows consumed per step by all ranks together."""
        return self.world_size * self.batch_size

    @property
    def epoch(self) -> int:
        """The epoch the next window comes from."""
        return self.position // self.n_windows

    def __iter__(self) -> Iterator[Batch]:
        end = None if self.epochs is None else self.epochs * self.n_windows
        while end is None or self.position < end:
            start = self.position
            stop = start + self.global_batch if end is None else min(start + self.global_batch, end)
            if stop - start == self.global_batch:
                lo = start + self.rank * self.batch_size
                hi = lo + self.batch_size
            else:
                share = np.array_split(np.arange(start, stop), self.world_size)[self.rank]
                lo, hi = (int(share[0]), int(share[-1]) + 1) if len(share) else (start, start)
            # Advance before yielding: state_dict() taken after a batch must point past it.
            self.position = stop
            if hi > lo:
                yield self._batch(lo, hi)

    def _batch(self, lo: int, hi: int) -> Batch:
        width = self.seq_len + 1
        rows = []
        for pos in range(lo, hi):
            epoch, index = divmod(pos, self.n_windows)
            window = int(self._order(epoch)[index])
            rows.append(self._stream.read(window * width, width))
        batch = torch.from_numpy(np.stack(rows).astype(np.int64))
        return (batch[:, :-1], batch[:, 1:]) if self.return_pairs else batch

    def _order(self, epoch: int) -> np.ndarray:
        if epoch not in self._orders:
            if len(self._orders) >= 2:  # a batch spans at most two epochs unless G > n_windows
                self._orders.pop(min(self._orders))
            if self.shuffle:
                rng = np.random.default_rng(np.random.SeedSequence([self.seed, epoch]))
                self._orders[epoch] = rng.permutation(self.n_windows)
            else:
                self._orders[epoch] = np.arange(self.n_windows)
        return self._orders[epoch]

    def window_ids(self, epoch: int) -> np.ndarray:
        """The order in which epoch `epoch` visits window ids (all ranks together)."""
        return self._order(epoch).copy()

    def state_dict(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "position": self.position,
            "epoch": self.epoch,
            "seed": self.seed,
            "split": self.split,
            "seq_len": self.seq_len,
            "n_windows": self.n_windows,
            "shuffle": self.shuffle,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume at `state["position"]`. batch_size and world_size may differ from the saving run."""
        mine = self.state_dict()
        for key in ("version", "seed", "split", "seq_len", "n_windows", "shuffle"):
            if state.get(key) != mine[key]:
                raise ValueError(
                    f"loader state {key}={state.get(key)!r} does not match this loader's {mine[key]!r}; "
                    "it was saved for a different data order"
                )
        position = state.get("position")
        if not isinstance(position, int) or position < 0:
            raise ValueError(f"loader state position must be an int >= 0, got {position!r}")
        self.position = position
