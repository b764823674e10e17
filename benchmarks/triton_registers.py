"""Registers, spills and occupancy of the Triton memory kernels on an H100 / H200 (sm_90a), compiled offline.

The one GPU timing of the linear kernel (H200, 2026-12-04, gated delta c = 1 at 340M, 16K tokens) took 0.63 ms
forward and 15.5 ms forward + backward: the backward is ~24x the forward for ~2-3x its FLOPs. Both kernels run
one program per (value block, batch x head), NV x B x H = 256 programs at that shape against 132 SMs, so splitting
the work over more programs (over chunks, as flash-linear-attention does) would not add parallelism there; what
differs is what each program does per chunk. This reads what ptxas reports for each kernel at the paper shapes
(`atlas_kernels.ops.triton_offline`, the kernels' own launch options, bf16): registers per thread, bytes spilled
to local memory per thread (stored and reloaded inside the chunk loop), shared memory, and from those the programs
one SM holds at a time and the waves the 340M batch takes.

    .venv/bin/python benchmarks/triton_registers.py --out benchmarks/triton_registers.md

Each compile runs in its own process (TRITON_INTERPRET=0), two at a time; about 4 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import datetime
import math
import platform
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from marked_block import write_block  # noqa: E402

from atlas_kernels.ops.triton_offline import measure  # noqa: E402

SMS = 132  # H100 SXM / H200
REGS_PER_SM = 65536
SMEM_PER_SM = 228 * 1024
B, T, HEADS = 8, 2048, 16  # the 340M timing batch (benchmarks/kernels_gpu_cases.py): 16K tokens, 16 heads

# (label, module arguments, programs at the 340M batch: value blocks x B x H for the linear kernel, B x H for MLP).
# Two shapes: chunk b = 64 with Omega window c = 4, what the GPU timing rows ran (kernels_gpu_cases.py), and
# b = 16 with c = 8, what every paper-size preset runs (atlas_model.presets: chunk_size 16, omega_window 8)
LIN, MLP, GD = ["linear"], ["mlp", "{dir}"], ["--optimizer", "gd"]  # the MLP kernels default to momentum
MAIN = [
    ("linear gated delta, b 64, c 1 (timing rows)", [*LIN, "gated-delta", "{dir}", "64"], 2 * B * HEADS),
    ("linear Omega, b 64, c 4 (timing rows)", [*LIN, "omega-halo", "{dir}", "64"], 2 * B * HEADS),
    ("linear gated delta, b 16, c 1 (presets)", [*LIN, "gated-delta", "{dir}", "64", "--chunk", "16", "--window", "1"],
     2 * B * HEADS),
    ("linear Omega, b 16, c 8 (presets)", [*LIN, "omega-halo", "{dir}", "64", "--chunk", "16", "--window", "8"],
     2 * B * HEADS),
    ("linear momentum Omega, b 16, c 8", [*LIN, "momentum-halo", "{dir}", "64", "--chunk", "16", "--window", "8"],
     2 * B * HEADS),
    ("linear Omega, D 96 (760M), b 16, c 8", [*LIN, "omega-halo", "{dir}", "96", "--chunk", "16", "--window", "8"],
     3 * B * HEADS),
    ("MLP Titans momentum, b 64, c 1 (timing rows)", [*MLP, "64", "1", "64", "bf16", "mlp"], B * HEADS),
    ("MLP Omega, b 64, c 4 (timing rows)", [*MLP, "64", "4", "64", "bf16", "mlp", *GD], B * HEADS),
    ("gated MLP momentum, b 64, c 4 (timing rows)", [*MLP, "64", "4", "64", "bf16", "gated"], B * HEADS),
    ("MLP Titans momentum, b 16, c 1 (presets)", [*MLP, "16", "1", "64", "bf16", "mlp"], B * HEADS),
    ("MLP Omega, b 16, c 8 (presets)", [*MLP, "16", "8", "64", "bf16", "mlp", *GD], B * HEADS),
    ("gated MLP momentum, b 16, c 8", [*MLP, "16", "8", "64", "bf16", "gated"], B * HEADS),
    ("MLP Omega, D 96 (760M), b 16, c 8", [*MLP, "16", "8", "96", "bf16", "mlp", *GD], B * HEADS),
]  # fmt: skip
# the knobs a launch can turn without touching the kernels, at 340M and the presets' b 16, c 8: value block x warps
# (linear Omega backward), hidden block x warps (MLP Omega backward)
SWEEP = [
    *[(f"linear Omega bwd, BV {bv}, {w} warps", [*LIN, "omega-halo", "bwd", "64", "--chunk", "16", "--window", "8",
                                                 "--block-v", str(bv), "--warps", str(w)], (64 // bv) * B * HEADS)
      for bv in (16, 32, 64) for w in (4, 8, 16)],
    *[(f"MLP Omega bwd, hidden block {bh}, {w} warps", ["mlp", "bwd", "16", "8", "64", "bf16", "mlp", *GD,
                                                        "--block-h", str(bh), "--warps", str(w)], B * HEADS)
      for bh in (16, 32, 64) for w in (4, 8)],
]  # fmt: skip


def report(args: list[str]) -> list[dict] | str:
    try:
        return measure(args)
    except RuntimeError as exc:
        return "ERROR " + (str(exc).strip().splitlines() or ["(no output)"])[-1][:120]


def row(label: str, usage: dict | str, programs: int) -> str:
    if isinstance(usage, str):
        return f"| {label} | {usage} | | | | | | |"
    threads = 32 * usage["num_warps"]
    regs = usage["registers"]
    by_regs = REGS_PER_SM // (max(regs, 1) * threads) if regs else None
    by_smem = SMEM_PER_SM // max(usage["shared"], 1)
    per_sm = min(x for x in (by_regs, by_smem) if x is not None)
    waves = math.ceil(programs / (SMS * per_sm)) if per_sm else "n/a"
    spill_kb = usage["spill_stores"] * threads / 1024 if regs is not None else float("nan")
    return (
        f"| {label} | {usage['num_warps']} | {regs} | {usage['spill_stores']} / {usage['spill_loads']} | "
        f"{spill_kb:,.0f} | {usage['shared'] / 1024:.0f} | {per_sm} | {programs:,} ({waves}) |"
    )


HEAD = [
    "| kernel, shape | warps | registers / thread | spill bytes / thread (stores / loads) | spilled KB / program "
    "| shared KB / program | programs / SM | programs at 340M (waves on 132 SMs) |",
    "|---|---|---|---|---|---|---|---|",
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=None, help="markdown file to write the tables into (marked block)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="the first case only (a smoke run)")
    a = ap.parse_args()
    main_cases = [(f"{label}: {d}", [x.replace("{dir}", d) for x in args], n)
                  for label, args, n in MAIN for d in ("fwd", "bwd")]  # fmt: skip
    sweep = SWEEP
    if a.quick:
        main_cases, sweep = main_cases[:1], []
    with ThreadPoolExecutor(a.jobs) as pool:
        results = list(pool.map(report, [args for _, args, _ in main_cases + sweep]))
    rows = [row(label, r if isinstance(r, str) else r[0], n)
            for (label, _, n), r in zip(main_cases + sweep, results, strict=True)]  # fmt: skip
    import torch
    import triton

    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"Command: `python benchmarks/triton_registers.py{' --out ' + str(a.out) if a.out else ''}`. Compiled for "
        f"sm_90a on {platform.machine()} (no GPU), triton {triton.__version__}, torch {torch.__version__}. Date: "
        f"{stamp}. Programs / SM: the fewer of what the registers (65,536 per SM) and the shared memory (228 KB) "
        "allow.",
        "",
        "The kernels at the 340M / 760M head shapes (bf16, their own launch options):",
        "",
        *HEAD,
        *rows[: len(main_cases)],
    ]
    if sweep:
        lines += ["", "Launch knobs at 340M, b 16, c 8 (the kernels unchanged):", "", *HEAD, *rows[len(main_cases) :]]
    block = "\n".join(lines)
    print(block)
    if a.out:
        write_block(str(a.out), "triton-registers", block, "benchmarks/triton_registers.py")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
