"""Equal-memory arms (`--match-memory`): hand-counted memory floats, the sizing rule, and its place in results."""

from __future__ import annotations

import json

import pytest

from atlas_experiments.cli import main
from atlas_experiments.evaluation import synthetic_models as sm
from atlas_experiments.evaluation.mad import MADProtocol, run_mad
from atlas_experiments.evaluation.mqar import MQARProtocol, run_mqar

pytestmark = pytest.mark.usefixtures("one_thread")

# width 64, 2 layers; the CPU memory knobs (head dim 8, expansion 2) as the commands' defaults
KW = {"vocab_size": 32, "width": 64, "layers": 2, "memory_head_dim": 8, "memory_expansion": 2}


def _floats(choice: sm.ModelChoice, seq_len: int = 32) -> int:
    model = sm.build_lm(sm.model_config(choice, **KW), 0, "cpu")
    return sm.state_size(model, seq_len, 32, "cpu")["memory"]


def test_target_from_a_count_or_a_preset():
    assert sm.memory_target("4096", seq_len=32, **KW) == ("4096 floats", 4096)
    # Gated DeltaNet at width 64: 4 heads of 16, one 16 x 16 matrix per head and layer
    assert sm.memory_target("gated_deltanet", seq_len=32, **KW) == ("gated_deltanet", 2 * 4 * 16 * 16)
    for bad in ("0", "not_a_preset"):
        with pytest.raises(ValueError, match="--match-memory"):
            sm.memory_target(bad, seq_len=32, **KW)


def test_linear_and_mlp_memories_are_sized_to_the_budget():
    # Titans LMM: an MLP memory d -> e d -> d per head of dim d, 64 / d heads, 2 layers: 2 * (64/d) * 2 e d^2
    # floats = 256 e d; the budget 2048 is met exactly by d = 8, e = 1 (d = 4, e = 2 ties it; the larger head wins)
    sized, match = sm.match_memory(sm.ModelChoice("t", "titans_lmm"), "b", 2048, seq_len=32, **KW)
    assert (match.status, match.memory_head_dim, match.memory_expansion, match.floats) == ("matched", 8, 1, 2048)
    assert sized.overrides["num_memory_heads"] == 8 and sized.overrides["memory"]["expansion"] == 1
    assert _floats(sized) == match.floats  # the reported size is the built model's
    # a linear memory (2 * 64 * d floats) has no expansion: d = 32 gives 4096
    sized, match = sm.match_memory(sm.ModelChoice("g", "gated_deltanet"), "b", 4096, seq_len=32, **KW)
    assert (match.memory_head_dim, match.memory_expansion, match.floats, match.ratio) == (32, None, 4096, 1.0)
    assert "memory" not in sized.overrides


def test_the_budget_replaces_a_users_own_memory_heads():
    choice = sm.ModelChoice("g", "gated_deltanet", overrides={"num_memory_heads": 1})
    sized, match = sm.match_memory(choice, "b", 2048, seq_len=32, **KW)
    assert sized.overrides["num_memory_heads"] == 4 and match.floats == 2048 == _floats(sized)


def test_a_budget_out_of_reach_is_flagged_not_hidden():
    # the largest linear memory at width 64 (one head of 64: 2 * 64 * 64 = 8192) cannot reach 10^6 floats
    _, match = sm.match_memory(sm.ModelChoice("g", "gated_deltanet"), "b", 10**6, seq_len=32, **KW)
    assert (match.status, match.floats, match.memory_head_dim) == ("nearest", 8192, 64)


def test_attention_and_growing_memories_keep_their_size():
    choice = sm.ModelChoice("tpp", "transformer_pp")
    same, match = sm.match_memory(choice, "b", 2048, seq_len=32, **KW)
    assert same is choice and match.status == "attention" and match.floats == _floats(choice)
    # DeepTransformer's global window keeps every key: its memory grows with T
    choice = sm.ModelChoice("dt", "deep_transformer")
    same, match = sm.match_memory(choice, "b", 2048, seq_len=32, **KW)
    assert same is choice and match.status == "grows" and _floats(choice, 64) > match.floats


def test_mqar_and_mad_report_each_arms_sizing():
    protocol = MQARProtocol(settings=((16, 2),), vocab_size=32, widths=(64,), memory_head_dim=8,
                            memory_expansion=2, match_memory="gated_deltanet", steps=0, test_examples=4)  # fmt: skip
    result = run_mqar([sm.ModelChoice("titans_lmm", "titans_lmm")], protocol, progress=False)
    row = result.details["table"][0]
    assert row["memory_match"]["status"] == "matched" and row["memory_match"]["target"] == 2048
    assert row["memory_size"]["16"] == row["memory_match"]["floats"] == 2048
    assert any("sized to gated_deltanet" in d for d in result.deviations)
    mad = MADProtocol(tasks=("in_context_recall",), grid="baseline", width=64, memory_head_dim=8,
                      memory_expansion=2, match_memory="2048", steps=0, num_test_examples=4)  # fmt: skip
    result = run_mad([sm.ModelChoice("titans_lmm", "titans_lmm")], mad, progress=False)
    assert result.details["memory_match"]["titans_lmm"]["floats"] == 2048
    assert result.metrics["memory_size/titans_lmm/in_context_recall"] == 2048


def test_command_option_and_report_column(tmp_path):
    from atlas_experiments.evaluation.tasks.mqar import mqar_section

    out = tmp_path / "mqar.json"
    argv = ["eval", "mqar", "--models", "deltanet", "--settings", "16x2", "--vocab-size", "16", "--width", "16",
            "--steps", "1", "--batch-size", "2", "--test-examples", "2", "--match-memory", "128", "--out", str(out),
            "--threads", "1", "--no-progress", "--no-track"]  # fmt: skip
    assert main(argv) == 0
    row = json.loads(out.read_text())["details"]["table"][0]
    assert row["memory_match"]["floats"] == 128  # width 16, 2 layers: 2 * 16 * 4 at head dim 4
    runs = {"deltanet": {"mqar": {"metrics": {"acc/deltanet/d_16": 0.5, "memory_size/deltanet/d_16/len_8": 64.0,
                                              "memory_size/deltanet/d_16/len_16": 128.0}}}}  # fmt: skip
    line = next(ln for ln in mqar_section(runs).splitlines() if ln.startswith("| deltanet"))
    assert line.endswith("| 128 |") and "memory floats (longest T)" in mqar_section(runs)


def test_memory_floats_are_counted_on_one_thread():
    # a count is a shape: on cores other processes keep busy, a second thread made the tiny forward 25-100x slower
    import torch

    seen = []
    model = sm.build_lm(sm.model_config(sm.ModelChoice("d", "deltanet"), **KW), 0, "cpu")
    model.register_forward_pre_hook(lambda *_: seen.append(torch.get_num_threads()))
    with sm.torch_threads(2):
        assert sm.state_size(model, 32, 32, torch.device("cpu"))["memory"] == 2 * 4 * 16 * 16
        assert seen == [1] and torch.get_num_threads() == 2  # restored after the count
