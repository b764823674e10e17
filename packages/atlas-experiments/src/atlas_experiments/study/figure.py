"""The study's figure: every judged comparison's per-seed differences, in units of its claim's minimum effect.

Claims are measured in different units (MQAR accuracy, learnability loss, nats), so each difference d_s is shown as
d_s / delta: the shaded band (-1, +1) is "smaller than the effect that counts", the right side is the direction the
paper predicts. Points are seeds, the bar is the mean; the label carries the verdict.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from atlas_experiments.plotting import pyplot, save_figure_atomic

COLOURS = {"holds": "#2a9d8f", "does not hold": "#e76f51", "inconclusive": "#8d99ae", "not resolved (floor)": "#c9c9c9"}


def differences_figure(
    records: Sequence[dict[str, Any]], path: str | Path, title: str = "Claims study: per-seed paired differences"
) -> Path | None:
    """Write the figure for the judged claims of `records` (`report.judge_all`); None when no claim was judged."""
    rows = []
    for record in records:
        for label, d in (record.get("comparisons") or {}).items():
            scaled = [x / d["delta"] for x in d["differences"] if x is not None and math.isfinite(x)]
            mean = d["mean"] / d["delta"] if d["mean"] is not None and math.isfinite(d["mean"]) else None
            name = record["claim"] if len(record["comparisons"]) == 1 else f"{record['claim']} [{label}]"
            # a claim whose learning gate failed is shown as such, whatever its comparisons' statistics say
            verdict = record["verdict"] if record["verdict"] == "not resolved (floor)" else d["verdict"]
            rows.append((f"{name}: {verdict}", scaled, mean, verdict))
    if not rows:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(11, 0.32 * len(rows) + 1.4))
    ax.axvspan(-1, 1, color="#edf2f4", zorder=0)
    ax.axvline(0, color="#555", lw=0.8, zorder=1)
    for y, (_, scaled, mean, verdict) in enumerate(rows):
        colour = COLOURS.get(verdict, "#333")
        ax.scatter(scaled, [y] * len(scaled), s=16, color=colour, zorder=3)
        if mean is not None:
            ax.plot([mean, mean], [y - 0.3, y + 0.3], color=colour, lw=2, zorder=2)
    ax.set_yticks(range(len(rows)), [r[0] for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("per-seed difference / delta\n(> 0: as the paper predicts; shaded: |d| < delta)", fontsize=8)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return save_figure_atomic(fig, path)
