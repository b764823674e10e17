"""The six MAD tasks (Poli et al. 2024, "Mechanistic Design and Scaling of Hybrid Architectures"; code: mad-lab).

Each task follows `mad/data/instances.py` of athms/mad-lab (read for this port), with a numpy Generator for every
draw (mad-lab's selective copying draws from the global numpy state) and the fixes listed under "Deviations".
Token ids are task-local; the special tokens sit at the top of the vocabulary.

in_context_recall (multi_query=True, as every MAD config):
    V = vocab_size - noise_vocab_size; keys [0, V/2), values [V/2, V). T/2 - 1 motifs "k v", each either a noise
    pair (probability frac_noise, two tokens of the noise vocab [V, V + noise)) or a key with its value (one value
    per key and sequence), then a final "k* v*" with k* a key shown before. Length T - 1 after the shift below.
    Test targets: the value after every key that was shown before (and v*). Training targets: the next token at
    every position (mad-lab trains ICR-type tasks as plain language modelling and scores only the answers).
    Without multi_query a copy-prefix token (vocab_size - 1) precedes the final key and only v* is scored.
noisy_in_context_recall: in_context_recall with frac_noise > 0 (MAD: vocab 32 with 16 noise tokens, 20 % noise).
fuzzy_in_context_recall:
    keys are 1..k_motif_size tokens (an ordered draw without repetition from the key half), values 1..v_motif_size
    tokens from the value half; a probe pair (k*, v*) is placed inside the context and repeated at the end, the
    sequence is left-padded with a pad token (vocab_size - 2) to T. Test prompts use keys of k_motif_size tokens
    only. Scored as in_context_recall, one target per value token.
selective_copying:
    num_tokens_to_copy tokens of [0, vocab_size - 2) scattered among blanks (vocab_size - 2), a copy token
    (vocab_size - 1), then blanks during which the model outputs the tokens in order. Length T. Training and test
    score the same positions (the copied tokens).
compression:
    T - 1 random tokens of [0, vocab_size - 1) and a compression token (vocab_size - 1); targets = inputs: the model
    must reconstruct the whole sequence from its state at the last position (mad-lab's auto-encoder backbone: the
    last hidden state plus a sin-cos position embedding, through a 2-layer MLP decoder). Not a next-token task:
    `targets[t]` is the token at position t, decoded from the last position.
memorization:
    a fixed key->value map (keys [0, (V-1)/2), values [(V-1)/2, V-1), drawn once from `kv_map_seed`) that every
    sequence shares, so it must be stored in the weights: T/2 pairs "k insert" (insert token V-1) with the value as
    the target at the insert position. Training and test sequences are drawn from the same map.

Settings (`MADSetting`) and difficulty grids (`mad_settings`): mad-lab's `configs/tasks/*.yml` give a baseline per
task and "changes" varied one at a time (`grid="paper"`); the MAD score of a task is the mean over these settings of
the best test accuracy of the lr x weight-decay sweep. `grid="reduced"` is a CPU-sized version of the same idea
(shorter sequences, fewer examples, one harder variant per task); `grid="baseline"` keeps the reduced baseline only.

Deviations from mad-lab (all small, all for well-posedness): fuzzy recall always places its probe key in the context
(mad-lab can miss it for probe indices near the end of the sequence); in_context_recall keeps at least one key-value
pair (mad-lab can draw all-noise and fail); motifs are drawn directly instead of from a shuffled permutation table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from atlas_data.errors import ConfigError
from atlas_data.synthetic import IGNORE_INDEX, TokenDataset, as_rng

MAD_TASKS = (
    "compression",
    "in_context_recall",
    "noisy_in_context_recall",
    "fuzzy_in_context_recall",
    "selective_copying",
    "memorization",
)
SPLITS = ("train", "test")
GRIDS = ("baseline", "reduced", "paper")


@dataclass(frozen=True)
class MADSetting:
    """One MAD task at one difficulty (mad-lab `MADConfig` task fields)."""

    task: str
    vocab_size: int = 16
    seq_len: int = 128
    num_train_examples: int = 12_800
    num_test_examples: int = 1_280
    frac_noise: float = 0.0
    noise_vocab_size: int = 0
    num_tokens_to_copy: int = 0
    k_motif_size: int = 1
    v_motif_size: int = 1
    multi_query: bool = True
    kv_map_seed: int = 12345

    def __post_init__(self) -> None:
        if self.task not in MAD_TASKS:
            raise ConfigError(f"mad.task: expected one of {', '.join(MAD_TASKS)}, got {self.task!r}")
        for name in ("vocab_size", "seq_len", "num_train_examples", "num_test_examples"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"mad.{name}: expected an int >= 1, got {value!r}")
        if not 0.0 <= self.frac_noise < 1.0:
            raise ConfigError(f"mad.frac_noise: expected 0 <= frac_noise < 1, got {self.frac_noise}")
        if self.frac_noise > 0 and self.noise_vocab_size < 1:
            raise ConfigError("mad.noise_vocab_size: must be >= 1 when frac_noise > 0")
        self._check_task()

    def _check_task(self) -> None:
        t, v = self.task, self.vocab_size
        if t in ("in_context_recall", "noisy_in_context_recall"):
            usable = v - (0 if self.multi_query else 1) - self.noise_vocab_size
            if usable < 2:
                raise ConfigError(f"mad.vocab_size: {v} leaves {usable} key/value tokens for {t} (need >= 2)")
            if self.seq_len < 4 or self.seq_len % 2:
                raise ConfigError(f"mad.seq_len: {t} needs an even seq_len >= 4, got {self.seq_len}")
        elif t == "fuzzy_in_context_recall":
            usable = v - (1 if self.multi_query else 2) - self.noise_vocab_size
            if usable // 2 < max(self.k_motif_size, 1) or usable - usable // 2 < self.v_motif_size:
                raise ConfigError(f"mad.vocab_size: {v} is too small for motifs of {self.k_motif_size} tokens")
            if self.seq_len < 4 * (self.k_motif_size + self.v_motif_size) + 2:
                raise ConfigError(f"mad.seq_len: {self.seq_len} is too short for {t} with these motif sizes")
        elif t == "selective_copying":
            if self.num_tokens_to_copy < 1 or v < 3:
                raise ConfigError("mad: selective_copying needs num_tokens_to_copy >= 1 and vocab_size >= 3")
            if self.seq_len <= 2 * self.num_tokens_to_copy + 1:
                raise ConfigError(
                    f"mad.seq_len: selective_copying needs seq_len > 2 * num_tokens_to_copy + 1, got {self.seq_len}"
                )
        elif t == "compression":
            if v - 1 - self.noise_vocab_size < 1 or self.seq_len < 2:
                raise ConfigError("mad: compression needs vocab_size >= 2 and seq_len >= 2")
        elif t == "memorization" and (v < 5 or self.seq_len < 2 or self.seq_len % 2):
            raise ConfigError("mad: memorization needs vocab_size >= 5 and an even seq_len >= 2")

    def with_changes(self, **changes: Any) -> MADSetting:
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def label(self) -> str:
        """Short name of the difficulty knobs: 'vocab=16/len=128/train=12800[/noise=0.2][/copy=16]'."""
        parts = [f"vocab={self.vocab_size}", f"len={self.seq_len}", f"train={self.num_train_examples}"]
        if self.frac_noise:
            parts.append(f"noise={self.frac_noise:g}")
        if self.task == "selective_copying":
            parts.append(f"copy={self.num_tokens_to_copy}")
        return "/".join(parts)


# mad-lab configs/tasks/*.yml: the baseline of each task and the knobs varied one at a time.
_PAPER: dict[str, tuple[dict[str, Any], dict[str, list[Any]]]] = {
    "in_context_recall": (
        {"vocab_size": 16, "seq_len": 128, "num_train_examples": 12800},
        {"vocab_size": [32, 64, 128], "seq_len": [256, 512, 1024], "num_train_examples": [6400, 3200, 1600, 800]},
    ),
    "noisy_in_context_recall": (
        {"vocab_size": 32, "noise_vocab_size": 16, "seq_len": 128, "num_train_examples": 12800, "frac_noise": 0.2},
        {
            "vocab_size": [48, 80, 144],
            "seq_len": [256, 512, 1024],
            "num_train_examples": [6400, 3200, 1600, 800],
            "frac_noise": [0.4, 0.6, 0.8],
        },
    ),
    "fuzzy_in_context_recall": (
        {"vocab_size": 16, "seq_len": 128, "num_train_examples": 12800, "k_motif_size": 3, "v_motif_size": 3},
        {"vocab_size": [32, 64, 128], "seq_len": [256, 512, 1024], "num_train_examples": [6400, 3200, 1600, 800]},
    ),
    "selective_copying": (
        {"vocab_size": 16, "seq_len": 256, "num_tokens_to_copy": 16, "num_train_examples": 12800},
        {
            "vocab_size": [32, 64, 128],
            "seq_len": [512, 1024],
            "num_train_examples": [6400, 3200, 1600, 800],
            "num_tokens_to_copy": [32, 64, 96],
        },
    ),
    "compression": (
        {"vocab_size": 16, "seq_len": 32, "num_train_examples": 12800},
        {"vocab_size": [32, 64, 128], "seq_len": [64, 128, 256], "num_train_examples": [6400, 3200, 1600, 800]},
    ),
    "memorization": (
        {"vocab_size": 256, "seq_len": 32, "num_train_examples": 256},
        {"vocab_size": [512, 1024, 2048, 4096, 8192]},
    ),
}

# CPU-sized grid: the same baselines at a quarter to half of the sequence length and a tenth of the examples, plus
# one harder variant per task (the knob the task is most about). Chosen for this reproduction, not from mad-lab.
_REDUCED: dict[str, tuple[dict[str, Any], dict[str, list[Any]]]] = {
    "in_context_recall": ({"vocab_size": 16, "seq_len": 64, "num_train_examples": 1280}, {"vocab_size": [32]}),
    "noisy_in_context_recall": (
        {"vocab_size": 32, "noise_vocab_size": 16, "seq_len": 64, "num_train_examples": 1280, "frac_noise": 0.2},
        {"frac_noise": [0.4]},
    ),
    "fuzzy_in_context_recall": (
        {"vocab_size": 16, "seq_len": 64, "num_train_examples": 1280, "k_motif_size": 3, "v_motif_size": 3},
        {"vocab_size": [32]},
    ),
    "selective_copying": (
        {"vocab_size": 16, "seq_len": 64, "num_tokens_to_copy": 8, "num_train_examples": 1280},
        {"num_tokens_to_copy": [16]},
    ),
    "compression": ({"vocab_size": 16, "seq_len": 16, "num_train_examples": 1280}, {"vocab_size": [32]}),
    "memorization": ({"vocab_size": 64, "seq_len": 32, "num_train_examples": 256}, {"vocab_size": [128]}),
}


def mad_grid(task: str, grid: str = "paper") -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """(baseline, changes) of `task` in `grid` ('paper' = mad-lab's configs, 'reduced'/'baseline' = CPU sizes)."""
    if task not in MAD_TASKS:
        raise ConfigError(f"mad.task: expected one of {', '.join(MAD_TASKS)}, got {task!r}")
    if grid not in GRIDS:
        raise ConfigError(f"mad.grid: expected one of {', '.join(GRIDS)}, got {grid!r}")
    base, changes = (_PAPER if grid == "paper" else _REDUCED)[task]
    return dict(base), ({} if grid == "baseline" else {k: list(v) for k, v in changes.items()})


def mad_settings(
    task: str, grid: str = "paper", *, num_test_examples: int | None = None, **overrides: Any
) -> list[MADSetting]:
    """The difficulty settings of `task`: the baseline, then each change applied alone (mad-lab's
    `make_benchmark_mad_configs`). `overrides` replace fields of every setting (e.g. num_train_examples)."""
    base, changes = mad_grid(task, grid)
    tests = {"num_test_examples": num_test_examples} if num_test_examples else {}
    if grid != "paper" and not tests:
        tests = {"num_test_examples": 256}
    baseline = MADSetting(task=task, **{**base, **tests, **overrides})
    out = [baseline]
    for key, values in changes.items():
        if key in overrides:
            continue
        for value in values:
            out.append(baseline.with_changes(**{key: value}))
    return out


# ---------------------------------------------------------------------------------------------- instance builders


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


def generate_mad(
    setting: MADSetting, split: str = "train", seed: int = 0, num_examples: int | None = None
) -> TokenDataset:
    """The train or test set of `setting` (num_train_examples / num_test_examples unless `num_examples`).

    Train and test sets use independent streams of `seed` (test = seed + 1_000_003), as mad-lab generates its test
    set separately; the memorization facts come from `setting.kv_map_seed` in both.
    """
    if split not in SPLITS:
        raise ConfigError(f"mad.split: expected one of {', '.join(SPLITS)}, got {split!r}")
    train = split == "train"
    n = num_examples or (setting.num_train_examples if train else setting.num_test_examples)
    rng = np.random.default_rng([seed, 0 if train else 1_000_003, MAD_TASKS.index(setting.task)])
    inputs, targets = mad_instance(setting, n, rng, train=train)
    params: Mapping[str, Any] = {**setting.to_dict(), "split": split, "num_examples": n}
    return TokenDataset(inputs, targets, setting.vocab_size, setting.task, params)
