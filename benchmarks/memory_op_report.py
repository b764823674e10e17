"""The report of the memory-op CPU benchmark (`memory_op.py`): the results table, the speed and memory targets,
and the marked block it writes into a markdown file."""

from __future__ import annotations

import datetime
import math
import os
import platform
from typing import TYPE_CHECKING

from marked_block import write_block
from memory_op_table import OPS, B, D, H, base_op

if TYPE_CHECKING:
    from memory_op import Cell


def _fmt_tps(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}"


def _find(cells: list[Cell], op: str, T: int) -> Cell | None:
    return next((c for c in cells if c.op == op and c.T == T and c.result is not None), None)


def table(cells: list[Cell]) -> str:
    rows = [
        "| op | T | tokens/s (fwd+bwd) | ms / iter: median [min, max] | reps | peak RSS increase (MB) "
        "| MB per 1k positions (B=2) | foreign load (cores) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in cells:
        if c.result is None:
            extra = f" (≈{_fmt_tps(c.extrap_tps)} tok/s, extrap.)" if c.extrap_tps else ""
            rows.append(f"| {c.op} | {c.T} | — | {c.skipped}{extra} | | | | |")
            continue
        r = c.result
        ts = [t * 1e3 for t in r["times_s"]]
        warn = "" if r["finite"] else " (non-finite output or grads!)"
        runs = f" (best of {len(c.tries)} runs: {', '.join(f'{x:.2f}' for x in c.tries)})" if len(c.tries) > 1 else ""
        rows.append(
            f"| {c.op} | {c.T} | {_fmt_tps(c.tps)}{warn} | {c.median_s * 1e3:,.0f} [{min(ts):,.0f}, {max(ts):,.0f}] "
            f"| {len(ts)} | {r['peak_mb']:,.0f} | {r['peak_mb'] / c.T * 1000:,.1f} | {c.foreign_load:.2f}{runs} |"
        )
    return "\n".join(rows)


def targets(cells: list[Cell]) -> str:
    lines = []
    lengths = sorted({c.T for c in cells})

    def ratio_line(a: str, b: str, T: int, goal: float, label: str) -> None:
        ca, cb = _find(cells, a, T), _find(cells, b, T)
        if ca and cb:
            ratio = ca.tps / cb.tps
            verdict = "reached" if ratio >= goal else "NOT reached"
            lines.append(f"- {label}, T={T}: {a} / {b} = {ratio:.2f}x (target >= {goal:g}x: {verdict})")

    for T in lengths:
        ratio_line("chunk-titans", "naive-titans", T, 10, "chunk vs naive")
    for T in lengths:
        ratio_line("chunk-atlas-id", "naive-atlas-id", T, 10, "chunk vs naive (muon)")
    for T in lengths:
        ratio_line("chunk-atlas", "naive-atlas", T, 10, "chunk vs naive (muon, poly)")
    for ours in ("chunk-titans", "chunk-atlas-id", "chunk-atlas"):
        for T in lengths:
            ratio_line(ours, "titans-pt-b16", T, 3, "MLP memory vs titans-pytorch (refresh every chunk)")
    for T in lengths:
        ratio_line("chunk-titans", "titans-pt", T, 3, "MLP memory vs titans-pytorch (default, no refresh)")
    ops = list(dict.fromkeys(c.op for c in cells))
    for op in ops:
        if "@" not in op:
            continue
        new = base_op(op)
        for T in lengths:
            ca, cb = _find(cells, new, T), _find(cells, op, T)
            if ca and cb:
                lines.append(
                    f"- {new} vs {op}, T={T}: tokens/s x{ca.tps / cb.tps:.2f}, "
                    f"peak memory x{ca.result['peak_mb'] / max(cb.result['peak_mb'], 1e-3):.2f}"
                )
    for op in ops:
        done = [c for c in cells if c.op == op and c.result is not None]
        # an op may be listed twice to interleave repeats (A, B, A, B): the slope needs two lengths
        lo, hi = min(done, key=lambda c: c.T, default=None), max(done, key=lambda c: c.T, default=None)
        if lo is not None and hi.T > lo.T:
            slope = math.log(hi.result["peak_mb"] / max(lo.result["peak_mb"], 1e-3)) / math.log(hi.T / lo.T)
            per_tok = ", ".join(f"{c.result['peak_mb'] / c.T * 1000:.0f}" for c in done)
            lines.append(
                f"- peak memory of {op}: log-log slope {slope:.2f} between T={lo.T} and T={hi.T} "
                f"(1 = linear); MB per 1k positions (B=2): {per_tok}"
            )
    return "\n".join(lines)


def _machine() -> str:
    import torch

    mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    gpu = "GPU present (unused)" if torch.cuda.is_available() else "no GPU"
    return f"{os.cpu_count()}-core CPU ({platform.processor() or platform.machine()}) / {mem_gb:.0f} GB / {gpu}"


def report(cells: list[Cell], args, command: str, runtime_s: float) -> str:
    import torch

    # titans-pytorch is only needed by the titans-pt* cells; a run without them must still get its report
    try:
        from importlib.metadata import version

        tp_version = version("titans-pytorch")
    except Exception:
        tp_version = "not installed"
    legend = "\n".join(
        f"- `{name}`: {OPS[base_op(name)][2]}"
        + (f"; atlas-kernels from `{args.src[name.split('@', 1)[1]]}`" if "@" in name else "")
        for name in args.ops
    )
    malloc_env = " ".join(f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("MALLOC_"))
    return "\n".join(
        [
            f"Command: `{command}`",
            "",
            f"Machine: {_machine()}; torch {torch.__version__}, titans-pytorch {tp_version}, "
            f"{args.threads} threads (torch.set_num_threads), float32, cells at nice {args.nice:+d}, "
            f"OMP_WAIT_POLICY={args.omp_wait_policy or os.environ.get('OMP_WAIT_POLICY', 'unset')}; "
            f"malloc env: {malloc_env or 'none (glibc defaults)'}; "
            f"date {datetime.date.today().isoformat()}; "
            f"B={B}, H={H}, head dim {D}; total runtime {runtime_s:.0f} s.",
            "",
            legend,
            "",
            table(cells),
            "",
            "Targets:",
            "",
            targets(cells),
        ]
    )


def write_out(path: str, block: str, name: str) -> None:
    write_block(path, name, block, "benchmarks/memory_op.py")
