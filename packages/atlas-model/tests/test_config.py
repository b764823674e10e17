"""Presets, sizes and validation of AtlasConfig."""

import pytest
from transformers import AutoConfig

from atlas_kernels import MemoryConfig
from atlas_model import PAPER_SIZES, PRESETS, SIZES, AtlasConfig, AtlasConfigError

C = 4  # the Omega window c of the tiny size

# preset -> (mixer, memory, bias, window, optimizer, feature map, extra MemoryConfig / AtlasConfig fields)
EXPECTED = {
    "atlas": ("memory", "mlp", "l2", C, "muon", "poly", {}),
    "atlas_pp": ("memory", "gated_mlp", "l2", C, "muon", "poly", {}),
    "omeganet": ("memory", "mlp", "l2", C, "gd", "poly", {}),
    "dla": ("memory", "mlp", "dot", 1, "gd", "poly", {}),
    "swla": ("memory", "linear", "dot", C, "gd", "poly", {"memory_init": "zero"}),
    "deep_transformer": ("memory", "mlp", "dot", 1, "gd", "exp", {"exp_init_keys": 16}),
    "swdt": ("memory", "mlp", "dot", C, "gd", "exp", {"exp_init_keys": 16}),
    "dot": ("memory", "mlp", "l2", C, "gd", "exp", {"exp_init_keys": 16}),
    "titans_lmm": ("memory", "mlp", "l2", 1, "momentum", "identity", {}),
    "deltanet": (
        "memory",
        "linear",
        "l2",
        1,
        "gd",
        "identity",
        {"use_alpha_gate": False, "memory_init": "zero", "exact_delta": True},
    ),
    "gated_deltanet": (
        "memory",
        "linear",
        "l2",
        1,
        "gd",
        "identity",
        {"decay_first": True, "use_alpha_gate": True, "exact_delta": True},
    ),
    "linear_attention": ("memory", "linear", "dot", 1, "gd", "identity", {"use_alpha_gate": True}),
    "atlas_mag": ("mag", "mlp", "l2", C, "muon", "poly", {}),
    "atlas_mal": ("mal", "mlp", "l2", C, "muon", "poly", {}),
    "atlas_mac": ("mac", "mlp", "l2", C, "muon", "poly", {"mac_persistent_tokens": 0}),
}


def test_every_model_of_the_paper_has_a_preset():
    assert set(PRESETS) == set(EXPECTED) | {"transformer_pp", "swa"}
    assert SIZES == ("tiny", "small", "170M", "340M", "760M", "1.3B")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_preset_memory_settings(name):
    mixer, memory, bias, window, optimizer, phi, extra = EXPECTED[name]
    cfg = AtlasConfig.from_preset(name)
    mem = cfg.memory_config()
    assert isinstance(mem, MemoryConfig)
    assert (cfg.mixer, mem.memory, mem.bias, mem.window, mem.optimizer, mem.feature_map) == (
        mixer,
        memory,
        bias,
        window,
        optimizer,
        phi,
    )
    for key, value in extra.items():
        assert getattr(mem, key, None) == value or getattr(cfg, key) == value, key
    if phi == "poly":
        assert mem.poly_degree == 2


@pytest.mark.parametrize("name", ["transformer_pp", "swa"])
def test_attention_presets_have_no_memory(name):
    cfg = AtlasConfig.from_preset(name)
    assert cfg.mixer == {"transformer_pp": "attention", "swa": "swa"}[name]
    assert cfg.memory is None
    with pytest.raises(AtlasConfigError, match="memory"):
        cfg.memory_config()


@pytest.mark.parametrize(
    ("size", "layers", "width", "heads"),
    [("170M", 12, 768, 16), ("340M", 24, 1024, 16), ("760M", 24, 1536, 16), ("1.3B", 18, 2048, 8)],
)
def test_paper_sizes_follow_table_7(size, layers, width, heads):
    cfg = AtlasConfig.from_preset("atlas", size)
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads) == (layers, width, heads)
    assert cfg.vocab_size == 32000 and cfg.sliding_window == 2048
    assert cfg.memory_head_dim <= 64
    assert cfg.memory_config().window == 8 and cfg.memory_config().chunk_size == 16
    assert size in PAPER_SIZES


def test_class_defaults_are_the_tiny_atlas_preset():
    default, preset = AtlasConfig(), AtlasConfig.from_preset("atlas", "tiny")
    assert default.to_dict() == preset.to_dict()


def test_overrides_replace_fields_and_merge_memory():
    cfg = AtlasConfig.from_preset("atlas", "tiny", memory={"window": 7, "ns_steps": 3}, eta_max=0.1)
    mem = cfg.memory_config()
    assert (mem.window, mem.ns_steps, mem.optimizer, cfg.eta_max) == (7, 3, "muon", 0.1)


def test_config_round_trips_through_json(tmp_path):
    cfg = AtlasConfig.from_preset("dot", "tiny", memory={"window": "global"})
    cfg.save_pretrained(tmp_path)
    loaded = AutoConfig.from_pretrained(tmp_path)
    assert isinstance(loaded, AtlasConfig)
    assert loaded.to_diff_dict() == cfg.to_diff_dict()
    assert loaded.memory_config() == cfg.memory_config()


def test_the_memory_is_typed_and_a_dict_only_when_saved(tmp_path):
    """`AtlasConfig.memory` is the `MemoryConfig` the layers run (one object, checked once), whether it was given as
    a MemoryConfig or as a dict of its fields; `to_dict` / `config.json` hold the dict."""
    import json

    cfg = AtlasConfig.from_preset("atlas", "tiny", memory={"window": 3})
    assert isinstance(cfg.memory, MemoryConfig) and cfg.memory.window == 3
    assert cfg.memory_config() is cfg.memory
    given = AtlasConfig(memory=MemoryConfig(memory="linear", window=2))
    assert given.memory.memory == "linear" and given.to_dict()["memory"] == given.memory.to_dict()
    cfg.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())["memory"]
    assert saved == cfg.memory.to_dict() and saved["window"] == 3
    with pytest.raises(Exception, match="Field 'memory'"):  # Hugging Face's strict field check names it
        AtlasConfig(memory=[("window", 2)])


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"name": "atlass"}, "preset"),
        ({"size": "7B"}, "size"),
        ({"num_attention_heads": 3}, "num_attention_heads"),
        ({"num_memory_heads": 5}, "num_memory_heads"),
        ({"sliding_window": 0}, "sliding_window"),
        ({"mac_segment_size": 0}, "mac_segment_size"),
        ({"memory": {"window": 0}}, "memory: window"),
        ({"memory": {"optimizer": "adam"}}, "memory: optimizer"),
        ({"mixer": "rnn"}, "mixer"),
        ({"memory_init": "zero"}, "memory_init"),
        ({"alpha_init": 1.0}, "alpha_init"),
        ({"eta_init": 0.0}, "eta_init"),
        ({"eta_max": 0.0}, "eta_max"),
        ({"conv_size": 0}, "conv_size"),
        ({"memory_backend": "cuda"}, "memory_backend"),
        ({"name": "deep_transformer", "memory_backend": "compiled"}, "memory_backend"),  # exp: the state grows
        ({"memory": {"window": "global"}, "memory_backend": "compiled"}, "memory_backend"),
        ({"hiden_size": 64}, "overrides"),
    ],
)
def test_bad_config_names_the_field(kwargs, field):
    kwargs = dict(kwargs)
    name, size = kwargs.pop("name", "atlas"), kwargs.pop("size", "tiny")
    with pytest.raises(AtlasConfigError, match=f"^{field}"):
        AtlasConfig.from_preset(name, size, **kwargs)


def test_bad_config_is_rejected_by_the_constructor_too():
    with pytest.raises(AtlasConfigError, match="^num_attention_heads"):
        AtlasConfig(hidden_size=64, num_attention_heads=6)
    with pytest.raises(AtlasConfigError, match="^memory"):
        AtlasConfig(mixer="memory", memory=None)


def test_compiled_backend_gives_the_torch_backend_model(make_model, make_ids, monkeypatch):
    """memory_backend="compiled" evaluates the same model (each memory chunk under torch.compile); the test compiles
    with the "aot_eager" backend (dynamo and AOT autograd, no code generation) to stay fast."""
    import torch

    from atlas_kernels.ops.memory import chunk

    ids = make_ids(64, 2, 9)
    compiled_for = []
    real = chunk.compiled_chunk_step
    monkeypatch.setattr(
        chunk,
        "compiled_chunk_step",
        lambda _b, device_type: compiled_for.append(device_type) or real("aot_eager", device_type),
    )
    runs = []
    for backend in ("torch", "compiled"):
        model = make_model("atlas", torch.float64, 0, vocab_size=64, memory_backend=backend).train()
        assert model.config.memory_backend == backend
        out = model(ids, labels=ids)
        out.loss.backward()
        assert bool(compiled_for) == (backend == "compiled"), compiled_for
        runs.append((out.loss.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}))
    (loss, grads), (loss_c, grads_c) = runs
    assert torch.allclose(loss, loss_c, rtol=1e-10, atol=0)
    assert grads.keys() == grads_c.keys()
    for name, g in grads.items():
        assert torch.allclose(g, grads_c[name], rtol=1e-8, atol=1e-12), name


def test_memory_decay_target_passes_through_and_trains(make_model, make_ids):
    """decay_target="init" (atlas-kernels 0.2.0: decay toward W_0) is a plain MemoryConfig key of `memory`."""
    import torch

    assert AtlasConfig.from_preset("atlas", "tiny").memory_config().decay_target == "zero"  # the paper
    cfg = AtlasConfig.from_preset("atlas", size="tiny", memory={"decay_target": "init"})
    assert cfg.memory_config().decay_target == "init"
    model = make_model("atlas", vocab_size=64, memory={"decay_target": "init"}).train()
    ids = make_ids(64, 1, 12)
    out = model(ids, labels=ids)
    assert torch.isfinite(out.loss)
    out.loss.backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    assert all(g is not None and torch.isfinite(g).all() for g in grads.values())
    # the initial memory weights W_0 get a gradient (also through the decay target)
    assert any("W1" in n and g.abs().sum() > 0 for n, g in grads.items())
    with pytest.raises(AtlasConfigError, match="^memory: decay_target: expected one of zero, init"):
        AtlasConfig.from_preset("atlas", "tiny", memory={"decay_target": "w0"})
