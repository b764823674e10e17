"""The linear gd memories with their full chunks batched (`atlas_kernels.ops.memory.linear_scan`) against the
per-chunk loop they replace: kernels per chunk (forward, backward) and CPU time of one forward + backward.

    .venv/bin/python benchmarks/linear_scan.py --out benchmarks/linear_scan.md

Rows: the linear gd memories of the model presets at the 340M shape (16 heads of dim 64, chunk b = 16) that the
batched path covers, and the two linear memories of the GPU call's timing rows (`benchmarks/kernels_gpu_cases.py`:
gated delta c = 1 with decay first, Omega c = 4; l2 bias) at the presets' chunk 16 and at the timing rows' chunk 64.
Kernels: `op_counts.per_chunk` (aten calls that are not views, the difference of a 4-chunk and a 2-chunk call over
two; batched, what runs once per call drops out of that difference and is in the "4-chunk call" columns). Time:
one forward + backward (gradients of q, k, v, the gates and the parameters) over B = 1, T = 2,048, float32, the
median of `--reps` calls after one warm-up, loop and batched alternating in one process, on this machine's CPU
threads. Counts are what a GPU launches; CPU times only say the batched path is not slower where launches are free.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
for pkg in ("atlas-kernels", "atlas-model"):
    sys.path.insert(0, str(ROOT / "packages" / pkg / "src"))

from marked_block import write_block  # noqa: E402
from op_counts import label, op_inputs, per_chunk, preset_memories  # noqa: E402

from atlas_kernels import MemoryConfig  # noqa: E402
from atlas_kernels.ops.memory.chunk import memory_chunk_torch  # noqa: E402
from atlas_kernels.ops.memory.linear_scan import batched_linear  # noqa: E402

H, D, T = 16, 64, 2048
TIMING_ROWS = {  # benchmarks/kernels_gpu_cases.py CONFIGS, at a chunk size given per row
    "gated delta c=1, decay first (GPU timing row)": dict(
        memory="linear", optimizer="gd", feature_map="identity", bias="l2", window=1, decay_first=True
    ),
    "Omega c=4, l2 (GPU timing row)": dict(
        memory="linear", optimizer="gd", feature_map="identity", bias="l2", window=4
    ),
}


def rows() -> list[tuple[str, MemoryConfig]]:
    out = []
    for lab, (names, cfg, heads, dim) in preset_memories("340M").items():
        if batched_linear(cfg, dim):
            assert (heads, dim) == (H, D), (lab, heads, dim)
            out.append((f"{lab} ({', '.join(names)})", cfg))
    for name, fields in TIMING_ROWS.items():
        for b in (16, 64):
            out.append((f"{name}, b={b}", MemoryConfig(**fields, chunk_size=b)))
    return out


# the two paths compared: the per-chunk loop (every chunk builds its own terms too) and the batched chunks
MODES = {False: {"batch_linear": False, "batch_terms": False}, True: {"batch_linear": True}}


def step_ms(cfg: MemoryConfig, **op_kwargs) -> float:
    """One timed forward + backward after one untimed (fresh inputs; the first call builds cached constants);
    `op_kwargs` go to `memory_chunk_torch`."""
    q, k, v, gates, params, leaves = op_inputs(cfg, H, D, T)

    def once() -> float:
        start = time.perf_counter()
        o, _ = memory_chunk_torch(q, k, v, gates, params, cfg, **op_kwargs)
        torch.autograd.grad(o.square().sum(), leaves, allow_unused=True)
        return (time.perf_counter() - start) * 1e3

    once()
    return once()


def measure(cases: list[tuple[str, MemoryConfig]], reps: int, modes: dict[bool, dict] = MODES) -> list[dict]:
    """Kernels per chunk and the median fwd+bwd time of each case under both `modes` (False: before, True: after)."""
    results = []
    for name, cfg in cases:
        counts = {mode: per_chunk(cfg, H, D, **kw) for mode, kw in modes.items()}
        times = {False: [], True: []}
        for _ in range(reps):  # alternate, so that a change in the machine's load hits both
            for mode, kw in modes.items():
                times[mode].append(step_ms(cfg, **kw))
        ms = {mode: statistics.median(t) for mode, t in times.items()}
        results.append({"name": name, "cfg": label(cfg), "counts": counts, "ms": ms})
        print(f"{name}: {ms[False]:.0f} -> {ms[True]:.0f} ms", flush=True)
    return results


def _per_chunk(counts: dict, part: str, mode: bool) -> str:
    return f"{counts[mode][part]['kernels']:g}"


def _call_total(counts: dict, mode: bool) -> int:
    return int(counts[mode]["fwd"]["kernels total"] + counts[mode]["bwd"]["kernels total"])


def table(results: list[dict], after: str = "batched") -> str:
    head = (
        f"| memory (presets) | kernels / chunk fwd: loop -> {after} | bwd: loop -> {after} | 4-chunk call fwd + bwd: "
        f"loop -> {after} | fwd+bwd ms, T 2048: loop | {after} | speed-up |\n|---|---|---|---|---:|---:|---:|"
    )
    lines = [head]
    for r in results:
        per = functools.partial(_per_chunk, r["counts"])
        total = functools.partial(_call_total, r["counts"])
        lines.append(
            f"| {r['name']} | {per('fwd', False)} -> {per('fwd', True)} | {per('bwd', False)} -> {per('bwd', True)} "
            f"| {total(False)} -> {total(True)} | {r['ms'][False]:.0f} | {r['ms'][True]:.0f} "
            f"| {r['ms'][False] / r['ms'][True]:.1f}x |"
        )
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=3, help="timed calls per path and row (median; default 3)")
    p.add_argument("--out", help="write the table into this markdown file (the block between markers)")
    args = p.parse_args(argv)
    results = measure(rows(), args.reps)
    header = run_header("linear_scan.py", argv)
    body = table(results)
    print(body)
    if args.out:
        write_block(args.out, "linear-scan", f"{header}\n\n{body}", "benchmarks/linear_scan.py")


def run_header(script: str, argv) -> str:
    cpu = platform.processor() or platform.machine()
    return (
        f"Command: `python benchmarks/{script} {shlex.join(argv if argv is not None else sys.argv[1:])}`. "
        f"Machine: {cpu} CPU, {torch.get_num_threads()} threads, torch {torch.__version__}. "
        f"Date: {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC. 340M head shape (H {H}, d {D}), "
        f"batch 1, float32."
    )


if __name__ == "__main__":
    main()
