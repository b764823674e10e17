"""The instance builders of the six MAD tasks: (inputs, targets) arrays of one `MADSetting`.

Split from `atlas_data.synthetic.mad`, whose docstring describes each task's token layout and the deviations from
mad-lab, and which re-exports `mad_instance` and `memorization_kv_map`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from atlas_data.synthetic import IGNORE_INDEX, as_rng

if TYPE_CHECKING:
    from atlas_data.synthetic.mad import MADSetting


def _in_context_recall(s: MADSetting, n: int, rng: np.random.Generator, train: bool) -> tuple[np.ndarray, np.ndarray]:
    v_total, mq = s.vocab_size, s.multi_query
    copy_prefix = v_total - 1
    usable = (v_total if mq else v_total - 1) - s.noise_vocab_size
    nk = usable // 2
    nv = usable - nk
    m = s.seq_len // 2 - 1  # motifs before the final probe pair
    keys = rng.integers(0, nk, size=(n, m))
    table = nk + rng.integers(0, nv, size=(n, nk))  # one value per key and sequence
    rows = np.arange(n)[:, None]
    values = table[rows, keys]
    if s.frac_noise > 0 and m > 0:
        noise = rng.random((n, m)) < s.frac_noise
        keep = rng.integers(0, m, size=n)  # at least one key-value pair per sequence
        noise[np.arange(n), keep] = False
        noise_tok = usable + rng.integers(0, s.noise_vocab_size, size=(n, m, 2))
    else:
        noise = np.zeros((n, m), dtype=bool)
        noise_tok = np.zeros((n, m, 2), dtype=np.int64)
    # repeated[i]: key i was shown (as a non-noise pair) at an earlier motif of the same sequence
    onehot = np.zeros((n, m, nk), dtype=np.int32)
    np.put_along_axis(onehot, keys[:, :, None], (~noise)[:, :, None].astype(np.int32), axis=2)
    seen = np.cumsum(onehot, axis=1)
    repeated = np.take_along_axis(seen - onehot, keys[:, :, None], axis=2)[:, :, 0] > 0
    presented = seen[:, -1, :] > 0 if m > 0 else np.zeros((n, nk), dtype=bool)
    # probe: a key shown before, uniform over the distinct keys shown (mad-lab: choice(list(keys_presented)))
    k_probe = np.argmax(np.where(presented, rng.random((n, nk)), -1.0), axis=1)
    v_probe = table[np.arange(n), k_probe]

    pairs = np.stack([keys, values], axis=2)
    pairs = np.where(noise[:, :, None], noise_tok, pairs)
    tgt_pairs = np.full((n, m, 2), IGNORE_INDEX, dtype=np.int64)
    if mq:
        tgt_pairs[:, :, 1] = np.where(repeated & ~noise, values, IGNORE_INDEX)
    tail = [k_probe, v_probe] if mq else [np.full(n, copy_prefix), k_probe, v_probe]
    tail_tgt = [np.full(n, IGNORE_INDEX)] * (len(tail) - 1) + [v_probe]
    inputs = np.concatenate([pairs.reshape(n, 2 * m), np.stack(tail, axis=1)], axis=1).astype(np.int64)
    targets = np.concatenate([tgt_pairs.reshape(n, 2 * m), np.stack(tail_tgt, axis=1)], axis=1).astype(np.int64)
    if train:
        return inputs[:, :-1], inputs[:, 1:]
    return inputs[:, :-1], targets[:, 1:]


def _motif(rng: np.random.Generator, vocab: np.ndarray, size: int) -> tuple[int, ...]:
    """An ordered draw of `size` distinct tokens (mad-lab: a random entry of the shuffled permutation table)."""
    return tuple(int(x) for x in vocab[rng.permutation(len(vocab))[:size]])


def _fuzzy_one(s: MADSetting, rng: np.random.Generator, train: bool) -> tuple[np.ndarray, np.ndarray]:
    ign, mq, big_k, big_v, seq_len = IGNORE_INDEX, s.multi_query, s.k_motif_size, s.v_motif_size, s.seq_len
    copy_prefix = s.vocab_size - 1
    pad_token = s.vocab_size - 1 if mq else s.vocab_size - 2
    usable = (s.vocab_size - 1 if mq else s.vocab_size - 2) - s.noise_vocab_size
    key_vocab = np.arange(usable // 2)
    value_vocab = np.arange(usable // 2, usable)
    noise_vocab = np.arange(usable, usable + s.noise_vocab_size)
    k_sizes = list(range(1, big_k + 1)) if train else [big_k]
    v_sizes = list(range(1, big_v + 1))

    k_probe_size = int(rng.choice(k_sizes))
    v_probe_size = int(rng.choice(v_sizes))
    k_probe = _motif(rng, key_vocab, k_probe_size)
    v_probe = _motif(rng, value_vocab, v_probe_size)
    kv_probe_size = k_probe_size + v_probe_size
    # the probe must land inside the context (mad-lab draws from seq_len - 2 * kv_probe_size and can miss it)
    probe_idx = int(rng.integers(0, max(1, seq_len - kv_probe_size - 2 * (big_k + big_v))))
    probe_added = False

    kv_map: dict[tuple[int, ...], tuple[int, ...]] = {}
    presented: set[tuple[int, ...]] = set()
    inputs: list[int] = []
    targets: list[int] = []
    while len(inputs) < seq_len - kv_probe_size - (big_k + big_v):
        k_size = int(rng.choice(k_sizes))
        v_size = int(rng.choice(v_sizes))
        if len(inputs) >= probe_idx and not probe_added:
            inputs += [*k_probe, *v_probe]
            targets += [ign] * kv_probe_size
            kv_map[k_probe] = v_probe
            presented.add(k_probe)
            probe_added = True
            continue
        if s.frac_noise > 0 and rng.random() < s.frac_noise:
            size = k_size + v_size
            inputs += [int(x) for x in rng.choice(noise_vocab, size=size)]
            targets += [ign] * size
            continue
        k = _motif(rng, key_vocab, k_size)
        if k == k_probe:
            v = v_probe
            probe_added = True
        elif k in kv_map:
            v = kv_map[k]
        else:
            v = _motif(rng, value_vocab, v_size)
            kv_map[k] = v
        inputs += [*k, *v]
        targets += [ign] * len(k)
        targets += list(v) if (k in presented and mq) else [ign] * len(v)
        presented.add(k)

    if not mq:
        inputs.append(copy_prefix)
        targets.append(ign)
    inputs += [*k_probe, *v_probe]
    targets += [ign] * k_probe_size + list(v_probe)
    n_pad = seq_len + 1 - len(inputs)
    inputs = [pad_token] * n_pad + inputs
    targets = [ign] * n_pad + targets
    x = np.asarray(inputs, dtype=np.int64)
    y = np.asarray(targets, dtype=np.int64)
    return (x[:-1], x[1:]) if train else (x[:-1], y[1:])


def _fuzzy(s: MADSetting, n: int, rng: np.random.Generator, train: bool) -> tuple[np.ndarray, np.ndarray]:
    pairs = [_fuzzy_one(s, rng, train) for _ in range(n)]
    return np.stack([p[0] for p in pairs]), np.stack([p[1] for p in pairs])


def _selective_copying(s: MADSetting, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    c = s.num_tokens_to_copy
    copy_token, blank = s.vocab_size - 1, s.vocab_size - 2
    blanks = s.seq_len - 2 * c - 1
    to_copy = rng.integers(0, s.vocab_size - 2, size=(n, c))
    # mad-lab: np.insert(to_copy, randint(0, c, blanks), blank): blank counts before each token are multinomial
    before = rng.multinomial(blanks, np.full(c, 1.0 / c), size=n)
    pos = np.arange(c)[None, :] + np.cumsum(before, axis=1)
    head = np.full((n, c + blanks), blank, dtype=np.int64)
    np.put_along_axis(head, pos, to_copy, axis=1)
    inputs = np.concatenate([head, np.full((n, 1), copy_token), np.full((n, c), blank)], axis=1)
    targets = np.concatenate([np.full((n, c + blanks + 1), IGNORE_INDEX), to_copy], axis=1)
    return inputs.astype(np.int64), targets.astype(np.int64)


def _compression(s: MADSetting, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    token = s.vocab_size - 1
    usable = s.vocab_size - 1 - s.noise_vocab_size
    body = rng.integers(0, usable, size=(n, s.seq_len - 1))
    if s.frac_noise > 0:
        noisy = rng.random(body.shape) < s.frac_noise
        body = np.where(noisy, usable + rng.integers(0, s.noise_vocab_size, size=body.shape), body)
    inputs = np.concatenate([body, np.full((n, 1), token)], axis=1).astype(np.int64)
    return inputs, inputs.copy()  # mad-lab scores every position, noise included


def memorization_kv_map(vocab_size: int, seed: int = 12345) -> dict[int, int]:
    """The fixed fact table of the memorization task (mad-lab `generate_kv_map(vocab_size - 1, seed)`): keys
    [0, (V-1)/2) paired with the shuffled values [(V-1)/2, V-1)."""
    rng = np.random.default_rng(seed)
    usable = vocab_size - 1
    keys = rng.permutation(usable // 2)
    values = usable // 2 + rng.permutation(usable - usable // 2)
    return {int(k): int(v) for k, v in zip(keys, values)}


def _memorization(s: MADSetting, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    insert = s.vocab_size - 1
    table = memorization_kv_map(s.vocab_size, s.kv_map_seed)
    lookup = np.zeros(max(table) + 1, dtype=np.int64)
    lookup[list(table)] = list(table.values())
    keys_avail = np.asarray(sorted(table), dtype=np.int64)
    m = s.seq_len // 2
    keys = keys_avail[rng.integers(0, len(keys_avail), size=(n, m))]
    inputs = np.stack([keys, np.full((n, m), insert)], axis=2).reshape(n, 2 * m)
    targets = np.stack([np.full((n, m), IGNORE_INDEX), lookup[keys]], axis=2).reshape(n, 2 * m)
    return inputs.astype(np.int64), targets.astype(np.int64)


def mad_instance(
    setting: MADSetting, num_examples: int, seed: int | np.random.Generator | None, *, train: bool
) -> tuple[np.ndarray, np.ndarray]:
    """(inputs, targets) int64 [num_examples, T] of `setting` (training or test targets, module docstring)."""
    rng = as_rng(seed)
    task = setting.task
    if task in ("in_context_recall", "noisy_in_context_recall"):
        return _in_context_recall(setting, num_examples, rng, train)
    if task == "fuzzy_in_context_recall":
        return _fuzzy(setting, num_examples, rng, train)
    if task == "selective_copying":
        return _selective_copying(setting, num_examples, rng)
    if task == "compression":
        return _compression(setting, num_examples, rng)
    return _memorization(setting, num_examples, rng)
