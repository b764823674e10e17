import pytest

from atlas_experiments.schema import ConfigError
from atlas_experiments.train import TrainConfig
from atlas_experiments.train.optim import lr_at
from atlas_experiments.train.recipes import RECIPES

BASE = {
    "model": {"preset": "atlas", "size": "tiny"},
    "data": {"path": "data", "seq_len": 32},
    "global_batch_tokens": 256,
    "micro_batch": 4,
    "steps": 100,
}


def _cfg(**over):
    d = {**BASE, **over}
    return TrainConfig.from_dict(d)


def test_round_trip_and_grad_accum():
    cfg = _cfg()
    assert TrainConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.grad_accum(1) == 2 and cfg.grad_accum(2) == 1
    with pytest.raises(ConfigError, match="global_batch_tokens"):
        cfg.grad_accum(4)


@pytest.mark.parametrize(
    "over,match",
    [
        ({"optim": {"lr": "fast"}}, r"^train\.optim\.lr: expected a float"),
        ({"optim": {"lrr": 1e-3}}, r"^train\.optim\.lrr: unknown key"),
        ({"data": {"path": "d"}}, r"^train\.data\.seq_len: required"),
        ({"steps": None}, r"^train\.steps: give exactly one"),
        ({"tokens": 1000}, r"^train\.steps: give exactly one"),
        ({"micro_batch": 3}, r"^train\.global_batch_tokens"),
        ({"precision": "fp8"}, r"^train\.precision: expected one of"),
        ({"recipe": "paper-9B"}, r"^train\.recipe: unknown recipe"),
        ({"optim": {"betas": [0.9]}}, r"^optim\.betas"),
        ({"model": {"preset": "atlsa"}}, r"^train\.model\.preset: unknown preset 'atlsa'"),
        ({"model": {"preset": "atlas", "size": "9B"}}, r"^train\.model\.size: unknown size"),
        ({"model": {"preset": "atlas", "overrides": {"windw": 4}}}, r"^train\.model\.overrides\.windw: not an"),
        (
            {"model": {"preset": "atlas", "overrides": {"memory": {"windw": 4}}}},
            r"^train\.model\.overrides\.memory\.windw: not a MemoryConfig field \(did you mean 'window'\?\)",
        ),
        (
            {"model": {"preset": "atlas", "overrides": {"memory": {"window": 0}}}},
            r"^train\.model \(atlas, tiny\): memory",
        ),
        (
            {"model": {"preset": "atlas", "overrides": {"alpha_init": 2.0}}},
            r"^train\.model \(atlas, tiny\): alpha_init",
        ),
        (
            {"recipe": "paper-760M", "model": {"preset": "atlas", "size": "340M"}},
            r"^train\.model\.size: '340M' disagrees",
        ),
    ],
)
def test_errors_name_the_key(over, match):
    with pytest.raises(ConfigError, match=match):
        _cfg(**over)


def test_recipe_supplies_paper_defaults():
    cfg = TrainConfig.from_dict({"recipe": "paper-760M", "model": {"preset": "atlas"}, "data": {"path": "d"}})
    assert cfg.model.size == "760M" and cfg.data.seq_len == 4096
    assert cfg.global_batch_tokens == 524_288 and cfg.optim.lr == 1.25e-3
    assert cfg.total_steps == 30_000_000_000 // 524_288 + 1
    assert set(RECIPES) == {"paper-170M", "paper-340M", "paper-760M", "paper-1.3B"}
    short = TrainConfig.from_dict(
        {"recipe": "paper-340M", "model": {"preset": "atlas"}, "data": {"path": "d"}, "steps": 5}
    )
    assert short.total_steps == 5


def test_schedule_warmup_cosine_floor():
    cfg = _cfg(optim={"lr": 1.0, "warmup_steps": 10, "min_lr_ratio": 0.1})
    lrs = [lr_at(s, cfg.optim, cfg.total_steps) for s in range(100)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(lrs[9:], lrs[10:]))
    assert lrs[-1] == pytest.approx(0.1, abs=1e-3)


def test_the_spec_builds_the_model_config_it_names():
    cfg = _cfg(model={"preset": "atlas", "size": "tiny", "overrides": {"memory": {"window": 2}, "eta_max": 0.5}})
    model = cfg.model.config(vocab_size=100)
    assert (model.vocab_size, model.memory.window, model.eta_max) == (100, 2, 0.5)
    assert model.memory.poly_degree == 2  # the rest of the preset's memory stays
    assert model.memory_config() is model.memory_config()  # parsed once, shared by the layers


def test_one_merge_rule():
    from atlas_experiments.configio import merge_settings

    base = {"model": {"preset": "atlas", "overrides": {"memory": {"window": 4, "chunk_size": 4}}}, "lrs": [1, 2]}
    over = {"model": {"overrides": {"memory": {"window": 8}}}, "lrs": [3]}
    merged = merge_settings(base, over)
    assert merged == {"model": {"preset": "atlas", "overrides": {"memory": {"window": 8, "chunk_size": 4}}}, "lrs": [3]}
    assert base["model"]["overrides"]["memory"]["window"] == 4  # inputs untouched
