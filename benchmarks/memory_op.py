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
`--nice -10`). On an idle machine leave the policy unset: PASSIVE slows LAPACK's many short parallel regions, and
with it the factored Muon path's `eigh` evaluation, about 5x (memory_op.md, 2026-12-02). A watchdog aborts a cell
whose RSS would exceed min(--max-mem-gb, 80% of MemAvailable).

Before/after comparisons in one run: `--src LABEL=PATH` names another atlas-kernels source tree (for example a
`git worktree` of an older commit, PATH = its packages/atlas-kernels/src); an op written `OP@LABEL` runs its
cells with PATH first on PYTHONPATH, and the report gives OP / OP@LABEL ratios of speed and peak memory.

Peak memory is RSS. With glibc's default malloc, freed blocks of the chunk loop are often not reused (its
dynamic mmap threshold moves multi-MB tensors onto the heap), so RSS can stay near the no-recomputation
level even when activation checkpointing frees the intermediates; set `MALLOC_MMAP_THRESHOLD_=131072` in the
environment (the cells inherit it; the report prints it) to measure live memory instead.

Examples:
    .venv/bin/python benchmarks/memory_op.py --nice -10 --out benchmarks/memory_op.md   # idle machine
    .venv/bin/python benchmarks/memory_op.py --nice -10 --omp-wait-policy PASSIVE --out F   # shared machine
    .venv/bin/python benchmarks/memory_op.py --ops chunk-titans,titans-pt-b16 --lengths 256,1024 --repeats 3
    .venv/bin/python benchmarks/memory_op.py --profile chunk-titans:1024
    git worktree add --detach /tmp/before HEAD~3
    .venv/bin/python benchmarks/memory_op.py --src before=/tmp/before/packages/atlas-kernels/src \
        --ops chunk-titans@before,chunk-titans --lengths 1024,2048
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field

from memory_op_report import report, write_out
from memory_op_table import DEFAULT_OPS, OPS, B, available_gb, base_op, busy_seconds, profile, run_cell

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
    busy0, t0 = busy_seconds(), time.perf_counter()
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
    foreign = max(0.0, (busy_seconds() - busy0 - own) / wall)
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
    limit = min(args.max_mem_gb, 0.8 * available_gb())  # never push other processes into the OOM killer
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
        busy0, t0 = busy_seconds(), time.perf_counter()
        time.sleep(1.0)
        dt = time.perf_counter() - t0
        waited += dt
        _WAIT_USED[0] += dt
        if (busy_seconds() - busy0) / dt < args.idle_load:
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
        "which avoids 10-100x slowdowns of 2-thread runs when other processes compete for the cores; on an idle "
        "machine it slows LAPACK-heavy ops such as ns_eval=eigh about 5x, so leave it unset there)",
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
    unknown = [op for op in args.ops if base_op(op) not in OPS or ("@" in op and op.split("@", 1)[1] not in args.src)]
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
        write_out(args.out, text, args.block)


if __name__ == "__main__":
    main()
