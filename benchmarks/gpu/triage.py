"""Which Triton kernel faults on this GPU: every kernel alone, forward then backward, each in its own process.

A CUDA fault (illegal address) poisons the whole process, so a check that runs many kernels in one process blames
whichever kernel happens to synchronise next. Here every case runs in a fresh Python with CUDA_LAUNCH_BLOCKING=1
and a synchronise after the forward and after the backward, so the line names the stage that faulted.

    python benchmarks/gpu/triage.py [--out triage.md] [--jobs 8] [--only linear,mlp]
    python benchmarks/gpu/triage.py --case linear-gd-c1-bf16-tiny --stage fwd   # one case (e.g. under a sanitizer)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TINY = (1, 64, 1, 16)  # B, T, H, D: one chunk of 64 at the smallest tile
ODD = (2, 77, 2, 32)  # two chunks, a partial last one
REAL = (2, 2048, 16, 64)  # the 340M layer


def _cases() -> dict[str, dict]:
    cases = {}
    for dtype in ("bf16", "fp32"):
        for opt in ("gd", "momentum"):
            for c in (1, 3):
                for kind in ("linear", "mlp"):
                    cases[f"{kind}-{opt}-c{c}-{dtype}-tiny"] = {
                        "kind": kind, "opt": opt, "window": c, "dtype": dtype, "shape": TINY,
                    }  # fmt: skip
    for opt in ("gd", "momentum"):
        for kind in ("linear", "mlp"):
            cases[f"{kind}-{opt}-c3-bf16-odd"] = {"kind": kind, "opt": opt, "window": 3, "dtype": "bf16", "shape": ODD}
    for kind in ("linear", "mlp"):
        cases[f"{kind}-gd-c1-bf16-real"] = {"kind": kind, "opt": "gd", "window": 1, "dtype": "bf16", "shape": REAL}
    cases["ns-bf16"] = {"kind": "ns", "dtype": "bf16", "shape": (64, 32, 48)}
    cases["poly-bf16"] = {"kind": "poly", "dtype": "bf16", "shape": (1, 2, 64, 16)}
    return cases


def run_case(name: str, stage: str) -> dict:
    """Run one case in this process; returns {"fwd": "ok", "bwd": "ok" | error ratios}."""
    import torch

    from atlas_kernels import MemoryConfig
    from atlas_kernels.ops.memory.triton import checks as tc
    from atlas_kernels.ops.memory.triton import mlp_checks as tmc

    spec = _cases()[name]
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[spec["dtype"]]
    if spec["kind"] == "ns":
        return tc.check_newton_schulz(spec["shape"], dtype=dtype, device="cuda")
    if spec["kind"] == "poly":
        return tc.check_poly_features(spec["shape"], 2, dtype=dtype, device="cuda")
    B, T, H, D = spec["shape"]
    cfg = MemoryConfig(
        memory=spec["kind"], optimizer=spec["opt"], feature_map="identity", bias="l2", window=spec["window"],
        chunk_size=64,
    )  # fmt: skip
    if spec["kind"] == "linear":
        from atlas_kernels.ops.memory.triton.linear import memory_chunk_triton as op

        inputs = tc.linear_memory_inputs(cfg, B, T, H, D, D, dtype=dtype, device="cuda")
    else:
        from atlas_kernels.ops.memory.triton.mlp import memory_chunk_triton_mlp as op

        inputs = tmc.mlp_memory_inputs(cfg, B, T, H, D, dtype=dtype, device="cuda")
    torch.cuda.synchronize()
    if stage == "fwd":
        with torch.no_grad():
            op(*inputs, cfg)
        torch.cuda.synchronize()
        return {"fwd": "ok"}
    if spec["kind"] == "linear":
        return tc.check_linear_memory(cfg, B, T, H, D, D, dtype=dtype, device="cuda")
    return tmc.check_mlp_memory(cfg, B, T, H, D, dtype=dtype, device="cuda")


def _subprocess(name: str, stage: str, timeout: float) -> tuple[str, str, str]:
    env = dict(os.environ, CUDA_LAUNCH_BLOCKING="1")
    cmd = [sys.executable, __file__, "--case", name, "--stage", stage]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return name, stage, "timeout"
    if p.returncode == 0:
        return name, stage, p.stdout.strip().splitlines()[-1]
    err = [ln for ln in p.stderr.strip().splitlines() if ln.strip()]
    return name, stage, "FAULT: " + (err[-1] if err else f"exit {p.returncode}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case")
    ap.add_argument("--stage", choices=["fwd", "all"], default="all")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--jobs", type=int, default=8)
    ap.add_argument("--only", default="", help="comma-separated name prefixes")
    ap.add_argument("--timeout", type=float, default=240)
    args = ap.parse_args()
    if args.case:
        res = run_case(args.case, args.stage)
        print(json.dumps({k: (round(v, 6) if isinstance(v, float) else v) for k, v in res.items()}))
        return 0
    prefixes = [p for p in args.only.split(",") if p]
    names = [n for n in _cases() if not prefixes or any(n.startswith(p) for p in prefixes)]
    jobs = [(n, s) for n in names for s in ("fwd", "all") if not n.startswith(("ns", "poly")) or s == "all"]
    start = time.time()
    with ThreadPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(lambda j: _subprocess(*j, args.timeout), jobs))
    lines = ["| case | stage | result |", "|---|---|---|"]
    lines += [f"| {n} | {s} | {r[:300]} |" for n, s, r in rows]
    lines.append(f"\n{len(rows)} runs in {time.time() - start:.0f} s")
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
