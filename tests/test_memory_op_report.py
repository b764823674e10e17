"""The CPU memory-op benchmark's report (`benchmarks/memory_op_report.py`) on hand-made cells."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from memory_op import Cell  # noqa: E402
from memory_op_report import targets  # noqa: E402


def _cell(op: str, T: int, seconds: float, peak_mb: float) -> Cell:
    return Cell(op, T, result={"times_s": [seconds], "peak_mb": peak_mb, "finite": True}, foreign_load=0.0)


def test_an_op_listed_twice_at_one_length_gets_no_memory_slope():
    cells = [
        _cell("chunk-atlas-eigh@before", 256, 8.0, 780.0),
        _cell("chunk-atlas-eigh", 256, 6.2, 770.0),
        _cell("chunk-atlas-eigh@before", 256, 7.6, 760.0),
        _cell("chunk-atlas-eigh", 256, 6.2, 700.0),
        _cell("chunk-linear", 256, 0.01, 10.0),
        _cell("chunk-linear", 1024, 0.04, 40.0),
    ]
    text = targets(cells)
    assert "chunk-atlas-eigh vs chunk-atlas-eigh@before, T=256: tokens/s x1.29" in text
    slopes = [line for line in text.splitlines() if "log-log slope" in line]
    assert slopes == [
        "- peak memory of chunk-linear: log-log slope 1.00 between T=256 and T=1024 (1 = linear); "
        "MB per 1k positions (B=2): 39, 39"
    ]
