"""MAD generators: determinism, lengths, settings grids, and the answer of every task checked on samples."""

from __future__ import annotations

import numpy as np
import pytest

from atlas_data.errors import ConfigError
from atlas_data.synthetic import IGNORE_INDEX
from atlas_data.synthetic.mad import MAD_TASKS, MADSetting, generate_mad, mad_grid, mad_settings, memorization_kv_map


@pytest.mark.parametrize("task", MAD_TASKS)
def test_every_task_is_deterministic_and_well_formed(task):
    setting = mad_settings(task, "reduced")[0].with_changes(num_train_examples=64, num_test_examples=32)
    for split in ("train", "test"):
        a = generate_mad(setting, split, seed=5)
        b = generate_mad(setting, split, seed=5)
        np.testing.assert_array_equal(a.inputs, b.inputs)
        np.testing.assert_array_equal(a.targets, b.targets)
        assert not np.array_equal(a.inputs, generate_mad(setting, split, seed=6).inputs)
        assert len(a) == (64 if split == "train" else 32)
        a.validate()
        assert a.num_answers > 0
        expected = (
            setting.seq_len - 1
            if "in_context_recall" in task and task != "fuzzy_in_context_recall"
            else setting.seq_len
        )
        assert a.seq_len == expected
    train, test = generate_mad(setting, "train", seed=5), generate_mad(setting, "test", seed=5)
    if task != "memorization":  # memorization draws train and test keys from one fixed map, sets may overlap
        assert not np.array_equal(train.inputs[:32], test.inputs)


def test_paper_grid_is_mad_lab_configs():
    base, changes = mad_grid("in_context_recall", "paper")
    assert base == {"vocab_size": 16, "seq_len": 128, "num_train_examples": 12800}
    assert changes["num_train_examples"] == [6400, 3200, 1600, 800]
    settings = mad_settings("in_context_recall", "paper")
    assert len(settings) == 1 + 3 + 3 + 4
    assert settings[0].num_test_examples == 1280 and settings[0].multi_query
    noisy = mad_settings("noisy_in_context_recall", "paper")
    assert noisy[0].frac_noise == 0.2 and noisy[0].noise_vocab_size == 16 and len(noisy) == 14
    assert len(mad_settings("memorization", "paper")) == 6
    assert len(mad_settings("selective_copying", "paper")) == 1 + 3 + 2 + 4 + 3
    assert [s.vocab_size for s in mad_settings("compression", "reduced")] == [16, 32]
    assert len(mad_settings("compression", "baseline")) == 1
    # the paper grid's baseline alone: mad-lab's first setting, its test-set size included
    for task in ("memorization", "in_context_recall"):
        (alone,) = mad_settings(task, "paper_baseline")
        assert alone == mad_settings(task, "paper")[0]
    assert mad_settings("memorization", "paper_baseline")[0].vocab_size == 256
    overridden = mad_settings("in_context_recall", "paper", num_train_examples=100)
    assert {s.num_train_examples for s in overridden} == {100} and len(overridden) == 7


def _icr_check(data, noise_start: int | None):
    """Every scored value follows a key that was shown before with that same value."""
    for x, y in zip(data.inputs, data.targets):
        pos = np.flatnonzero(y != IGNORE_INDEX)
        assert len(pos) >= 1
        for t in pos:
            key = x[t]
            earlier = [i for i in range(0, t - 1, 2) if x[i] == key]
            assert earlier, "answered key was never shown"
            assert all(x[i + 1] == y[t] for i in earlier)
            if noise_start is not None:
                assert key < noise_start and y[t] < noise_start


def test_in_context_recall_answers_and_training_targets():
    setting = MADSetting("in_context_recall", vocab_size=16, seq_len=64, num_test_examples=100)
    test = generate_mad(setting, "test", seed=0)
    _icr_check(test, None)
    assert test.targets[:, -1].min() >= 8  # the final probe value: upper half of the vocabulary
    train = generate_mad(setting, "train", seed=0, num_examples=20)
    np.testing.assert_array_equal(train.targets[:, :-1], train.inputs[:, 1:])  # next-token targets everywhere


def test_noisy_in_context_recall_uses_the_noise_vocabulary():
    setting = MADSetting(
        "noisy_in_context_recall",
        vocab_size=32,
        noise_vocab_size=16,
        frac_noise=0.4,
        seq_len=128,
        num_test_examples=100,
    )
    test = generate_mad(setting, "test", seed=1)
    _icr_check(test, noise_start=16)
    frac = float(np.mean(test.inputs >= 16))
    assert 0.3 < frac < 0.5  # about frac_noise of the pairs are noise
    single = MADSetting("in_context_recall", vocab_size=16, seq_len=32, multi_query=False, num_test_examples=30)
    one = generate_mad(single, "test", seed=0)
    assert np.all((one.targets != IGNORE_INDEX).sum(axis=1) == 1)
    assert np.all(one.inputs[:, -2] == 15)  # copy prefix before the probe key


def test_fuzzy_recall_probe_value_follows_its_key_earlier():
    setting = MADSetting(
        "fuzzy_in_context_recall", vocab_size=16, seq_len=64, k_motif_size=3, v_motif_size=3, num_test_examples=60
    )
    test = generate_mad(setting, "test", seed=2)
    for x, y in zip(test.inputs, test.targets):
        seq = np.append(x, y[-1]).tolist()  # undo the autoregressive shift
        scored = np.flatnonzero(y != IGNORE_INDEX)
        n_v = 0
        while y[len(y) - 1 - n_v] != IGNORE_INDEX:
            n_v += 1
        value = seq[len(seq) - n_v :]
        key = seq[len(seq) - n_v - 3 : len(seq) - n_v]  # test prompts use keys of k_motif_size tokens
        assert 1 <= n_v <= 3 and len(scored) >= n_v
        motif = key + value
        body = seq[: len(seq) - len(motif)]
        assert any(body[i : i + len(motif)] == motif for i in range(len(body) - len(motif) + 1))
        assert all(t < 7 for t in key) and all(7 <= t < 15 for t in value)  # mq: 15 usable tokens, pad 15
        pad = setting.vocab_size - 1
        assert seq[0] == pad or seq[0] < 15


def test_selective_copying_answer_is_the_non_blank_tokens():
    setting = MADSetting("selective_copying", vocab_size=16, seq_len=64, num_tokens_to_copy=8)
    data = generate_mad(setting, "train", seed=3, num_examples=50)
    blank, copy = 14, 15
    for x, y in zip(data.inputs, data.targets):
        assert x[64 - 8 - 1] == copy
        head = x[: 64 - 8 - 1]
        tokens = head[head != blank]
        assert len(tokens) == 8
        np.testing.assert_array_equal(y[-8:], tokens)
        assert np.all(y[:-8] == IGNORE_INDEX) and np.all(x[-8:] == blank)
        assert head[-1] != blank  # mad-lab inserts blanks before tokens only


def test_compression_and_memorization():
    comp = generate_mad(MADSetting("compression", vocab_size=16, seq_len=16), "test", seed=0, num_examples=10)
    np.testing.assert_array_equal(comp.inputs, comp.targets)
    assert np.all(comp.inputs[:, -1] == 15) and comp.inputs[:, :-1].max() < 15

    setting = MADSetting("memorization", vocab_size=64, seq_len=32, num_train_examples=40)
    table = memorization_kv_map(64, setting.kv_map_seed)
    assert len(table) == 31 and min(table.values()) >= 31 and max(table.values()) < 63
    assert table == memorization_kv_map(64, setting.kv_map_seed) != memorization_kv_map(64, 1)
    for split in ("train", "test"):
        data = generate_mad(setting, split, seed=4)
        assert np.all(data.inputs[:, 1::2] == 63)  # insert token
        keys, values = data.inputs[:, 0::2], data.targets[:, 1::2]
        assert np.all(data.targets[:, 0::2] == IGNORE_INDEX)
        assert all(table[int(k)] == int(v) for k, v in zip(keys.ravel(), values.ravel()))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"task": "nope"},
        {"task": "in_context_recall", "frac_noise": 0.2},  # noise without a noise vocabulary
        {"task": "in_context_recall", "seq_len": 63},
        {"task": "selective_copying", "seq_len": 16, "num_tokens_to_copy": 8},
        {"task": "fuzzy_in_context_recall", "vocab_size": 6, "k_motif_size": 3},
        {"task": "compression", "vocab_size": 16, "frac_noise": 1.0, "noise_vocab_size": 2},
    ],
)
def test_invalid_settings_are_rejected(kwargs):
    with pytest.raises(ConfigError):
        MADSetting(**kwargs)


def test_grid_and_split_errors():
    with pytest.raises(ConfigError):
        mad_settings("compression", "huge")
    with pytest.raises(ConfigError):
        generate_mad(MADSetting("compression"), "validation")


def test_majority_accuracy_is_the_share_of_the_most_frequent_scored_target():
    from atlas_data.synthetic import TokenDataset

    x = IGNORE_INDEX
    targets = np.array([[3, x, 3, 1], [x, 2, 3, x]])  # scored: 3, 3, 1, 2, 3 -> 3 is 3 of 5
    data = TokenDataset(np.zeros_like(targets), targets, 4, "toy")
    assert data.majority_accuracy() == 3 / 5
    with pytest.raises(ValueError, match="toy: no scored position"):
        TokenDataset(np.zeros_like(targets), np.full_like(targets, x), 4, "toy").majority_accuracy()
