"""The MQAR-study options of the memory layer: output layer at zero, LayerNorm gain, value scale."""

import pytest
import torch

from atlas_model import AtlasConfig
from atlas_model.config import AtlasConfigError
from atlas_model.layers import MemoryLayer, StepContext


def _layer(**overrides) -> MemoryLayer:
    torch.manual_seed(0)
    return MemoryLayer(AtlasConfig.from_preset("atlas", "tiny", **overrides)).double()


def test_defaults_keep_the_random_output_layer_unit_gain_and_raw_values():
    layer = _layer()
    params = layer.memory(torch.zeros(1, dtype=torch.float64))
    assert params["W1"].abs().sum() > 0
    torch.testing.assert_close(params["ln_weight"], torch.ones_like(params["ln_weight"]))
    x = torch.randn(2, 5, layer.q_proj.in_features, dtype=torch.float64)
    _, _, v = layer.project(x, StepContext(0, 5), None)
    assert not torch.allclose(v.norm(dim=-1), torch.ones(2, 5, layer.num_heads, dtype=torch.float64))


def test_output_layer_at_zero_and_small_gain_are_the_initial_values():
    layer = _layer(memory_output_init="zero", memory_ln_gain_init=0.1)
    params = layer.memory(torch.zeros(1, dtype=torch.float64))
    assert torch.count_nonzero(params["W1"]) == 0
    assert params["W2"].abs().sum() > 0  # only the output layer starts at zero
    torch.testing.assert_close(params["ln_weight"], torch.full_like(params["ln_weight"], 0.1))


def test_value_scale_fixes_each_heads_value_norm():
    layer = _layer(memory_value_scale=2.5)
    x = torch.randn(2, 7, layer.q_proj.in_features, dtype=torch.float64)
    q, k, v = layer.project(x, StepContext(0, 7), None)
    torch.testing.assert_close(v.norm(dim=-1), torch.full(v.shape[:3], 2.5, dtype=torch.float64))
    torch.testing.assert_close(q.norm(dim=-1), torch.ones(q.shape[:3], dtype=torch.float64))


def test_every_option_trains_through_the_output_layer_at_zero():
    layer = _layer(memory_output_init="zero", memory_ln_gain_init=0.1, memory_value_scale=1.0)
    x = torch.randn(2, 9, layer.q_proj.in_features, dtype=torch.float64)
    layer(x, StepContext(0, 9)).pow(2).sum().backward()
    assert layer.memory.W1.grad is not None and layer.memory.W1.grad.abs().sum() > 0  # W1 = 0 is not a fixed point


@pytest.mark.parametrize(
    "overrides,key",
    [
        ({"memory_output_init": "ones"}, "memory_output_init"),
        ({"memory_ln_gain_init": 0.0}, "memory_ln_gain_init"),
        ({"memory_value_scale": -1.0}, "memory_value_scale"),
    ],
)
def test_bad_values_name_the_key(overrides, key):
    with pytest.raises(AtlasConfigError, match=f"^{key}:"):
        AtlasConfig.from_preset("atlas", "tiny", **overrides)


def test_output_layer_at_zero_is_refused_for_linear_memories():
    with pytest.raises(AtlasConfigError, match="^memory_output_init: 'zero' is for MLP memories"):
        AtlasConfig.from_preset("gated_deltanet", "tiny", memory_output_init="zero")
