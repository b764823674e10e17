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
from atlas_data.synthetic import TokenDataset
from atlas_data.synthetic.mad_instances import mad_instance, memorization_kv_map

# Callers import the builders' entry points from here (their home before `mad_instances` was split off).
__all__ = [
    "GRIDS",
    "MAD_TASKS",
    "SPLITS",
    "MADSetting",
    "generate_mad",
    "mad_grid",
    "mad_instance",
    "mad_settings",
    "memorization_kv_map",
]

MAD_TASKS = (
    "compression",
    "in_context_recall",
    "noisy_in_context_recall",
    "fuzzy_in_context_recall",
    "selective_copying",
    "memorization",
)
SPLITS = ("train", "test")
GRIDS = ("baseline", "reduced", "paper", "paper_baseline")


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
    """(baseline, changes) of `task` in `grid` ('paper' = mad-lab's configs, 'paper_baseline' = their baseline
    setting alone, 'reduced'/'baseline' = CPU sizes)."""
    if task not in MAD_TASKS:
        raise ConfigError(f"mad.task: expected one of {', '.join(MAD_TASKS)}, got {task!r}")
    if grid not in GRIDS:
        raise ConfigError(f"mad.grid: expected one of {', '.join(GRIDS)}, got {grid!r}")
    base, changes = (_PAPER if grid.startswith("paper") else _REDUCED)[task]
    return dict(base), ({} if grid.endswith("baseline") else {k: list(v) for k, v in changes.items()})


def mad_settings(
    task: str, grid: str = "paper", *, num_test_examples: int | None = None, **overrides: Any
) -> list[MADSetting]:
    """The difficulty settings of `task`: the baseline, then each change applied alone (mad-lab's
    `make_benchmark_mad_configs`). `overrides` replace fields of every setting (e.g. num_train_examples)."""
    base, changes = mad_grid(task, grid)
    tests = {"num_test_examples": num_test_examples} if num_test_examples else {}
    if not grid.startswith("paper") and not tests:
        tests = {"num_test_examples": 256}
    baseline = MADSetting(task=task, **{**base, **tests, **overrides})
    out = [baseline]
    for key, values in changes.items():
        if key in overrides:
            continue
        for value in values:
            out.append(baseline.with_changes(**{key: value}))
    return out


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
