"""MQAR generator: determinism, format, and that every answer is the value paired with its key in the context."""

from __future__ import annotations

import numpy as np
import pytest

from atlas_data.errors import ConfigError
from atlas_data.synthetic import IGNORE_INDEX, TokenDataset
from atlas_data.synthetic.mqar import MQARConfig, generate_mqar


def test_deterministic_given_seed():
    cfg = MQARConfig(vocab_size=128, seq_len=64, num_kv_pairs=8)
    a, b = generate_mqar(cfg, 50, seed=3), generate_mqar(cfg, 50, seed=3)
    c = generate_mqar(cfg, 50, seed=4)
    np.testing.assert_array_equal(a.inputs, b.inputs)
    np.testing.assert_array_equal(a.targets, b.targets)
    assert not np.array_equal(a.inputs, c.inputs)
    rng_a = generate_mqar(cfg, 5, seed=np.random.default_rng(7))
    rng_b = generate_mqar(cfg, 5, seed=np.random.default_rng(7))
    np.testing.assert_array_equal(rng_a.inputs, rng_b.inputs)


@pytest.mark.parametrize(
    ("vocab", "seq_len", "pairs", "queries"), [(64, 32, 4, None), (256, 64, 8, 3), (32, 16, 4, None)]
)
def test_answers_are_the_values_of_the_queried_keys(vocab, seq_len, pairs, queries):
    cfg = MQARConfig(vocab_size=vocab, seq_len=seq_len, num_kv_pairs=pairs, num_queries=queries)
    data = generate_mqar(cfg, 200, seed=0)
    assert isinstance(data, TokenDataset)
    assert data.inputs.shape == data.targets.shape == (200, seq_len)
    assert data.inputs.dtype == data.targets.dtype == np.int64
    data.validate()
    half = vocab // 2
    q = pairs if queries is None else queries
    for x, y in zip(data.inputs, data.targets):
        keys, values = x[0 : 2 * pairs : 2], x[1 : 2 * pairs : 2]
        assert len(set(keys.tolist())) == pairs and len(set(values.tolist())) == pairs
        assert keys.min() >= 1 and keys.max() < half  # keys: lower half, 0 excluded
        assert values.min() >= half and values.max() < vocab  # values: upper half
        pos = np.flatnonzero(y != IGNORE_INDEX)
        assert len(pos) == q
        assert pos.min() >= 2 * pairs and np.all((pos - 2 * pairs) % 2 == 0)  # query slots after the context
        table = dict(zip(keys.tolist(), values.tolist()))
        queried = x[pos].tolist()
        assert len(set(queried)) == q
        assert [table[k] for k in queried] == y[pos].tolist()


def test_every_key_is_queried_by_default_and_fillers_are_random_tokens():
    cfg = MQARConfig(vocab_size=64, seq_len=48, num_kv_pairs=6)
    data = generate_mqar(cfg, 100, seed=1)
    for x, y in zip(data.inputs, data.targets):
        pos = np.flatnonzero(y != IGNORE_INDEX)
        assert sorted(x[pos].tolist()) == sorted(x[0:12:2].tolist())
    assert len(np.unique(data.inputs[:, 12:])) > 40  # random non-query tokens from the whole vocabulary
    plain = generate_mqar(MQARConfig(vocab_size=64, seq_len=48, num_kv_pairs=6, random_non_queries=False), 20, seed=1)
    region = plain.inputs[:, 12:]
    assert set(np.unique(region[plain.targets[:, 12:] == IGNORE_INDEX]).tolist()) == {0}


def test_power_law_puts_queries_early():
    def mean_gap(power_a: float) -> float:
        cfg = MQARConfig(vocab_size=128, seq_len=128, num_kv_pairs=4, power_a=power_a)
        data = generate_mqar(cfg, 400, seed=2)
        return float(np.mean(np.nonzero(data.targets != IGNORE_INDEX)[1]))

    assert mean_gap(0.01) < mean_gap(1.0) - 10


@pytest.mark.parametrize(
    "kwargs",
    [
        {"vocab_size": 16, "num_kv_pairs": 8, "seq_len": 64},  # 8 distinct keys do not fit [1, 8)
        {"vocab_size": 64, "num_kv_pairs": 8, "seq_len": 30},  # 2P + 2Q > T
        {"vocab_size": 64, "num_kv_pairs": 4, "seq_len": 32, "num_queries": 5},
        {"vocab_size": 64, "num_kv_pairs": 4, "seq_len": 32, "power_a": 0.0},
        {"vocab_size": 2},
    ],
)
def test_invalid_settings_are_rejected(kwargs):
    with pytest.raises(ConfigError):
        MQARConfig(**kwargs)
    with pytest.raises(ConfigError):
        generate_mqar(MQARConfig(vocab_size=64, seq_len=32, num_kv_pairs=4), 0)


def test_tight_setting_fills_every_query_slot_and_subset_keeps_format():
    cfg = MQARConfig(vocab_size=64, seq_len=32, num_kv_pairs=8)  # 16 context + 16 query tokens
    data = generate_mqar(cfg, 10, seed=0)
    assert np.all(data.targets[:, 16::2] != IGNORE_INDEX)
    sub = data.subset(slice(0, 3))
    assert len(sub) == 3 and sub.seq_len == 32 and sub.num_answers == 24
    assert data.params["num_queries"] == 8 and cfg.label == "len=32/pairs=8"


def test_key_distances_and_the_queries_beyond_the_trained_span():
    """Each query's distance back to its key, checked by a plain loop; `beyond` keeps exactly the far queries and
    nothing else of the example; the longest span a setting can draw is reached and never exceeded."""
    from atlas_data.synthetic.mqar import beyond, key_distances, longest_key_distance

    cfg = MQARConfig(vocab_size=64, seq_len=33, num_kv_pairs=4, power_a=1.0)
    data = generate_mqar(cfg, 300, seed=5)
    dist = key_distances(data, 4)
    for x, y, d in zip(data.inputs, data.targets, dist):
        for t in range(cfg.seq_len):
            if y[t] == IGNORE_INDEX:
                assert d[t] == -1
            else:
                (j,) = [i for i in range(4) if x[2 * i] == x[t]]
                assert d[t] == t - 2 * j and x[2 * j + 1] == y[t]
    longest = longest_key_distance(cfg)
    assert dist.max() == longest == 30  # first key (0) queried in the last slot: 2P + 2 * (12 - 1)
    far = beyond(data, 4, 20)
    assert np.array_equal(far.inputs, data.inputs)
    kept = far.targets != IGNORE_INDEX
    assert np.array_equal(kept, dist > 20) and np.array_equal(far.targets[kept], data.targets[kept])
    assert 0 < kept.sum() < (data.targets != IGNORE_INDEX).sum() and far.params["scored_beyond_distance"] == 20
    bad = generate_mqar(cfg, 1, seed=0)
    bad.inputs[0, 0 : 2 * 4 : 2] = 63  # no key left that the queries name
    with pytest.raises(ConfigError, match="a query whose key is not in the example's context"):
        key_distances(bad, 4)
