"""Error rates of the claims study's rule v2 by Monte Carlo, per seed distribution and number of seeds.

    .venv/bin/python benchmarks/study_rule_error_rates.py [--reps 4000] [--out benchmarks/study_rule_error_rates.md]

For one comparison with delta = 0.05: the rate of a false "holds" (direction established at a true effect of 0) and
of a false "effect below delta" (at a true effect of exactly delta), and P(holds) at 2 x delta (power), for seed
differences that are normal (sd 0.05), symmetric bimodal (modes +-0.08) and right-skewed (a fifth of the seeds gain
0.4, the rest lose 0.1: a model that learns the task on a minority of seeds). The exact sign-flip test assumes a
spread symmetric about the mean; the skewed rows show what happens when it is not.
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
from pathlib import Path

import numpy as np

from atlas_experiments.study.rule_v2 import combine, compare

DELTA = 0.05


def draw(kind: str, rng: np.random.Generator, reps: int, n: int, mean: float) -> np.ndarray:
    if kind == "normal":
        return rng.normal(mean, 0.05, (reps, n))
    if kind == "bimodal":
        return mean + rng.choice([-0.08, 0.08], (reps, n)) + rng.normal(0, 0.01, (reps, n))
    return mean + np.where(rng.random((reps, n)) < 0.2, 0.4, -0.1) + rng.normal(0, 0.01, (reps, n))


def rate(rows: np.ndarray, what: str) -> float:
    hits = 0
    for row in rows:
        (c,) = combine("c", [compare("c", dict(enumerate(row)), DELTA)]).comparisons
        hits += {"holds": c.direction_holds, "below": c.below_delta}[what]
    return hits / len(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=4000)
    ap.add_argument("--out", default=str(Path(__file__).with_suffix(".md")))
    args = ap.parse_args()
    rng = np.random.default_rng(2026)
    rows = []
    for kind in ("normal", "bimodal", "skewed"):
        for n in (3, 5, 8, 12, 16):
            fh = rate(draw(kind, rng, args.reps, n, 0.0), "holds")
            fb = rate(draw(kind, rng, args.reps, n, DELTA), "below")
            pw = rate(draw(kind, rng, args.reps, n, 2 * DELTA), "holds")
            rows.append(f"| {kind} | {n} | {fh:.3f} | {fb:.3f} | {pw:.3f} |")
            print(rows[-1], flush=True)
    se = (0.05 * 0.95 / args.reps) ** 0.5
    text = "\n".join(
        [
            "# Rule v2 error rates (Monte Carlo)\n",
            f"`{' '.join(['.venv/bin/python', 'benchmarks/study_rule_error_rates.py', '--reps', str(args.reps)])}`, "
            f"{dt.date.today().isoformat()}, {platform.machine()} CPU, {args.reps} simulated comparisons per cell "
            f"(Monte Carlo standard error {se:.4f} at a rate of 0.05). One comparison, delta = {DELTA}; n <= 12 uses "
            "the exact sign-flip test, n = 16 the t-test.\n",
            "| seed differences | n | false holds (effect 0) | false 'below delta' (effect = delta) "
            "| P(holds) at 2 delta |",
            "|---|---|---|---|---|",
            *rows,
            "",
            "Normal and symmetric bimodal spreads keep both error rates at or below 0.05 within Monte Carlo error "
            "(`tests: test_study_rule_v2.py::test_error_rates`). The right-skewed spread does not: when most seeds "
            "lose a little and a few gain a lot, the mean can equal delta while most differences sit below it, and no"
            " test of the mean with so few seeds can tell. A claim whose arms learn on some seeds only should be read"
            " with that in mind; the learning gates (docs/study.md) catch the case where even the best arm has not "
            "learned.",
            "",
        ]
    )
    tmp = Path(args.out).with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(args.out)


if __name__ == "__main__":
    main()
