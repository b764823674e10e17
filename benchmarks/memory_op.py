"""CPU benchmark of the memory op: tokens/s of forward+backward and peak memory, side by side in one run.

Compared (B=2, H=4, head dim 32, float32, CPU):
- our chunkwise-parallel op `atlas_kernels.memory_chunk` in several settings (`chunk-*`);
- the token-by-token autograd oracle `memory_naive` (`naive-*`, exact recurrence, chunk size 1);
- lucidrains' titans-pytorch `NeuralMemory` at its closest setting (`titans-pt*`): 2-layer MLP memory
  (expansion 4, GELU, LayerNorm + residual), momentum, chunk 16.

Every (op, T) cell runs in a fresh subprocess: imports, a tiny warm-up at T=32, input creation, then the RSS
high-water mark is reset (`/proc/self/clear_refs` = 5, which also resets `ru_maxrss`) and the baseline RSS is
read; one full-size warm-up fwd+bwd (its peak RSS minus the baseline is the reported peak memory, measured
before the allocator's caches are primed by earlier iterations), then `--repeats` timed fwd+bwd (median
reported). The loss is <o, g> for a fixed random g; gradients flow to q, k, v, the gates and the parameters.
Cells whose linear extrapolation from the previous length of the same op exceeds the time or memory limits are
skipped and labelled as such (the extrapolated number is printed, marked "extrap.").

The machine may be shared: for every cell the CPU time used by *other* processes during the cell is measured
(/proc/stat minus the cell's own CPU time) and printed as "foreign load" (cores); a cell run under a foreign load
above `--retry-load` is retried (up to `--retries` times, cheap cells only) and the least loaded run is kept;
before each cell the driver waits (bounded by `--idle-wait`) for the other processes to go idle. On a loaded
machine, 2-thread OpenMP spin-waiting makes runs 10-100x slower: use `--omp-wait-policy PASSIVE` (and, as root,
`--nice -10`). A watchdog aborts a cell whose RSS would exceed min(--max-mem-gb, 80% of MemAvailable).

Before/after comparisons in one run: `--src LABEL=PATH` names another atlas-kernels source tree (for example a
`git worktree` of an older commit, PATH = its packages/atlas-kernels/src); an op written `OP@LABEL` runs its
cells with PATH first on PYTHONPATH, and the report gives OP / OP@LABEL ratios of speed and peak memory.

Peak memory is RSS. With glibc's default malloc, freed blocks of the chunk loop are often not reused (its
dynamic mmap threshold moves multi-MB tensors onto the heap), so RSS can stay near the no-recomputation
level even when activation checkpointing frees the intermediates; set `MALLOC_MMAP_THRESHOLD_=131072` in the
environment (the cells inherit it; the report prints it) to measure live memory instead.

Examples:
    .venv/bin/python benchmarks/memory_op.py --nice -10 --omp-wait-policy PASSIVE --out benchmarks/memory_op.md
    .venv/bin/python benchmarks/memory_op.py --ops chunk-titans,titans-pt-b16 --lengths 256,1024 --repeats 3
    .venv/bin/python benchmarks/memory_op.py --profile chunk-titans:1024
    git worktree add --detach /tmp/before HEAD~3
    .venv/bin/python benchmarks/memory_op.py --src before=/tmp/before/packages/atlas-kernels/src \
        --ops chunk-titans@before,chunk-titans --lengths 1024,2048
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import math
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field

B, H, D = 2, 4, 32
CHUNK = 16
TINY_T = 32
TITANS_MAX_LR = 0.03
GATE_LOW = 0.9  # gates alpha, theta, gamma ~ U[GATE_LOW, 1); eta ~ ETA_SCALE U[GATE_LOW, 1)
ETA_SCALE = 0.02

# name -> (kind, MemoryConfig kwargs or titans variant, description)
OPS: dict[str, tuple[str, dict, str]] = {
    "chunk-linear": (
        "chunk",
        dict(memory="linear", optimizer="gd", feature_map="identity", bias="l2", window=1, chunk_size=CHUNK),
        "memory_chunk: linear memory, l2 bias (delta rule), gd, identity phi, c=1, b=16",
    ),
    "chunk-titans": (
        "chunk",
        dict(memory="mlp", optimizer="momentum", feature_map="identity", bias="l2", window=1, chunk_size=CHUNK),
        "memory_chunk: Titans-matching: MLP (x4, GELU, LN, residual), l2, momentum, identity phi, c=1, b=16",
    ),
    "chunk-atlas-id": (
        "chunk",
        dict(memory="mlp", optimizer="muon", feature_map="identity", bias="l2", window=4, chunk_size=CHUNK),
        "memory_chunk: Atlas without features: MLP, l2, muon (NS-5), identity phi, c=4, b=16",
    ),
    "chunk-atlas": (
        "chunk",
        dict(memory="mlp", optimizer="muon", feature_map="poly", poly_degree=2, bias="l2", window=4, chunk_size=CHUNK),
        "memory_chunk: Atlas: MLP, l2, muon (NS-5), poly p=2 (D=561), c=4, b=16",
    ),
    "chunk-atlas-id-nockpt": (
        "chunk",
        dict(memory="mlp", optimizer="muon", feature_map="identity", bias="l2", window=4, chunk_size=CHUNK),
        "chunk-atlas-id with checkpoint=False (memory_chunk_torch): every chunk's intermediates kept for the backward",
    ),
    "chunk-titans-ckpt": (
        "chunk",
        dict(memory="mlp", optimizer="momentum", feature_map="identity", bias="l2", window=1, chunk_size=CHUNK),
        "chunk-titans with checkpoint=True (memory_chunk_torch): each chunk recomputed in the backward",
    ),
    "naive-titans": (
        "naive",
        dict(memory="mlp", optimizer="momentum", feature_map="identity", bias="l2", window=1, chunk_size=CHUNK),
        "memory_naive (token loop, exact b=1) at the chunk-titans setting",
    ),
    "naive-atlas-id": (
        "naive",
        dict(memory="mlp", optimizer="muon", feature_map="identity", bias="l2", window=4, chunk_size=CHUNK),
        "memory_naive (token loop, exact b=1) at the chunk-atlas-id setting",
    ),
    "naive-atlas": (
        "naive",
        dict(memory="mlp", optimizer="muon", feature_map="poly", poly_degree=2, bias="l2", window=4, chunk_size=CHUNK),
        "memory_naive (token loop, exact b=1) at the chunk-atlas setting (not in the default set: ~1 min/iter)",
    ),
    "titans-pt-b16": (
        "titans",
        dict(batch_size=CHUNK, strip=True),
        "titans-pytorch NeuralMemory, batch_size=16 (weights refreshed every chunk), projections removed",
    ),
    "titans-pt": (
        "titans",
        dict(batch_size=None, strip=True),
        "titans-pytorch NeuralMemory, default batch_size=None (no refresh in the sequence), projections removed",
    ),
    "titans-pt-b16-proj": (
        "titans",
        dict(batch_size=CHUNK, strip=False),
        "titans-pytorch NeuralMemory stock module (RMSNorm, q/k/v/out projections, retrieve gate), batch_size=16",
    ),
}
# ops that call memory_chunk_torch with an explicit `checkpoint` (memory_chunk decides by itself)
CHECKPOINT = {"chunk-atlas-id-nockpt": False, "chunk-titans-ckpt": True}
DEFAULT_OPS = [name for name in OPS if name != "naive-atlas" and name not in CHECKPOINT]


def _base(op: str) -> str:
    """The OPS entry of an op name, without its `@LABEL` source suffix."""
    return op.split("@", 1)[0]


# ----------------------------------------------------------------------------------------------------------------
# memory accounting (Linux /proc)


def _proc_status_kb(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{key} not in /proc/self/status")


def _reset_peak_rss() -> None:
    """Reset VmHWM (and ru_maxrss) to the current RSS (Linux >= 4.0)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def _rss_mb() -> float:
    return _proc_status_kb("VmRSS") / 1024.0


def _available_gb() -> float:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 2**20
    return float("inf")


def _busy_seconds() -> float:
    """Non-idle CPU seconds of the whole machine since boot (/proc/stat, all cores)."""
    with open("/proc/stat") as f:
        parts = f.readline().split()[1:]
    ticks = [int(x) for x in parts[:8]]  # user nice system idle iowait irq softirq steal
    busy = sum(ticks) - ticks[3] - ticks[4]
    return busy / os.sysconf("SC_CLK_TCK")


# ----------------------------------------------------------------------------------------------------------------
# one cell (runs in a subprocess)


def _build(op: str, T: int, seed: int = 0):
    """Returns (step, tensors): step() runs fwd+bwd once and returns the output; tensors get .grad reset."""
    import torch
    import torch.nn.functional as F

    kind, spec, _ = OPS[_base(op)]
    g = torch.Generator().manual_seed(seed + 1)
    grad_out = torch.randn(B, T, H * D, generator=g)
    if kind in ("chunk", "naive"):
        from atlas_kernels.api import memory_chunk
        from atlas_kernels.config import MemoryConfig
        from atlas_kernels.ops.memory.naive import memory_naive
        from atlas_kernels.ops.memory.params import init_memory_params
        from atlas_kernels.testing import random_inputs

        cfg = MemoryConfig(**spec)
        fn = memory_chunk if kind == "chunk" else memory_naive
        if _base(op) in CHECKPOINT:
            import functools

            from atlas_kernels.ops.memory.chunk import memory_chunk_torch

            fn = functools.partial(memory_chunk_torch, checkpoint=CHECKPOINT[_base(op)])
        q, k, v, gates = random_inputs(
            B, T, H, D, dtype=torch.float32, seed=seed, requires_grad=True, gate_low=GATE_LOW, eta_scale=ETA_SCALE
        )
        gen = torch.Generator().manual_seed(seed + 2)
        params = {n: p.requires_grad_() for n, p in init_memory_params(cfg, H, D, D, generator=gen).items()}
        leaves = [q, k, v, *gates.values(), *params.values()]
        target = grad_out.view(B, T, H, D)

        def step():
            o, _ = fn(q, k, v, gates, params, cfg)
            (o * target).sum().backward()
            return o

        return step, leaves

    from titans_pytorch import NeuralMemory
    from torch import nn

    strip = spec["strip"]
    torch.manual_seed(seed)
    mem = NeuralMemory(
        dim=H * D,
        heads=H,
        dim_head=D,
        chunk_size=CHUNK,
        batch_size=spec["batch_size"],
        momentum=True,
        # the default max inner lr (1.0) diverges with batch_size=16 on these inputs (outputs inf / NaN from
        # T ~ 300-500); with 0.1 the outputs stay finite but the outer gradients overflow at T=4096 (1e27 at
        # T=2048); 0.03 keeps outputs and gradients finite at every length. Speed does not depend on it.
        default_step_transform_max_lr=TITANS_MAX_LR,
        pre_rmsnorm=not strip,
        qkv_receives_diff_views=strip,
        default_model_kwargs=dict(depth=2, expansion_factor=4.0),
    )
    if strip:
        # time the memory itself: q, k, v enter directly ([3, B, T, H*D], the l2-normalised per-head q, k of
        # our op), no output projection / retrieve gate. The per-token lr and per-chunk momentum / decay gates
        # still come from three Linear(128 -> 4) layers inside the module (our op takes gates as inputs).
        mem.to_queries, mem.to_keys, mem.to_values = nn.Identity(), nn.Identity(), nn.Identity()
        mem.combine_heads, mem.retrieve_gate = nn.Identity(), None
        gq = torch.Generator().manual_seed(seed)
        qkv = torch.randn(3, B, T, H, D, generator=gq)
        qkv[:2] = F.normalize(qkv[:2], dim=-1)
        x = qkv.reshape(3, B, T, H * D).requires_grad_()
    else:
        x = torch.randn(B, T, H * D, generator=torch.Generator().manual_seed(seed)).requires_grad_()
    leaves = [x, *mem.parameters()]

    def step():
        o, _ = mem(x)
        (o * grad_out).sum().backward()
        return o

    return step, leaves


def _rss_watchdog(base_mb: float, limit_mb: float, op: str, T: int) -> None:
    """Abort this cell (exit 3) when its RSS grows above limit_mb: a shared machine must not hit the OOM killer."""
    import threading

    def watch():
        while True:
            if _rss_mb() - base_mb > limit_mb:
                msg = f"aborted: RSS grew above the {limit_mb / 1024:.1f} GB cell limit"
                print(json.dumps(dict(op=op, T=T, error=msg)), flush=True)
                os._exit(3)
            time.sleep(0.05)

    threading.Thread(target=watch, daemon=True).start()


def run_cell(op: str, T: int, repeats: int, threads: int, cell_budget: float, mem_limit_gb: float = 1e9) -> dict:
    import torch

    _rss_watchdog(_rss_mb(), 1024 * min(mem_limit_gb, 0.8 * _available_gb()), op, T)
    torch.set_num_threads(threads)
    tiny, tiny_leaves = _build(op, TINY_T, seed=1)  # lazy init of kernels / thread pools, not measured
    tiny()
    del tiny, tiny_leaves
    step, leaves = _build(op, T)
    gc.collect()
    _reset_peak_rss()
    base = _rss_mb()
    times, peaks, finite = [], [], True
    n_target = repeats + 1
    i = 0
    while i < n_target:
        for t in leaves:
            t.grad = None
        gc.collect()
        _reset_peak_rss()
        t0 = time.perf_counter()
        o = step()
        dt = time.perf_counter() - t0
        finite = finite and bool(torch.isfinite(o).all())
        finite = finite and all(bool(torch.isfinite(t.grad).all()) for t in leaves if t.grad is not None)
        del o
        peaks.append(_peak_rss_mb() - base)
        times.append(dt)
        if i == 0:  # adapt the number of timed repeats to the cell budget (at least one)
            n_target = 1 + max(1, min(repeats, int((cell_budget - dt) // max(dt, 1e-9))))
        i += 1
    return dict(
        op=op,
        T=T,
        warmup_s=times[0],
        times_s=times[1:],
        peak_mb=peaks[0],
        peak_mb_all=max(peaks),
        base_rss_mb=base,
        finite=finite,
        threads=torch.get_num_threads(),
    )


# ----------------------------------------------------------------------------------------------------------------
# driver


@dataclass
class Cell:
    op: str
    T: int
    result: dict | None = None
    skipped: str | None = None  # reason
    extrap_tps: float | None = None
    foreign_load: float | None = None
    wall_s: float = 0.0
    tries: list[float] = field(default_factory=list)

    @property
    def median_s(self) -> float | None:
        return statistics.median(self.result["times_s"]) if self.result else None

    @property
    def tps(self) -> float | None:
        return B * self.T / self.median_s if self.result else None


def _spawn(op: str, T: int, args) -> tuple[dict | None, str | None, float, float]:
    """Run one cell in a fresh interpreter -> (result, error, foreign load in cores, wall seconds)."""
    import resource

    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--_cell",
        f"{op}:{T}",
        "--repeats",
        str(args.repeats),
        "--threads",
        str(args.threads),
        "--max-cell-seconds",
        str(args.max_cell_seconds),
        "--max-mem-gb",
        str(args.max_mem_gb),
    ]
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy0, t0 = _busy_seconds(), time.perf_counter()
    try:
        renice = (lambda: os.nice(args.nice)) if args.nice else None
        env = dict(os.environ)
        if "@" in op:
            src = args.src[op.split("@", 1)[1]]
            env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
        if args.omp_wait_policy:
            env["OMP_WAIT_POLICY"] = args.omp_wait_policy
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=args.cell_timeout, preexec_fn=renice, env=env
        )
        rc, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired:
        rc, out, err = None, "", f"timeout after {args.cell_timeout} s"
    wall = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    own = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    foreign = max(0.0, (_busy_seconds() - busy0 - own) / wall)
    errors = [json.loads(ln) for ln in out.splitlines() if ln.startswith('{"op"') and '"error"' in ln]
    if errors:
        return None, errors[-1]["error"], foreign, wall
    if rc != 0:
        why = err if rc is None else f"exit {rc}" + (" (killed: likely out of memory)" if rc in (-9, 137) else "")
        tail = (err.strip().splitlines() or [""])[-1] if rc not in (None, -9, 137) else ""
        return None, f"{why} {tail}".strip(), foreign, wall
    line = [ln for ln in out.splitlines() if ln.startswith("{")][-1]
    return json.loads(line), None, foreign, wall


def _project(prev: Cell, T: int, args) -> tuple[str | None, float]:
    """Linear-in-T extrapolation from the op's previous measured length -> (skip reason or None, tokens/s)."""
    scale = T / prev.T
    t_iter = min(prev.result["times_s"]) * scale  # the least disturbed repeat
    peak_gb = max(prev.result["peak_mb"], 1.0) * scale / 1024
    tps = B * T / t_iter
    limit = min(args.max_mem_gb, 0.8 * _available_gb())  # never push other processes into the OOM killer
    if peak_gb > limit:
        return (
            f"skipped: projected peak {peak_gb:.0f} GB > {limit:.0f} GB limit (linear extrapolation from T={prev.T})"
        ), tps
    if 2 * t_iter > args.max_cell_seconds:
        return (
            f"skipped: projected {2 * t_iter:.0f} s for warm-up + 1 repeat > {args.max_cell_seconds:g} s "
            f"(linear extrapolation from T={prev.T})"
        ), tps
    return None, tps


_WAIT_USED = [0.0]  # seconds spent waiting for idle, whole run
_RETRY_USED = [0.0]  # seconds spent in discarded (loaded) attempts, whole run


def _wait_idle(args) -> float:
    """Sleep (1 s samples) until other processes use < --idle-load cores, within the --idle-wait budgets."""
    waited = 0.0
    while waited < args.idle_wait and _WAIT_USED[0] < args.idle_wait_total:
        busy0, t0 = _busy_seconds(), time.perf_counter()
        time.sleep(1.0)
        dt = time.perf_counter() - t0
        waited += dt
        _WAIT_USED[0] += dt
        if (_busy_seconds() - busy0) / dt < args.idle_load:
            break
    return waited if waited > 1.5 else 0.0


def run_all(args) -> list[Cell]:
    cells: list[Cell] = []
    for op in args.ops:
        prev: Cell | None = None
        for T in args.lengths:
            cell = Cell(op, T)
            cells.append(cell)
            if prev is not None:
                reason, tps = _project(prev, T, args)
                if reason:
                    cell.skipped, cell.extrap_tps = reason, tps
                    print(f"[{op} T={T}] {reason}", file=sys.stderr, flush=True)
                    continue
            waited = _wait_idle(args)
            if waited:
                print(f"[{op} T={T}] waited {waited:.0f} s for other processes to go idle", file=sys.stderr, flush=True)
            best = None
            for attempt in range(1 + args.retries):
                res, err, foreign, wall = _spawn(op, T, args)
                cell.tries.append(round(foreign, 2))
                if best is None or (res is not None and foreign < best[2]):
                    best = (res, err, foreign, wall)
                cheap = wall <= args.max_cell_seconds / 2 and _RETRY_USED[0] + wall <= args.retry_total
                if res is None or foreign <= args.retry_load or not cheap or attempt == args.retries:
                    break
                _RETRY_USED[0] += wall
                print(f"[{op} T={T}] foreign load {foreign:.2f} cores: retrying", file=sys.stderr, flush=True)
                _wait_idle(args)
            cell.result, err, cell.foreign_load, cell.wall_s = best
            if cell.result is None:
                cell.skipped = f"failed: {err}"
                print(f"[{op} T={T}] {cell.skipped}", file=sys.stderr, flush=True)
                break  # longer sequences would fail too
            prev = cell
            r = cell.result
            print(
                f"[{op} T={T}] {cell.tps:,.0f} tok/s, median {cell.median_s * 1e3:.0f} ms over {len(r['times_s'])}, "
                f"peak +{r['peak_mb']:.0f} MB, foreign load {cell.foreign_load:.2f}, cell {cell.wall_s:.0f} s",
                file=sys.stderr,
                flush=True,
            )
    return cells


# ----------------------------------------------------------------------------------------------------------------
# report


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
        new = _base(op)
        for T in lengths:
            ca, cb = _find(cells, new, T), _find(cells, op, T)
            if ca and cb:
                lines.append(
                    f"- {new} vs {op}, T={T}: tokens/s x{ca.tps / cb.tps:.2f}, "
                    f"peak memory x{ca.result['peak_mb'] / max(cb.result['peak_mb'], 1e-3):.2f}"
                )
    for op in ops:
        done = [c for c in cells if c.op == op and c.result is not None]
        if len(done) >= 2:
            lo, hi = done[0], done[-1]
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
    import titans_pytorch
    import torch

    try:
        from importlib.metadata import version

        tp_version = version("titans-pytorch")
    except Exception:  # pragma: no cover
        tp_version = getattr(titans_pytorch, "__version__", "?")
    legend = "\n".join(
        f"- `{name}`: {OPS[_base(name)][2]}"
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


def _write_out(path: str, block: str, name: str) -> None:
    begin, end = f"<!-- {name}:begin (written by benchmarks/memory_op.py) -->", f"<!-- {name}:end -->"
    new = f"{begin}\n{block}\n{end}"
    if os.path.exists(path):
        with open(path) as f:
            text = f.read()
        if begin in text and end in text:
            text = re.sub(re.escape(begin) + r".*?" + re.escape(end), lambda _: new, text, flags=re.S)
        else:
            text = text.rstrip("\n") + "\n\n" + new + "\n"
    else:
        text = f"# Memory op CPU benchmark\n\n{new}\n"
    with open(path, "w") as f:
        f.write(text)


def profile(spec: str, threads: int, top: int = 15) -> None:
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    op, T = spec.rsplit(":", 1)
    torch.set_num_threads(threads)
    step, leaves = _build(op, int(T))
    step()
    for t in leaves:
        t.grad = None
    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=top))


def _csv(kind):
    return lambda s: [kind(x) for x in s.split(",") if x]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", type=_csv(int), default=[256, 1024, 2048, 4096], help="sequence lengths T")
    p.add_argument(
        "--ops",
        type=_csv(str),
        default=DEFAULT_OPS,
        help=f"comma list of {', '.join(OPS)}; OP@LABEL runs OP with the source tree of --src LABEL=PATH",
    )
    p.add_argument(
        "--src",
        action="append",
        default=[],
        metavar="LABEL=PATH",
        help="another atlas-kernels source dir (e.g. a git worktree's packages/atlas-kernels/src), for OP@LABEL",
    )
    p.add_argument("--repeats", type=int, default=3, help="timed repeats after the warm-up (median reported)")
    p.add_argument("--out", help="markdown file to write the results block into (replaced between markers)")
    p.add_argument("--block", default="results", help="name of the marked block of --out to (re)write")
    p.add_argument("--nice", type=int, default=0, help="niceness increment of the cell processes (< 0: root)")
    p.add_argument(
        "--omp-wait-policy",
        choices=["PASSIVE", "ACTIVE"],
        help="OMP_WAIT_POLICY of the cell processes (PASSIVE: idle OpenMP workers sleep instead of spinning, "
        "which avoids 10-100x slowdowns of 2-thread runs when other processes compete for the cores)",
    )
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    p.add_argument("--max-cell-seconds", type=float, default=60.0, help="time budget of one (op, T) cell")
    p.add_argument("--max-mem-gb", type=float, default=12.0, help="skip cells projected above (or > 80%% MemAvailable)")
    p.add_argument("--cell-timeout", type=float, default=400.0, help="hard timeout of one cell subprocess")
    p.add_argument("--retry-load", type=float, default=0.3, help="retry a cell run above this foreign load")
    p.add_argument("--retries", type=int, default=2, help="max retries of a loaded cell (cheap cells only)")
    p.add_argument("--retry-total", type=float, default=90.0, help="max seconds of discarded attempts per run")
    p.add_argument("--idle-load", type=float, default=0.3, help="before a cell, wait until others use < this")
    p.add_argument("--idle-wait", type=float, default=30.0, help="max seconds to wait for idle before one cell")
    p.add_argument("--idle-wait-total", type=float, default=90.0, help="max seconds of idle waiting in a run")
    p.add_argument("--profile", metavar="OP:T", help="profile one fwd+bwd with torch.profiler and exit")
    p.add_argument("--_cell", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if any("=" not in s for s in args.src):
        p.error("--src: expected LABEL=PATH")
    args.src = dict(s.split("=", 1) for s in args.src)
    unknown = [op for op in args.ops if _base(op) not in OPS or ("@" in op and op.split("@", 1)[1] not in args.src)]
    if unknown:
        p.error(f"unknown op(s) or --src label(s) {unknown}; choose from {list(OPS)}")
    args.lengths = sorted(args.lengths)

    if args._cell:
        op, T = args._cell.rsplit(":", 1)
        print(json.dumps(run_cell(op, int(T), args.repeats, args.threads, args.max_cell_seconds, args.max_mem_gb)))
        return
    if args.profile:
        profile(args.profile, args.threads)
        return

    command = " ".join(shlex.quote(a) for a in [".venv/bin/python", "benchmarks/memory_op.py", *sys.argv[1:]])
    t0 = time.perf_counter()
    cells = run_all(args)
    text = report(cells, args, command, time.perf_counter() - t0)
    print(text)
    if args.out:
        _write_out(args.out, text, args.block)


if __name__ == "__main__":
    main()
