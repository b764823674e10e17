import pytest
import torch

from atlas_kernels import MemoryConfig, MemoryConfigError, init_memory_params, memory_chunk
from atlas_kernels.testing import random_inputs

H, D = 1, 3


@pytest.mark.parametrize(
    "cfg",
    [
        MemoryConfig(memory="linear", optimizer="gd", feature_map="poly", window=2, chunk_size=2),
        MemoryConfig(memory="mlp", optimizer="muon", feature_map="identity", window=2, chunk_size=2, ns_steps=2),
        MemoryConfig(memory="gated_mlp", optimizer="momentum", window=3, chunk_size=3, activation="silu"),
    ],
    ids=["linear", "mlp", "gated_mlp"],
)
def test_gradcheck(cfg):
    q, k, v, gates = random_inputs(1, 5, H, D, seed=0, requires_grad=True)
    p = {n: t.requires_grad_() for n, t in init_memory_params(cfg, H, D, D, dtype=torch.float64).items()}
    names = list(gates)

    def f(q, k, v, *rest):
        g = dict(zip(names, rest[: len(names)]))
        params = dict(zip(p, rest[len(names) :]))
        return memory_chunk(q, k, v, g, params, cfg)[0]

    assert torch.autograd.gradcheck(f, (q, k, v, *gates.values(), *p.values()), eps=1e-6, atol=1e-5)


def _call(**changes):
    cfg = changes.pop("cfg", MemoryConfig(memory="mlp", optimizer="momentum"))
    q, k, v, gates = random_inputs(1, 4, H, D)
    p = init_memory_params(cfg if isinstance(cfg, MemoryConfig) else MemoryConfig(), H, D, D, dtype=torch.float64)
    args = {"q": q, "k": k, "v": v, "gates": gates, "params": p, "cfg": cfg}
    args.update(changes)
    return memory_chunk(**args)


@pytest.mark.parametrize(
    "changes,match",
    [
        ({"q": torch.zeros(1, 4, H, D + 1, dtype=torch.float64)}, "^q: shape"),
        ({"v": torch.zeros(1, 5, H, D, dtype=torch.float64)}, "^v: leading dims"),
        ({"k": torch.zeros(1, 4, H, D)}, "^q: dtype"),
        ({"v": torch.zeros(4, H, D, dtype=torch.float64)}, "^v: expected 4 dims"),
        ({"gates": {"eta": torch.ones(1, 4, H, dtype=torch.float64)}}, r"gates\['theta'\]: required"),
        (
            {"gates": {"eta": torch.ones(1, 4, H + 1), "theta": torch.ones(1, 4, H)}},
            r"gates\['eta'\]: expected shape",
        ),
        ({"gates": {"eta": torch.full((1, 4, H), float("nan")), "theta": torch.ones(1, 4, H)}}, "non-finite"),
        ({"gates": {"eta": torch.ones(1, 4, H), "theta": torch.ones(1, 4, H), "beta": 1}}, "unknown key"),
        ({"params": {}}, r"params\['W1'\]"),
        ({"cfg": "mlp"}, "^cfg: expected a MemoryConfig"),
    ],
)
def test_bad_input_names_the_argument(changes, match):
    with pytest.raises(ValueError, match=match):
        _call(**changes)


def test_bad_param_shape_names_the_key():
    cfg = MemoryConfig(memory="mlp", optimizer="gd")
    p = init_memory_params(cfg, H, D, D, dtype=torch.float64)
    p["W2"] = p["W2"][..., :-1]
    with pytest.raises(ValueError, match=r"params\['W2'\]: expected shape"):
        _call(cfg=cfg, params=p)


@pytest.mark.parametrize(
    "fields,match",
    [
        ({"window": 0}, "^window"),
        ({"window": "all"}, "^window"),
        ({"memory": "rnn"}, "^memory"),
        ({"optimizer": "muon", "feature_map": "exp"}, "^optimizer: muon"),
        ({"optimizer": "momentum", "feature_map": "exp"}, "^optimizer: momentum"),
        ({"decay_first": True, "memory": "mlp"}, "^decay_first"),
        ({"chunk_size": 0}, "^chunk_size"),
        ({"ns_coeffs": (1.0, 2.0)}, "^ns_coeffs"),
    ],
)
def test_invalid_configs_are_rejected(fields, match):
    with pytest.raises(MemoryConfigError, match=match):
        MemoryConfig(**fields)


def test_config_round_trip_and_unknown_key():
    cfg = MemoryConfig(memory="gated_mlp", window="global", ns_coeffs=(3.0, -4.0, 2.0))
    assert MemoryConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(MemoryConfigError, match="unknown MemoryConfig key"):
        MemoryConfig.from_dict({"windw": 3})


def test_low_precision_inputs_are_accumulated_in_float32():
    cfg = MemoryConfig(memory="mlp", optimizer="muon", window=2, chunk_size=4)
    q, k, v, gates = random_inputs(1, 9, 2, 8, seed=1, eta_scale=0.2)
    p = init_memory_params(cfg, 2, 8, 8, dtype=torch.float64)
    ref, _ = memory_chunk(q, k, v, gates, p, cfg)
    to = lambda x, dt: x.to(dt)  # noqa: E731
    o, _ = memory_chunk(
        to(q, torch.bfloat16),
        to(k, torch.bfloat16),
        to(v, torch.bfloat16),
        {n: to(g, torch.bfloat16) for n, g in gates.items()},
        {n: to(t, torch.bfloat16) for n, t in p.items()},
        cfg,
    )
    assert o.dtype == torch.bfloat16
    err = (o.double() - ref).abs().max() / ref.abs().max()
    assert err < 0.05, err
