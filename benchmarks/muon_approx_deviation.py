"""How far the approximate Muon (muon_polynomial="chunk") moves the memory's outputs from exact Muon.

One memory head stack (B=1, H=2, float64, no gradients) over T=256 random tokens, Atlas's memory (MLP with LayerNorm
and residual, poly features of degree 2, c=4, b=16), from the initial state. Per 32-token block the relative
deviation ||y_approx - y_exact|| / ||y_exact - q|| of the retrieved branch (q: the residual). For scale, the same
measure for exact Muon at chunk size 8 instead of 16 (another setting of the chunk-start gradient semantics that
the op accepts as "the same model"). Two gate regimes: the CPU benchmark's (alpha, theta, gamma in [0.9, 1),
eta ~ 0.02) and a faster-forgetting one (gates in [0.5, 1), eta ~ 0.1).

    .venv/bin/python benchmarks/muon_approx_deviation.py --out benchmarks/muon_approx_deviation.md
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

import torch
from marked_block import write_block

from atlas_kernels import MemoryConfig, init_memory_params, memory_chunk
from atlas_kernels.testing import random_inputs

T, BLOCK = 256, 32
REGIMES = {"gates [0.9, 1), eta 0.02": (0.9, 0.02), "gates [0.5, 1), eta 0.1": (0.5, 0.1)}
SHAPES = {"d 8, e 2 (embedded)": (8, 2), "d 16, e 4": (16, 4)}


def deviations(d: int, expansion: int, gate_low: float, eta: float, seed: int = 0) -> dict[str, list[float]]:
    cfg = MemoryConfig(
        memory="mlp",
        optimizer="muon",
        feature_map="poly",
        poly_degree=2,
        window=4,
        chunk_size=16,
        expansion=expansion,
    )
    q, k, v, gates = random_inputs(1, T, 2, d, seed=seed, gate_low=gate_low, eta_scale=eta)
    params = init_memory_params(cfg, 2, d, d, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        exact, _ = memory_chunk(q, k, v, gates, params, cfg)
        runs = {
            "approx. (one polynomial per chunk)": dataclasses.replace(cfg, muon_polynomial="chunk"),
            "exact Muon, chunk 8 (reference)": dataclasses.replace(cfg, chunk_size=8),
        }
        out = {}
        for name, other in runs.items():
            y, _ = memory_chunk(q, k, v, gates, params, other)
            out[name] = [
                float((y[:, s : s + BLOCK] - exact[:, s : s + BLOCK]).norm() / (exact - q)[:, s : s + BLOCK].norm())
                for s in range(0, T, BLOCK)
            ]
    return out


def table() -> str:
    blocks = " | ".join(f"{s}-{s + BLOCK - 1}" for s in range(0, T, BLOCK))
    lines = [f"| shape | gates | compared | {blocks} |", "|---|---|---|" + "---:|" * (T // BLOCK)]
    for shape, (d, e) in SHAPES.items():
        for regime, (low, eta) in REGIMES.items():
            for name, devs in deviations(d, e, low, eta).items():
                lines.append(f"| {shape} | {regime} | {name} | " + " | ".join(f"{x:.2f}" for x in devs) + " |")
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="markdown file: the table replaces the block between its markers")
    args = p.parse_args(argv)
    body = table()
    print(body)
    if args.out:
        cmd = f"`python {' '.join(sys.argv)}` (torch {torch.__version__})"
        write_block(args.out, "deviation", f"{cmd}\n\n{body}", "benchmarks/muon_approx_deviation.py")


if __name__ == "__main__":
    main()
