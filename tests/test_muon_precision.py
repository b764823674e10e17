"""The Muon precision benchmark (`benchmarks/muon_precision.py`) at a tiny shape: one row per length, regime and
path, finite errors, and the float64 update more precise than the float32 one (as measured at head dim 4 in
docs/muon.md)."""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import muon_precision  # noqa: E402

from atlas_kernels import MemoryConfig  # noqa: E402


def test_table_rows_at_a_tiny_shape(monkeypatch):
    small = MemoryConfig(memory="mlp", optimizer="muon", feature_map="poly", window=3, chunk_size=4)
    monkeypatch.setattr(muon_precision, "LENGTHS", (9,))
    monkeypatch.setattr(muon_precision, "D", 4)
    monkeypatch.setattr(muon_precision, "paper_memory", lambda: dataclasses.replace(small, ns_eval="matmul"))
    rows = [line for line in muon_precision.table(log=lambda _: None).splitlines() if line.startswith("| 9 |")]
    assert len(rows) == len(muon_precision.REGIMES) * len(muon_precision.PATHS)
    worst = {}
    for row in rows:
        cells = row.strip("|").split(" | ")
        errs = [float(c) for c in cells[3:7]]
        assert all(math.isfinite(e) and e >= 0 for e in errs), row
        worst[(cells[1], cells[2])] = errs[0]
    for regime in muon_precision.REGIMES:
        assert worst[(regime, "factored, float64 update (default)")] < worst[(regime, "factored, float32 update")]
        # the diagnostic changes the float64 update (its polynomials lose precision), and the patch is undone
        assert worst[(regime, muon_precision.DIAGNOSTIC)] > worst[(regime, "factored, float64 update (default)")]
    from atlas_kernels.ops.memory import muon_lowrank
    from atlas_kernels.ops.newton_schulz.gram import ns_polynomial

    assert muon_lowrank.ns_polynomial is ns_polynomial
