"""Figures of every command: pyplot without a display, and PNGs written atomically (a temporary name in the same
directory, then `os.replace`), so a report never picks up half a figure."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def pyplot() -> Any:
    """`matplotlib.pyplot` on the Agg backend (runs on machines without a display: cluster nodes, CI)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure_atomic(fig: Any, path: str | Path, dpi: int = 120, **savefig: Any) -> Path:
    """Save a matplotlib figure as PNG (`savefig` options passed on) and close it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # the temporary name keeps the .png suffix: savefig picks the format from it
    tmp = path.with_name(path.stem + ".tmp.png")
    fig.savefig(tmp, dpi=dpi, **savefig)
    pyplot().close(fig)
    os.replace(tmp, path)
    return path
