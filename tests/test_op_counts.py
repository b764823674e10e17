"""The op-count benchmark (`benchmarks/op_counts.py`) at a tiny shape: what it counts, and that it is deterministic."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from op_counts import OpCounter, per_chunk, preset_memories, table  # noqa: E402

from atlas_kernels import MemoryConfig  # noqa: E402


def test_counter_separates_views_gemms_and_pointwise_calls():
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    with OpCounter() as c:
        (a @ b).t().exp()
    assert c.calls["mm"] == 1 and c.calls["t"] == 1 and c.calls["exp"] == 1
    assert (c.kinds["ops"], c.kinds["kernels"], c.kinds["GEMM"], c.kinds["pointwise"]) == (3, 2, 1, 1)


def test_per_chunk_counts_are_steady_and_deterministic():
    cfg = MemoryConfig(memory="mlp", optimizer="momentum", window=2, chunk_size=2)
    first, second = (per_chunk(cfg, 1, 4) for _ in range(2))
    assert first == second
    for part in ("fwd", "bwd"):
        row = first[part]
        assert row["ops"] >= row["kernels"] >= row["GEMM"] > 0
        assert row["kernels"] >= row["pointwise"] > 0
        assert float(row["kernels"]).is_integer()  # every chunk after the first dispatches the same calls
    assert "| mlp momentum identity l2 c=2 |" in table({"mlp momentum identity l2 c=2": (["x"], cfg, first)})


def test_preset_memories_cover_every_memory_preset_once():
    memories = preset_memories("tiny")
    names = [n for presets, *_ in memories.values() for n in presets]
    assert len(names) == len(set(names))
    assert {"atlas", "atlas_pp", "omeganet", "titans_lmm", "linear_attention", "deltanet"} <= set(names)
    assert all("auto" not in (cfg.ns_eval, cfg.ns_form) for _, cfg, _, _ in memories.values())


def test_padded_muon_batch_cuts_the_gemms_per_chunk():
    """muon_batch="padded" labels the Muon memories and leaves the others as they are; one stacked set of Gram and
    polynomial products per chunk replaces one per weight."""
    per_weight, padded = preset_memories("tiny"), preset_memories("tiny", "padded")
    muon = {lab: cfg for lab, (_, cfg, _, _) in padded.items() if cfg.optimizer == "muon"}
    assert muon and all(lab.endswith(" padded") and cfg.muon_batch == "padded" for lab, cfg in muon.items())
    assert set(padded) - set(muon) == {lab for lab, (_, c, _, _) in per_weight.items() if c.optimizer != "muon"}
    cfg = muon["mlp muon poly l2 c=8 padded"] if "mlp muon poly l2 c=8 padded" in muon else next(iter(muon.values()))
    stacked = per_chunk(cfg, 1, 4)
    each = per_chunk(dataclasses.replace(cfg, muon_batch="per_weight"), 1, 4)
    for part in ("fwd", "bwd"):
        assert stacked[part]["GEMM"] < each[part]["GEMM"], (part, stacked[part], each[part])
