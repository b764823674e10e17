"""Which Muon form is faster on a CPU at which memory size: the per-token paths (ns_form="materialise", every
Newton-Schulz step on the r x n iterate, and "gram", the steps on the r x r Gram matrix) against the factored path
(ns_form="lowrank", with the matmul and the eigenvalue evaluation of its polynomial), fwd+bwd of the chunk op, one
thread, float32 inputs, the float64 factored update (the default). This is the measurement behind
`muon_lowrank.FACTORED_MIN_WEIGHT` and the per-token form of ns_form="auto" (docs/muon.md, "Choosing the form").

Each shape is a memory head dim, MLP expansion and feature map (MLP memory, l2, window 4, chunk `--chunk`, B = 4,
H = 4, T = 64); the forms run interleaved, `--repeats` rounds, and the table gives the fastest round of each. The
shape sets: `rule` (the shapes the threshold was read from) and `heldout` (shapes chosen before their numbers were
seen, to check the rule). Usage:

    python benchmarks/muon_forms.py --set rule --set heldout --out benchmarks/muon_forms.md
    python benchmarks/muon_forms.py --set rule --set heldout --chunk 4 --out benchmarks/muon_forms_chunk4.md
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time

# fmt: off
SETS = {
    "rule": [(8, 2, "poly"), (8, 2, "identity"), (16, 2, "poly"), (16, 2, "identity"), (16, 4, "poly"),
             (32, 4, "identity"), (32, 2, "identity"), (24, 4, "identity")],
    "heldout": [(12, 4, "poly"), (8, 4, "poly"), (24, 2, "poly"), (12, 2, "identity"), (64, 2, "identity"),
                (16, 4, "identity"), (32, 1, "identity")],
}
# fmt: on
FORMS = {
    "materialise": {"ns_form": "materialise"},
    "gram": {"ns_form": "gram"},
    "lowrank-matmul": {"ns_eval": "matmul"},
    "lowrank-eigh": {"ns_eval": "eigh"},
}
B, T, H = 4, 64, 4


def _weight_shapes(cfg, D: int) -> list[tuple[int, int]]:
    """(out, in) of every memory weight (the `W*` parameters [H, out, in])."""
    from atlas_kernels import init_memory_params

    return [tuple(p.shape[-2:]) for name, p in init_memory_params(cfg, 1, D, D).items() if name.startswith("W")]


def time_shape(
    D: int, expansion: int, features: str, repeats: int, chunk: int = 16
) -> tuple[list[tuple[int, int]], dict[str, float]]:
    import torch

    from atlas_kernels import MemoryConfig, init_memory_params, memory_chunk
    from atlas_kernels.testing import random_inputs

    base = dict(memory="mlp", optimizer="muon", feature_map=features, poly_degree=2, bias="l2", window=4,
                chunk_size=chunk, expansion=expansion)  # fmt: skip
    best: dict[str, float] = {}
    for _ in range(repeats):
        for name, override in FORMS.items():
            cfg = MemoryConfig(**base, **override)
            q, k, v, gates = random_inputs(B, T, H, D, dtype=torch.float32, seed=0, requires_grad=True,
                                           gate_low=0.9, eta_scale=0.02)  # fmt: skip
            gen = torch.Generator().manual_seed(2)
            params = {n: p.requires_grad_() for n, p in init_memory_params(cfg, H, D, D, generator=gen).items()}
            start = time.perf_counter()
            o, _ = memory_chunk(q, k, v, gates, params, cfg)
            o.square().sum().backward()
            best[name] = min(best.get(name, float("inf")), time.perf_counter() - start)
    return _weight_shapes(MemoryConfig(**base), D), best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--set", action="append", choices=sorted(SETS), help="shape set(s) to run (default: both)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--chunk", type=int, default=16, help="chunk size b (default 16; the CPU model sizes use 4)")
    ap.add_argument("--out", help="write the markdown table here (atomically) as well as to stdout")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    from atlas_kernels import MemoryConfig
    from atlas_kernels.ops.memory.muon_lowrank import FACTORED_MIN_WEIGHT, resolve_ns_form

    lines = [
        f"Command: `python benchmarks/muon_forms.py {' '.join(sys.argv[1:])}`",
        "",
        f"Machine: {os.cpu_count()}-core CPU ({platform.machine()}), torch {torch.__version__}, 1 thread; date "
        f"{datetime.date.today().isoformat()}; B={B}, H={H}, T={T}, MLP memory, l2, window 4, chunk {args.chunk}, "
        "float32 inputs, float64 factored update. Seconds: the fastest of the rounds, fwd+bwd.",
        "",
        f'`auto` column: the form ns_form="auto" picks on a CPU (gram below {FACTORED_MIN_WEIGHT} entries of the '
        "largest weight, factored from there); `best` is the fastest form measured.",
        "",
        "| set | head dim | expansion | features | largest weight | materialise (s) | gram (s) | lowrank-matmul (s) "
        "| lowrank-eigh (s) | materialise / gram | auto | best |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for name in args.set or sorted(SETS, reverse=True):
        for D, expansion, features in SETS[name]:
            shapes, t = time_shape(D, expansion, features, args.repeats, args.chunk)
            largest = max(o * i for o, i in shapes)
            auto = resolve_ns_form(MemoryConfig(optimizer="muon", ns_form="auto"), shapes, torch.device("cpu"))
            best = min(t, key=t.get).split("-")[0]
            lines.append(
                f"| {name} | {D} | {expansion} | {features} | {largest} | {t['materialise']:.3f} | {t['gram']:.3f} | "
                f"{t['lowrank-matmul']:.3f} | {t['lowrank-eigh']:.3f} | {t['materialise'] / t['gram']:.2f} "
                f"| {auto} | {best} |"
            )
            print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
