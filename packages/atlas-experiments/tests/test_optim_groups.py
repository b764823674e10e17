"""Which parameters weight decay reaches (by name, for every preset), and that `atlas train` and the synthetic-task
trainer share one optimizer builder and one schedule."""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn

import atlas_model
from atlas_data.synthetic.mqar import MQARConfig, generate_mqar
from atlas_experiments.evaluation import synthetic_train as st
from atlas_experiments.evaluation.mad import CompressionModel
from atlas_experiments.train import TrainConfig
from atlas_experiments.train import optim as optim_mod
from atlas_experiments.train.config import OptimConfig

TINIEST = min(atlas_model.SIZES, key=lambda s: atlas_model.SIZE_TABLE[s].hidden_size)

# Written from the names of the backbone's projections, not from the builder's rule, so that the two can disagree.
DECAYED = re.compile(
    r"(^|\.)(embed_tokens|lm_head|[qkvog]_proj|gate_proj|up_proj|down_proj|gates\.down|gates\.up|read_q|read_out)"
    r"\.weight$"
)
NEVER_DECAYED = {
    "gate bias": re.compile(r"(^|\.)gates\.bias$"),
    "norm affine": re.compile(r"(norm(s\.\d+)?\.weight|\.ln_weight|\.ln_bias)$"),
    "poly coefficients": re.compile(r"\.feature_coeffs$"),
    "conv weight": re.compile(r"(\.convs\.[qkv]|\.read_conv)\.weight$"),
    "W_0": re.compile(r"\.memory\.W\d?$"),
    "exp init keys / values": re.compile(r"\.memory\.(init_keys|init_values__\w+)$"),
    "temperature": re.compile(r"temperature"),
    "persistent tokens": re.compile(r"\.persistent$"),
}


pytestmark = pytest.mark.usefixtures("one_thread")


def _model(preset: str, **overrides) -> nn.Module:
    torch.manual_seed(0)
    cfg = atlas_model.AtlasConfig.from_preset(preset, size=TINIEST, num_hidden_layers=1, **overrides)
    return atlas_model.AtlasForCausalLM(cfg)


def _names(named) -> set[str]:
    return {n for n, _ in named}


def _group_ids(optimizer: torch.optim.Optimizer) -> list[tuple[float, list[int]]]:
    return [(g["weight_decay"], [id(p) for p in g["params"]]) for g in optimizer.param_groups]


def _check_groups(model: nn.Module, seen: dict[str, int]) -> None:
    decay, keep = optim_mod.decay_split(model)
    decayed, kept = _names(decay), _names(keep)
    names = {n for n, p in model.named_parameters()}
    assert decayed | kept == names and not decayed & kept
    for what, pattern in NEVER_DECAYED.items():
        hits = {n for n in names if pattern.search(n)}
        assert not hits & decayed, f"{what} decayed: {sorted(hits & decayed)}"
        seen[what] = seen.get(what, 0) + len(hits)
    for name in decayed:
        owner = model.get_submodule(name.rsplit(".", 1)[0])
        assert isinstance(owner, nn.Linear | nn.Embedding) and name.endswith(".weight"), name
    assert decayed == {n for n in names if DECAYED.search(n)}

    opt = optim_mod.build_optimizer(model, OptimConfig(weight_decay=0.1))
    (wd_on, on), (wd_off, off) = _group_ids(opt)
    assert (wd_on, wd_off) == (0.1, 0.0)
    ids = on + off
    assert len(ids) == len(set(ids)) == len({id(p) for p in model.parameters()})  # each parameter exactly once
    assert on == [id(p) for _, p in decay] and off == [id(p) for _, p in keep]


def test_every_preset_decays_only_backbone_projections_and_embeddings():
    seen: dict[str, int] = {}
    for preset in atlas_model.PRESETS:
        _check_groups(_model(preset), seen)
    _check_groups(_model("atlas_mac", mac_persistent_tokens=2), seen)
    # every category this test guards exists in some preset (else the test could pass vacuously)
    assert all(seen[k] for k in NEVER_DECAYED if k != "temperature"), seen


def test_tied_embedding_is_one_decayed_parameter():
    model = _model("transformer_pp", tie_word_embeddings=True)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    decay, _ = optim_mod.decay_split(model)
    assert [n for n, _ in decay].count("model.embed_tokens.weight") == 1
    assert "lm_head.weight" not in _names(decay)
    assert sum(p is model.lm_head.weight for _, p in decay) == 1


def test_frozen_parameters_are_left_out_and_an_all_frozen_model_is_refused():
    model = _model("gated_deltanet")
    model.model.embed_tokens.weight.requires_grad_(False)
    decay, keep = optim_mod.decay_split(model)
    assert "model.embed_tokens.weight" not in _names(decay) | _names(keep)
    with pytest.raises(ValueError, match="no trainable parameters"):
        optim_mod.build_optimizer(model.requires_grad_(False), OptimConfig())


def test_mad_compression_head_decays_linear_weights_not_biases_or_norms():
    cfg = atlas_model.AtlasConfig.from_preset("atlas", size=TINIEST, num_hidden_layers=1, vocab_size=16)
    model = CompressionModel(cfg, seq_len=8)
    decay, keep = optim_mod.decay_split(model)
    decayed, kept = _names(decay), _names(keep)
    assert {"decoder.1.weight", "decoder.4.weight", "unembed.1.weight"} <= decayed
    assert {"decoder.1.bias", "decoder.0.weight", "unembed.0.weight", "unembed.1.bias"} <= kept
    assert "backbone.layers.0.mixers.0.gates.bias" in kept and "backbone.embed_tokens.weight" in decayed


@pytest.mark.parametrize("wd", [0.0, 0.1])  # MAD's protocol grid over weight decay
def test_synthetic_trainer_builds_the_same_groups_and_follows_the_same_schedule(monkeypatch, wd):
    assert st.build_optimizer is optim_mod.build_optimizer and st.lr_at is optim_mod.lr_at
    built, lrs = [], []

    def spy_builder(module, optim):
        built.append(optim_mod.build_optimizer(module, optim))
        return built[-1]

    def spy_schedule(step, optim, total):
        lrs.append(optim_mod.lr_at(step, optim, total))
        return lrs[-1]

    monkeypatch.setattr(st, "build_optimizer", spy_builder)
    monkeypatch.setattr(st, "lr_at", spy_schedule)
    model = _model("atlas", vocab_size=16)
    data = generate_mqar(MQARConfig(vocab_size=16, seq_len=8, num_kv_pairs=1), 8, seed=0)
    settings = st.TrainSettings(steps=3, batch_size=4, lr=1e-3, weight_decay=wd, warmup_fraction=0.5)
    st.fit(model, [data], settings, progress=False)

    assert len(built) == 1
    ref = optim_mod.build_optimizer(model, OptimConfig(lr=1e-3, betas=(0.9, 0.999), weight_decay=wd))
    assert _group_ids(built[0]) == _group_ids(ref)
    assert built[0].defaults["betas"] == (0.9, 0.999) and built[0].defaults["eps"] == ref.defaults["eps"]
    # warmup floor(0.5 x 3) = 1 step: the peak at step 0, then the cosine
    assert lrs == [optim_mod.lr_at(s, settings.optim, 3) for s in range(3)] and lrs[0] == pytest.approx(1e-3)


def _train_cfg(**optim) -> TrainConfig:
    return TrainConfig.from_dict(
        {
            "model": {"preset": "transformer_pp", "size": TINIEST},
            "data": {"path": "unused", "seq_len": 8},
            "global_batch_tokens": 8,
            "micro_batch": 1,
            "steps": 40,
            "optim": optim,
        }
    )


def test_one_schedule_warmup_peak_floor_for_both_trainers():
    cfg = _train_cfg(lr=2.0, warmup_fraction=0.15, min_lr_ratio=0.1)
    settings = st.TrainSettings(steps=40, batch_size=1, lr=2.0, warmup_fraction=0.15, min_lr_ratio=0.1)
    train = [optim_mod.lr_at(s, cfg.optim, cfg.total_steps) for s in range(45)]
    synth = [optim_mod.lr_at(s, settings.optim, settings.steps) for s in range(45)]
    assert train == synth
    warmup = 6  # floor(0.15 x 40): the synthetic trainer used to round (6), and rounds like `atlas train` now
    assert optim_mod.warmup_steps(cfg.optim, 40) == cfg.warmup_steps == warmup
    assert train[:warmup] == pytest.approx([2.0 * (s + 1) / warmup for s in range(warmup)])
    assert train[warmup - 1] == pytest.approx(2.0) == max(train)
    assert all(a >= b for a, b in zip(train[warmup - 1 :], train[warmup:]))
    assert train[40:] == pytest.approx([0.2] * 5) and train[39] > 0.2

    # where round() and floor differ (0.05 x 30 = 1.5), both trainers warm up for 1 step
    settings = st.TrainSettings(steps=30, batch_size=1, lr=1.0, warmup_fraction=0.05)
    assert optim_mod.warmup_steps(settings.optim, 30) == _train_cfg(warmup_fraction=0.05).replace(steps=30).warmup_steps
    assert optim_mod.warmup_steps(settings.optim, 30) == 1
    # an explicit warmup_steps is capped at the run's length
    assert optim_mod.warmup_steps(OptimConfig(warmup_steps=100), 30) == 30
    with pytest.raises(ValueError, match="total_steps"):
        optim_mod.lr_at(0, OptimConfig(), 0)


def test_bad_synthetic_settings_name_the_key():
    with pytest.raises(ValueError, match="warmup_fraction"):
        st.TrainSettings(steps=10, batch_size=1, lr=1e-3, warmup_fraction=1.5)
    with pytest.raises(ValueError, match="betas"):
        st.TrainSettings(steps=10, batch_size=1, lr=1e-3, betas=(0.9, 1.5))
