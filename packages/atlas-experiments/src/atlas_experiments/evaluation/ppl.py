"""Token-level perplexity on the held-out split, at the training context and at longer ones (extrapolation).

For each length L the validation stream is cut into non-overlapping windows of L + 1 tokens in stream order
(`TokenWindowLoader(..., shuffle=False, epochs=1)`), each window is scored from an empty state, and

    ppl(L) = exp( sum of next-token cross-entropies / number of predicted tokens ),

summed over every window (or the first `max_tokens`). Windows cross document boundaries (the EOS between
documents is predicted like any other token), as in training. Beyond the training context T the per-position
loss is also split: `ppl_beyond_train` covers positions >= T only, the tokens a model never saw at that depth.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class PplResult:
    length: int
    ppl: float
    nll: float  # mean next-token cross-entropy, nats
    tokens: int
    windows: int
    seconds: float
    ppl_beyond_train: float | None = None
    tokens_beyond_train: int = 0

    def metrics(self) -> dict[str, float]:
        out = {
            f"ppl/len={self.length}": self.ppl,
            f"nll/len={self.length}": self.nll,
            f"tokens/len={self.length}": float(self.tokens),
        }
        if self.ppl_beyond_train is not None:
            out[f"ppl_beyond_train/len={self.length}"] = self.ppl_beyond_train
        return out


@torch.no_grad()
def evaluate_ppl(
    model: torch.nn.Module,
    data: Any,
    lengths: Sequence[int],
    *,
    split: str = "validation",
    batch_size: int = 8,
    max_tokens: int | None = None,
    train_len: int | None = None,
    device: torch.device | str = "cpu",
    progress: bool = True,
) -> list[PplResult]:
    """Perplexity per length over `split` of a prepared dataset (`Manifest` or directory)."""
    from tqdm.auto import tqdm

    from atlas_data.loader import TokenWindowLoader
    from atlas_data.manifest import Manifest, load_manifest

    manifest = data if isinstance(data, Manifest) else load_manifest(data, verify=False)
    n_split = manifest.split(split).n_tokens
    model.eval()
    results = []
    for length in lengths:
        if length < 2:
            raise ValueError(f"ppl length must be >= 2, got {length}")
        n_windows = n_split // (length + 1)
        if n_windows == 0:
            raise ValueError(
                f"length {length}: the {split} split holds {n_split} tokens, fewer than one window of {length + 1}"
            )
        if max_tokens is not None:
            n_windows = min(n_windows, max(1, math.ceil(max_tokens / length)))
        loader = TokenWindowLoader(
            manifest, split, seq_len=length, batch_size=batch_size, shuffle=False, epochs=1, return_pairs=True
        )
        beyond = train_len if train_len is not None and length > train_len else None
        sum_nll = 0.0
        sum_beyond = 0.0
        seen = 0
        t0 = time.perf_counter()
        bar = tqdm(total=n_windows, desc=f"ppl L={length}", unit="win", disable=not progress, leave=False)
        for x, y in loader:
            take = min(len(x), n_windows - seen)
            if take <= 0:
                break
            x, y = x[:take].to(device), y[:take].to(device)
            logits = model(x).logits.float()
            nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), y, reduction="none").double()  # [B, L]
            sum_nll += nll.sum().item()
            if beyond is not None:
                sum_beyond += nll[:, beyond:].sum().item()
            seen += take
            bar.update(take)
            if seen >= n_windows:
                break
        bar.close()
        tokens = seen * length
        mean = sum_nll / tokens
        res = PplResult(length, math.exp(mean), mean, tokens, seen, time.perf_counter() - t0)
        if beyond is not None:
            res.tokens_beyond_train = seen * (length - beyond)
            res.ppl_beyond_train = math.exp(sum_beyond / res.tokens_beyond_train)
        results.append(res)
    return results
