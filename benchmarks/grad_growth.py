#!/usr/bin/env python
"""Outer-gradient growth with T of the MLP memory under the placements of its LayerNorm and decay targets.

    python benchmarks/grad_growth.py [--lengths 64,256,1024,4096] [--etas 0.02,0.5] [--seeds 2] [--out FILE]

For every (variant, eta, T): the chunk op (memory="mlp", gd (--optimizer; theta 0.5), expansion 2, alpha 0.98,
c 4, b 16, B = H = 2, head dim 8) on random unit keys / queries / values, the loss mean(o^2), and |dL/dk|
(Frobenius norm of the gradient with respect to the keys), averaged over seeds (T = 4096: one seed, see
--long-seeds). Variants:
- "LN inner, decay to 0":    x + LN(W1 s(W2 x)) in the inner loop and the read-out, decay_target "zero" (default);
- "LN inner, decay to W_0":  the same with decay_target "init";
- "LN read-out, decay to 0": norm_placement "readout" (inner loop without LayerNorm, LN on the output only);
- "no LN":                   memory_norm False.
Also reports ||W1_T|| / ||W1_0|| (mean over heads and batch) of the first seed, to see where the weights go.
Prints a Markdown table with the command line, the machine and the date.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import sys
import time

import torch
import torch.nn.functional as F

from atlas_kernels import MemoryConfig, init_memory_params, memory_chunk

VARIANTS = {
    "LN inner, decay to 0 (default)": {},
    "LN inner, decay to W_0": {"decay_target": "init"},
    "LN read-out, decay to 0": {"norm_placement": "readout"},
    "no LN": {"memory_norm": False},
}
B, H, DH = 2, 2, 8


def measure(
    overrides: dict, eta: float, T: int, seed: int, dtype: torch.dtype, optimizer: str = "gd"
) -> tuple[float, float]:
    """(|dL/dk|, ||W1_T|| / ||W1_0||) for one variant, eta, length and seed."""
    cfg = MemoryConfig(memory="mlp", expansion=2, optimizer=optimizer, window=4, chunk_size=16, **overrides)
    g = torch.Generator().manual_seed(seed)
    unit = lambda: F.normalize(torch.randn(B, T, H, DH, generator=g, dtype=dtype), dim=-1)  # noqa: E731
    k = unit().requires_grad_()
    q, v = unit(), unit()
    gates = {n: torch.full((B, T, H), x, dtype=dtype) for n, x in (("alpha", 0.98), ("eta", eta), ("theta", 0.5))}
    params = init_memory_params(cfg, H, DH, DH, dtype=dtype, generator=torch.Generator().manual_seed(1000 + seed))
    o, state = memory_chunk(q, k, v, gates, params, cfg, backend="torch")
    (gk,) = torch.autograd.grad(o.pow(2).mean(), k)
    w1 = state.weights["W1"].detach()
    ratio = (w1.flatten(2).norm(dim=-1) / params["W1"].flatten(1).norm(dim=-1)).mean().item()
    return gk.norm().item(), ratio


def fmt(x: float) -> str:
    if not math.isfinite(x):
        return "nan" if math.isnan(x) else "inf"
    return f"{x:.2g}" if 1e-3 <= abs(x) < 1e4 else f"{x:.1e}"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", default="64,256,1024,4096")
    ap.add_argument("--etas", default="0.02,0.5")
    ap.add_argument("--seeds", type=int, default=2, help="seeds averaged at T < --long")
    ap.add_argument("--long", type=int, default=4096, help="T from which only --long-seeds seeds run")
    ap.add_argument("--long-seeds", type=int, default=1)
    ap.add_argument("--optimizer", choices=("gd", "momentum", "muon"), default="gd", help="theta 0.5 if any")
    ap.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=None, help="also write the report here")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    lengths = [int(x) for x in args.lengths.split(",")]
    etas = [float(x) for x in args.etas.split(",")]

    start = time.time()
    rows = []
    for eta in etas:
        for name, overrides in VARIANTS.items():
            cells, ratios = [], []
            for T in lengths:
                n_seeds = args.long_seeds if args.long <= T else args.seeds
                results = [measure(overrides, eta, T, s, dtype, args.optimizer) for s in range(n_seeds)]
                cells.append(sum(r[0] for r in results) / n_seeds)
                ratios.append(results[0][1])
                print(f"# eta {eta} {name} T {T}: {cells[-1]:.3g} ({time.time() - start:.0f} s)", file=sys.stderr)
            rows.append((eta, name, cells, ratios))

    lines = [
        "| eta | variant | " + " | ".join(f"T = {T}" for T in lengths) + " | ||W1_T|| / ||W1_0|| |",
        "|---|---|" + "---:|" * len(lengths) + "---|",
    ]
    for eta, name, cells, ratios in rows:
        lines.append(
            f"| {eta} | {name} | "
            + " | ".join(fmt(c) for c in cells)
            + " | "
            + " / ".join(fmt(r) for r in ratios)
            + " |"
        )
    cpu = platform.processor() or platform.machine()
    header = [
        "Command: `python "
        + " ".join([os.path.relpath(sys.argv[0])] + (argv if argv is not None else sys.argv[1:]))
        + "`",
        f"Machine: {cpu} ({platform.system()}), {os.cpu_count()} cores visible, {args.threads} torch threads, "
        f"torch {torch.__version__}, {args.dtype}",
        f"Date: {datetime.date.today().isoformat()}; wall time {time.time() - start:.0f} s",
        "",
        f"|dL/dk| of mean(o^2), mlp memory, {args.optimizer}, expansion 2, alpha 0.98, c 4, b 16, B = H = 2, "
        "head dim 8; mean over "
        f"{args.seeds} seeds (T >= {args.long}: {args.long_seeds}). Last column: ||W1_T|| / ||W1_0|| at each T, "
        "seed 0.",
        "",
    ]
    report = "\n".join(header + lines) + "\n"
    print(report)
    if args.out:
        with open(args.out, "w") as f:
            f.write(report)


if __name__ == "__main__":
    main()
