"""Markdown helpers shared by the report pages."""

from __future__ import annotations

import math
from typing import Any


def fmt(x: Any, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    if isinstance(x, float):
        return f"{x:.{digits}g}" if abs(x) < 1e4 else f"{x:,.0f}"
    return str(x)


def ppl(loss: float | None) -> float | None:
    """The perplexity of a mean token loss (None when there is none or it would overflow)."""
    return math.exp(loss) if loss is not None and loss < 50 else None


def table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(fmt(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"
