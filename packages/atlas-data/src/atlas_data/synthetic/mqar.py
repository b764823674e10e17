"""Multi-query associative recall (MQAR), as in Zoology (Arora et al. 2023) and DeltaNet (Yang et al. 2024).

Format of one example (T = seq_len, P = num_kv_pairs, Q = num_queries, V = vocab_size):

    positions 0 .. 2P-1      k_1 v_1 k_2 v_2 ... k_P v_P            the context: P key-value pairs
    positions 2P .. T-1      filler, with the Q queried keys at even offsets 2P + 2 g_j

    keys   are distinct, drawn from [1, V/2)      (the lower vocab half; 0 is the filler id before randomisation)
    values are distinct, drawn from [V/2, V)      (the upper half)
    targets[t] = v_j at the position t of the query k_j, IGNORE_INDEX elsewhere

The query slots g_j (0 <= g_j < (T - 2P) / 2) are drawn without replacement with probability proportional to
power_a * g^(power_a - 1), g = 1, 2, ... (Zoology's power law: with power_a = 0.01 most queries come soon after
the context; power_a = 1 is uniform). The queried keys are a random subset of size Q of the P keys (Zoology
queries every key: Q = P, the default), in random order. With `random_non_queries` every filler position holds a
uniformly random token of [0, V) (Zoology's default), so the model must find the queries by their identity.

This is Zoology's `multiquery_ar` (num_passes = 1) with a numpy Generator instead of the global numpy state and the
query count as an extra knob; with Q = P it draws the same distribution.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import numpy as np

from atlas_data.errors import ConfigError
from atlas_data.synthetic import IGNORE_INDEX, TokenDataset, as_rng


@dataclass(frozen=True)
class MQARConfig:
    """Difficulty knobs of MQAR (module docstring). Zoology's defaults: vocab 8192, T = 64..512, P = 4..64."""

    vocab_size: int = 8192
    seq_len: int = 64
    num_kv_pairs: int = 8
    num_queries: int | None = None  # None: every key is queried (Zoology)
    power_a: float = 0.01
    random_non_queries: bool = True

    def __post_init__(self) -> None:
        for name in ("vocab_size", "seq_len", "num_kv_pairs"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"mqar.{name}: expected an int >= 1, got {value!r}")
        if self.vocab_size < 4:
            raise ConfigError(f"mqar.vocab_size: expected >= 4, got {self.vocab_size}")
        half = self.vocab_size // 2
        if self.num_kv_pairs > half - 1:
            raise ConfigError(
                f"mqar.num_kv_pairs: {self.num_kv_pairs} distinct keys do not fit the key vocabulary [1, {half}) "
                f"of vocab_size {self.vocab_size}"
            )
        q = self.queries
        if not 1 <= q <= self.num_kv_pairs:
            raise ConfigError(f"mqar.num_queries: expected 1 .. num_kv_pairs={self.num_kv_pairs}, got {q}")
        if 2 * self.num_kv_pairs + 2 * q > self.seq_len:
            raise ConfigError(
                f"mqar.seq_len: {self.seq_len} is too short for {self.num_kv_pairs} pairs and {q} queries "
                f"(needs 2 * pairs + 2 * queries = {2 * self.num_kv_pairs + 2 * q})"
            )
        if not (self.power_a > 0 and np.isfinite(self.power_a)):
            raise ConfigError(f"mqar.power_a: expected a positive float, got {self.power_a!r}")

    @property
    def queries(self) -> int:
        return self.num_kv_pairs if self.num_queries is None else self.num_queries

    @property
    def label(self) -> str:
        """'len=64/pairs=8' (metric names)."""
        return f"len={self.seq_len}/pairs={self.num_kv_pairs}"


def _sample_rows(rng: np.random.Generator, rows: int, population: int, k: int, log_p: np.ndarray | None) -> np.ndarray:
    """[rows, k] distinct indices of [0, population) per row, in sampling order: uniform, or successive sampling
    without replacement with probabilities exp(log_p) (Gumbel top-k, which draws the same distribution)."""
    out = np.empty((rows, k), dtype=np.int64)
    chunk = max(1, (1 << 22) // population)
    for start in range(0, rows, chunk):
        n = min(chunk, rows - start)
        u = rng.random((n, population))
        # score: smaller = drawn earlier
        score = u if log_p is None else np.log(-np.log(np.clip(u, 1e-300, None))) - log_p
        idx = np.argpartition(score, k - 1, axis=1)[:, :k] if k < population else np.tile(np.arange(population), (n, 1))
        order = np.argsort(np.take_along_axis(score, idx, axis=1), axis=1)
        out[start : start + n] = np.take_along_axis(idx, order, axis=1)
    return out


def generate_mqar(cfg: MQARConfig, num_examples: int, seed: int | np.random.Generator | None = 0) -> TokenDataset:
    """`num_examples` MQAR sequences of `cfg` (module docstring), deterministic given `seed`."""
    if num_examples < 1:
        raise ConfigError(f"mqar.num_examples: expected >= 1, got {num_examples}")
    rng = as_rng(seed)
    n, t, p, q, v = num_examples, cfg.seq_len, cfg.num_kv_pairs, cfg.queries, cfg.vocab_size
    half = v // 2
    keys = 1 + _sample_rows(rng, n, half - 1, p, None)
    values = half + _sample_rows(rng, n, v - half, p, None)
    space = (t - 2 * p) // 2
    g = np.arange(1, space + 1, dtype=np.float64)
    log_p = np.log(cfg.power_a) + (cfg.power_a - 1.0) * np.log(g)
    log_p -= np.logaddexp.reduce(log_p)
    gaps = _sample_rows(rng, n, space, q, log_p)

    inputs = np.zeros((n, t), dtype=np.int64)
    targets = np.full((n, t), IGNORE_INDEX, dtype=np.int64)
    inputs[:, 0 : 2 * p : 2] = keys
    inputs[:, 1 : 2 * p : 2] = values
    rows = np.arange(n)[:, None]
    pos = 2 * p + 2 * gaps
    inputs[rows, pos] = keys[:, :q]
    targets[rows, pos] = values[:, :q]
    if cfg.random_non_queries:
        filler = inputs == 0
        inputs[filler] = rng.integers(0, v, size=int(filler.sum()))
    params = {**asdict(cfg), "num_queries": q, "num_examples": n}
    return TokenDataset(inputs, targets, v, "mqar", params)


def copy_from_context_accuracy(data: TokenDataset, num_kv_pairs: int) -> float:
    """Accuracy of answering every query with a value copied uniformly at random from the example's context: per
    query, the share of the P context values (positions 1, 3, ..., 2P - 1) equal to the target. With distinct values
    this is 1 / P; a model below it has not learned to find the queried key."""
    context = data.inputs[:, 1 : 2 * num_kv_pairs : 2]  # [N, P]
    rows, cols = np.nonzero(data.targets != IGNORE_INDEX)
    if rows.size == 0:
        raise ConfigError("mqar: no query positions to score")
    hits = context[rows] == data.targets[rows, cols][:, None]
    return float(hits.mean(axis=1).mean())


def longest_key_distance(cfg: MQARConfig) -> int:
    """The longest span from a key to its query that `cfg` can draw: the first key (position 0) queried in the last
    query slot."""
    return 2 * cfg.num_kv_pairs + 2 * ((cfg.seq_len - 2 * cfg.num_kv_pairs) // 2 - 1)


def key_distances(data: TokenDataset, num_kv_pairs: int) -> np.ndarray:
    """[N, T] int64: at every query position, how many tokens back its key stands in the context (position minus
    the key's position); -1 elsewhere. Keys are distinct, so each query names one context key."""
    keys = data.inputs[:, 0 : 2 * num_kv_pairs : 2]  # [N, P], key j at position 2j
    out = np.full(data.targets.shape, -1, dtype=np.int64)
    rows, cols = np.nonzero(data.targets != IGNORE_INDEX)
    match = keys[rows] == data.inputs[rows, cols][:, None]  # [Q, P]
    if not match.any(axis=1).all():
        raise ConfigError("mqar: a query whose key is not in the example's context")
    out[rows, cols] = cols - 2 * match.argmax(axis=1)
    return out


def beyond(data: TokenDataset, num_kv_pairs: int, distance: int) -> TokenDataset:
    """`data` scored only at the queries whose key stands more than `distance` tokens back (the rest unscored):
    with `distance` the longest key-to-query span of the training settings (T - 2 of the longest), the queries
    farther from their key than any the model was trained on."""
    far = key_distances(data, num_kv_pairs) > distance
    targets = np.where(far, data.targets, IGNORE_INDEX)
    return replace(data, targets=targets, params={**data.params, "scored_beyond_distance": distance})
