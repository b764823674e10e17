"""CPU benchmark: Newton-Schulz materialised (`newton_schulz`) vs in Gram space (`newton_schulz_gram`).

Times forward + backward (the loss <NS_k(X), G> for a fixed random G, gradient to X) of a batch of r x n matrices,
both forms in one process on one thread. The forms run interleaved (A, B, A, B, ...) so that a change of the
machine's load hits both alike; the median of each is reported with its min and max, and the ratio of medians.
The flop ratio is the model's count for the forward (docs/muon.md, "Newton-Schulz in Gram space").

The results block it prints is pasted into benchmarks/newton_schulz_gram.md. Example:
    nice .venv/bin/python benchmarks/newton_schulz_gram.py --rounds 7
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time

import torch

from atlas_kernels.ops.newton_schulz import newton_schulz, newton_schulz_gram

FORMS = {"materialise": newton_schulz, "gram": newton_schulz_gram}


def forward_flops(r: int, n: int, steps: int, form: str) -> float:
    """Forward flops per matrix (2 per multiply-add), r <= n."""
    if form == "materialise":
        return steps * (4 * r * r * n + 2 * r**3)
    # 4k - 3 products of r x r matrices: step 0 has no q P (P_1 = q_0), the last no q A q.
    return 4 * r * r * n + (8 * steps - 6) * r**3


def _fwd_bwd(fn, x, cotangent, steps):
    y = fn(x, steps)
    (gx,) = torch.autograd.grad(y, x, cotangent)
    return gx


def _loadavg() -> str:
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "n/a"


def bench(r, n, batch, steps, rounds, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, r, n, generator=g, dtype=dtype).requires_grad_(True)
    cotangent = torch.randn(batch, r, n, generator=g, dtype=dtype)
    for fn in FORMS.values():  # warm-up
        _fwd_bwd(fn, x, cotangent, steps)
    times = {name: [] for name in FORMS}
    for _ in range(rounds):
        for name, fn in FORMS.items():
            t0 = time.perf_counter()
            _fwd_bwd(fn, x, cotangent, steps)
            times[name].append(time.perf_counter() - t0)
    return times


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="32x128,64x2145,128x561", help="comma-separated r x n (r <= n)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=7, help="interleaved (materialise, gram) pairs per shape")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]

    load_before = _loadavg()
    rows = []
    for r, n in shapes:
        times = bench(r, n, args.batch, args.steps, args.rounds, dtype)
        med = {k: statistics.median(v) for k, v in times.items()}
        flop_ratio = forward_flops(r, n, args.steps, "materialise") / forward_flops(r, n, args.steps, "gram")
        rows.append((r, n, times, med, flop_ratio))
        print(f"{r}x{n}: materialise {med['materialise'] * 1e3:.1f} ms, gram {med['gram'] * 1e3:.1f} ms", flush=True)
    load_after = _loadavg()

    command = " ".join(["python", "benchmarks/newton_schulz_gram.py", *(argv if argv is not None else sys.argv[1:])])
    lines = [
        f"command: `{command}`",
        f"torch {torch.__version__}, {platform.machine()}, {os.cpu_count()} CPUs, {args.threads} thread(s), "
        f"{args.dtype}, batch {args.batch}, k = {args.steps}, {args.rounds} interleaved rounds",
        f"date: {datetime.date.today().isoformat()}; load average before / after: {load_before} / {load_after}",
        "",
        "| r x n | materialise ms (min-max) | gram ms (min-max) | speed-up (median) | forward flop ratio |",
        "|---|---:|---:|---:|---:|",
    ]
    for r, n, times, med, flop_ratio in rows:
        cells = [
            f"{med[k] * 1e3:.1f} ({min(times[k]) * 1e3:.1f}-{max(times[k]) * 1e3:.1f})" for k in ("materialise", "gram")
        ]
        lines.append(
            f"| {r} x {n} | {cells[0]} | {cells[1]} | {med['materialise'] / med['gram']:.2f} | {flop_ratio:.2f} |"
        )
    text = "\n".join(lines)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
