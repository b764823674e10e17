"""Learnability streams: determinism, shapes, and the structure of each target function."""

from __future__ import annotations

import numpy as np
import pytest

from atlas_data.errors import ConfigError
from atlas_data.synthetic.learnability import (
    LEARNABILITY_SETTINGS,
    LearnabilityConfig,
    _causal_attention,
    generate_stream,
    setting_name,
)

CFG = LearnabilityConfig(dim=16, seq_len=96, rank=3, window=8)


@pytest.mark.parametrize("setting", range(1, 6))
def test_streams_are_deterministic_float32(setting):
    i, o = generate_stream(setting, CFG, seed=1)
    i2, o2 = generate_stream(setting, CFG, seed=1)
    assert i.shape == o.shape == (96, 16) and i.dtype == o.dtype == np.float32
    np.testing.assert_array_equal(i, i2)
    np.testing.assert_array_equal(o, o2)
    assert not np.array_equal(o, generate_stream(setting, CFG, seed=2)[1])
    assert np.all(np.isfinite(o)) and np.linalg.norm(o, axis=1).min() > 0


def test_low_rank_outputs_span_rank_k():
    i, o = generate_stream("low_rank", CFG, seed=0)
    s = np.linalg.svd(o.astype(np.float64), compute_uv=False)
    assert np.sum(s > 1e-4 * s[0]) == 3
    w, *_ = np.linalg.lstsq(i.astype(np.float64), o.astype(np.float64), rcond=None)  # o = W^T i exactly
    np.testing.assert_allclose(i @ w, o, atol=1e-4)


def test_mlp_is_a_nonlinear_function_of_the_input():
    i, o = generate_stream("mlp", CFG, seed=0)
    w, *_ = np.linalg.lstsq(i.astype(np.float64), o.astype(np.float64), rcond=None)
    residual = np.linalg.norm(i @ w - o) / np.linalg.norm(o)
    assert residual > 0.05  # not linear


def test_attention_settings_share_their_attention_and_target():
    i3, o3 = generate_stream(3, CFG, seed=4)
    i4, o4 = generate_stream(4, CFG, seed=4)
    np.testing.assert_allclose(o3, o4)  # same attention + MLP target
    assert not np.allclose(i3, i4)  # 3 reads the raw inputs, 4 the attention outputs
    full = LearnabilityConfig(dim=16, seq_len=96, rank=3, window=96)
    _, o5_full = generate_stream(5, full, seed=4)
    np.testing.assert_allclose(o5_full, o3, rtol=1e-5, atol=1e-6)  # a window over everything is global attention
    raw = LearnabilityConfig(dim=16, seq_len=96, rank=3, window=8, standardize=False)
    _, o3_raw = generate_stream(3, raw, seed=4)
    _, o5_raw = generate_stream(5, raw, seed=4)
    np.testing.assert_allclose(o5_raw[:8], o3_raw[:8], rtol=1e-5, atol=1e-6)  # identical inside the first window
    assert not np.allclose(o5_raw[8:], o3_raw[8:])
    ratio = o3 / o3_raw  # standardisation is one scalar per stream side
    np.testing.assert_allclose(ratio, ratio.flat[0], rtol=1e-4)
    i1, o1 = generate_stream(1, CFG, seed=0)
    assert np.mean(i1**2) == pytest.approx(1.0, rel=1e-4) and np.mean(o1**2) == pytest.approx(1.0, rel=1e-4)


def test_attention_is_causal_and_windowed():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((300, 8)) for _ in range(3))
    out = _causal_attention(q, k, v, None)
    k2, v2 = k.copy(), v.copy()
    k2[200:] += 5.0
    v2[200:] -= 3.0
    np.testing.assert_allclose(_causal_attention(q, k2, v2, None)[:200], out[:200])
    np.testing.assert_allclose(out[0], v[0])
    win = _causal_attention(q, k, v, 4)
    k3, v3 = k.copy(), v.copy()
    k3[:100] = 0.0
    v3[:100] = 9.0
    np.testing.assert_allclose(_causal_attention(q, k3, v3, 4)[104:], win[104:])


def test_setting_names_and_errors():
    assert [setting_name(i) for i in range(1, 6)] == list(LEARNABILITY_SETTINGS)
    assert setting_name("3") == "attention_mlp" and setting_name("swa_mlp") == "swa_mlp"
    for bad in (0, 6, "attention"):
        with pytest.raises(ConfigError):
            setting_name(bad)
    with pytest.raises(ConfigError):
        LearnabilityConfig(dim=4, rank=8)
    with pytest.raises(ConfigError):
        LearnabilityConfig(seq_len=0)


ORTHO = LearnabilityConfig(dim=16, seq_len=96, rank=3, window=8, generator="orthogonal")


@pytest.mark.parametrize("setting", range(1, 6))
def test_the_second_generator_draws_other_streams_with_the_same_definitions(setting):
    i, o = generate_stream(setting, ORTHO, seed=1)
    i2, o2 = generate_stream(setting, ORTHO, seed=1)
    np.testing.assert_array_equal(o, o2)  # deterministic in the seed
    assert i.shape == o.shape == (96, 16) and i.dtype == np.float32 and np.all(np.isfinite(o))
    assert not np.allclose(o, generate_stream(setting, CFG, seed=1)[1])  # another stream family
    if setting in (1, 2, 3, 5):  # raw inputs on a sphere: every row has the same norm (after standardisation)
        norms = np.linalg.norm(i.astype(np.float64), axis=1)
        np.testing.assert_allclose(norms, norms[0], rtol=1e-5)


def test_the_second_generator_keeps_the_targets_structure():
    i, o = generate_stream("low_rank", ORTHO, seed=0)
    s = np.linalg.svd(o.astype(np.float64), compute_uv=False)
    assert np.sum(s > 1e-4 * s[0]) == 3  # still rank k
    w, *_ = np.linalg.lstsq(i.astype(np.float64), o.astype(np.float64), rcond=None)
    np.testing.assert_allclose(i @ w, o, atol=1e-4)  # still linear in the input
    sv = np.linalg.svd(w, compute_uv=False)[:3]  # the map's nonzero singular values are equal (orthonormal factors)
    np.testing.assert_allclose(sv, sv[0], rtol=1e-3)
    rng = np.random.default_rng(0)
    from atlas_data.synthetic.learnability import _haar

    q = _haar(rng, 16, 16)
    np.testing.assert_allclose(q.T @ q, np.eye(16), atol=1e-12)


def test_an_unknown_generator_is_refused_by_name():
    with pytest.raises(
        ConfigError, match=r"learnability\.generator: expected one of gaussian, orthogonal, got 'uniform'"
    ):
        LearnabilityConfig(generator="uniform")
