"""Forward + backward timing rows of the memory ops at the 340M / 760M layer shapes, in `kernels_gpu.py`'s format.

    python benchmarks/gpu/timing_rows.py --rows eager --budget 40 --out timing.md
    python benchmarks/gpu/timing_rows.py --rows compiled --budget 30 --out compiled.md
    ... --smoke   # CPU, Triton interpreter, tiny shapes (rehearsal)

`eager`: the linear memory's rows that the first GPU run never reached (results-2026-11-30-h200.md, "What is left"
2): the Triton op and the torch chunk op for the gated delta rule (c = 1) and the Omega window (c = 4), the torch op
both with its full chunks batched (its default for these memories, ops/memory/linear_scan.py) and with the per-chunk
loop that replaced, and the Omega MLP memory's torch op (c = 4) with its chunks' terms batched
(ops/memory/chunk_terms.py) and with the loop building them per chunk, beside flash-linear-attention's
`chunk_gated_delta_rule` (Gated DeltaNet's kernels: the ceiling a linear memory can reach;
"skipped" with the reason when `fla` is not importable, see wheels.sh). `compiled`: the torch chunk op with its chunk
step under torch.compile, when atlas-kernels offers one (`memory_chunk_torch(..., compiled=True)` or a "compiled"
backend); otherwise every row says so. Its first call compiles (tens of seconds), so it is a step of its own.
`--warm` runs each row's first calls untimed (the eager torch rows, which compile nothing, are left out): session.sh
starts it in the background while the correctness steps run, with triton's and inductor's cache folders
(TRITON_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR) shared with the timed steps, which then load the compiled kernels and
graphs instead of generating them (on a CPU, a second process's first call of the compiled Omega op took 5.6 s
instead of 32.6 s; the call of 2026-12-04 timed one eager row in 30 s, the first calls' compiles taking the rest).
After the timed rows, while the budget lasts, each timed row's step runs once more under torch.profiler
(step_profile.py: kernels launched, busy time and its share of the timed step, the busiest kernel); `--no-profile`
leaves that table out. The helpers (shapes, FLOP model, bench_ms) are `kernels_gpu_cases.py`'s; the
table is rewritten (temp file, then rename) after every row.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import os
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
if "--smoke" in sys.argv:  # the interpreter must be on before anything imports triton.language
    os.environ["TRITON_INTERPRET"] = "1"

import kernels_gpu_cases as cases  # noqa: E402
import torch  # noqa: E402
from step_profile import profile_step  # noqa: E402

COMPILED_CONFIGS = ["gated-delta c=1", "omega c=4", "mlp omega gd c=4"]
# also timed with every chunk one CUDA graph replay (compiled="reduce-overhead"), right after the plain compiled row
GRAPH_CONFIGS = ["mlp omega gd c=4"]
GRAPHS_ROW = "torch chunk op, compiled + CUDA graphs"
LOOP_ROW = "torch chunk op, per-chunk loop"
# the Omega MLP memory's eager op, its full chunks' terms built as one batch (the default) beside the loop building
# them chunk by chunk (LOOP_ROW): the state-independent work moved out of the sequence (ops/memory/chunk_terms.py)
MLP_ROW = "mlp omega gd c=4"
EAGER_TORCH = ("torch chunk op", LOOP_ROW)  # nothing compiles: not warmed
# torch.compile backend of the compiled rows: True = inductor (the real rows); the smoke run traces with "eager",
# which checks the plumbing without inductor's minutes of CPU code generation
COMPILE_WITH: bool | str = True


def compiled_op(graphs: bool = False):
    """(op, None) for the compiled torch chunk op atlas-kernels offers (with CUDA graphs: `graphs`), else
    (None, why)."""
    from atlas_kernels import api
    from atlas_kernels.ops.memory import chunk

    mode = COMPILE_WITH
    if graphs and COMPILE_WITH is True:  # the smoke run's "eager" traces the same plumbing without graphs
        mode = getattr(chunk, "CUDA_GRAPHS", None)
        if mode is None:
            return None, "skipped: atlas-kernels offers no CUDA-graph mode of the compiled op"
    if "compiled" in inspect.signature(chunk.memory_chunk_torch).parameters:
        return functools.partial(chunk.memory_chunk_torch, compiled=mode), None
    if "compiled" in getattr(api, "BACKENDS", ()) and not graphs:
        return functools.partial(api.memory_chunk, backend="compiled"), None
    return None, "skipped: atlas-kernels offers no compiled torch op (no `compiled` option, no 'compiled' backend)"


def op_step(op, B, T, H, D, cfg):
    """(step, forward, leaves) of a memory op with `memory_chunk`'s signature at this shape."""
    q, k, v, gates, p, leaves = cases.memory_inputs(B, T, H, D, cfg)

    def step():
        o, _ = op(q, k, v, gates, p, cfg)
        o.float().sum().backward()

    def forward():
        with torch.no_grad():
            op(q, k, v, gates, p, cfg)

    return step, forward, leaves


def compiled_factory(B, T, H, D, cfg, graphs: bool = False):
    op, why = compiled_op(graphs)
    if op is None:
        return None, why
    return op_step(op, B, T, H, D, cfg), None


def runs(kind: str, model: str, B: int, T: int, H: int, D: int) -> list[tuple]:
    cfgs = {**cases.CONFIGS, **cases.MLP_CONFIGS}
    if kind == "compiled":
        rows = []
        for name in COMPILED_CONFIGS:
            rows.append(("torch chunk op, compiled", name, cfgs[name], compiled_factory, (B, T, H, D, cfgs[name])))
            if name in GRAPH_CONFIGS:
                rows.append((GRAPHS_ROW, name, cfgs[name], compiled_factory, (B, T, H, D, cfgs[name], True)))
        return rows
    gdr, omega, mlp = cfgs["gated-delta c=1"], cfgs["omega c=4"], cfgs[MLP_ROW]
    return [
        ("triton", "gated-delta c=1", gdr, cases.atlas_factory, ("triton", B, T, H, D, gdr)),
        ("fla chunk_gated_delta_rule", "gated-delta c=1", gdr, _fla, (B, T, H, D)),
        ("torch chunk op", "gated-delta c=1", gdr, cases.atlas_factory, ("torch", B, T, H, D, gdr)),
        (LOOP_ROW, "gated-delta c=1", gdr, loop_factory, (B, T, H, D, gdr)),
        ("triton", "omega c=4", omega, cases.atlas_factory, ("triton", B, T, H, D, omega)),
        ("torch chunk op", "omega c=4", omega, cases.atlas_factory, ("torch", B, T, H, D, omega)),
        (LOOP_ROW, "omega c=4", omega, loop_factory, (B, T, H, D, omega)),
        ("torch chunk op", MLP_ROW, mlp, cases.atlas_factory, ("torch", B, T, H, D, mlp)),
        (LOOP_ROW, MLP_ROW, mlp, loop_factory, (B, T, H, D, mlp)),
    ]


def loop_factory(B, T, H, D, cfg):
    """The torch chunk op with its per-chunk loop (`batch_linear=False`, `batch_terms=False`: every chunk builds its
    own terms): the "torch chunk op" rows of the linear memories run their full chunks batched
    (ops/memory/linear_scan.py), the MLP memory's its chunks' terms (ops/memory/chunk_terms.py); this is what those
    replaced."""
    from atlas_kernels.ops.memory import chunk

    options = inspect.signature(chunk.memory_chunk_torch).parameters
    if "batch_linear" not in options:
        return None, "skipped: atlas-kernels has no batched linear path (every torch row is the loop)"
    loop = {"batch_linear": False, **({"batch_terms": False} if "batch_terms" in options else {})}
    return op_step(functools.partial(chunk.memory_chunk_torch, **loop), B, T, H, D, cfg), None


def _fla(B, T, H, D):
    made, why = cases.fla_step(B, T, H, D)
    return made, (None if made else f"skipped: flash-linear-attention {why} (benchmarks/gpu/wheels.sh carries it)")


def warm(step, forward) -> float:
    """Seconds of a row's first forward + backward and forward-only calls: the compiles, nothing timed."""
    start = time.time()
    step()
    forward()
    if cases.DEVICE == "cuda":
        torch.cuda.synchronize()
    return time.time() - start


PROFILE_HEAD = [
    "## Where a step's time goes (one profiled fwd+bwd per timed row, after every row's timing)",
    "",
    "Kernels: device operations one step launches; busy: their summed time; busy share: of the timed fwd+bwd (far "
    "below 100%: the device waits on the host between launches); the busiest kernel's share of busy "
    "(benchmarks/gpu/step_profile.py).",
    "",
    "| model | implementation | config | fwd+bwd ms (timed) | kernels per step | busy ms | busy share "
    "| busiest kernel (share of busy) |",
    "|---|---|---|---|---|---|---|---|",
]


def profile_rows(timed: list[tuple], deadline: float, lines: list[str], save) -> None:
    """One profiled step per timed row, in order, while the budget lasts; the table is saved after each."""
    lines += ["", *PROFILE_HEAD]
    for model, impl, cname, factory, fargs, full in timed:
        row = f"| {model} | {impl} | {cname} | {full:.2f} |"
        if time.time() > deadline - 10:
            lines.append(row + " skipped (time budget) | | | |")
            save(lines)
            continue
        try:
            step, _, leaves = factory(*fargs)[0]
            step()  # the row's compiled kernels are cached in this process: this call only warms
            for leaf in leaves:  # as the timed calls ran: no gradient to accumulate into
                leaf.grad = None
            lines.append(row + " " + " | ".join(profile_step(step).cells(full)) + " |")
        except Exception as exc:
            lines.append(row + error_cells(exc, 3))
        row_done(lines, save)


def error_cells(exc: Exception, blanks: int) -> str:
    """A row's cells for a failure (its type and first line, then `blanks` empty cells): the next row runs."""
    traceback.print_exc()
    msg = str(exc).splitlines()[0][:120] if str(exc) else ""
    return f" ERROR {type(exc).__name__}: {msg} |" + " |" * blanks


def row_done(lines: list[str], save) -> None:
    """After every row: the GPU memory it cached freed, the row printed, the table saved."""
    if cases.DEVICE == "cuda":
        torch.cuda.empty_cache()
    print(lines[-1], flush=True)
    save(lines)


def table(kind: str, budget_s: float, peak: float, save, warm_only: bool = False, profile: bool = True) -> list[str]:
    deadline = time.time() + budget_s
    timed = []  # (model, implementation, config, factory, its arguments, fwd+bwd ms) of every timed row
    lines = [
        f"## Forward + backward ({kind}; bf16, {cases.TOKENS_PER_BATCH} tokens per batch)",
        "",
        f"bf16 matmul roof (measured): **{peak:.0f} TFLOP/s**; model TFLOP/s from the chunkwise FLOP model, as in "
        "kernels_gpu.md.",
        "",
        "| model | T | B | implementation | config | fwd ms | fwd+bwd ms | tokens/s (fwd+bwd) | model TFLOP/s "
        "| % roof |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    if warm_only:
        lines[0] = f"## Compile warm-up ({kind}; first calls only, nothing timed)"
        lines[2] = "Each row's first forward + backward and forward-only calls, for inductor's cache."
    save(lines)  # a file from the start: the first row's compilation can outlast the step
    T = cases.LENGTHS[0]
    B = max(1, cases.TOKENS_PER_BATCH // T)
    for model, (_, H, D) in cases.MODELS.items():
        for impl, cname, cfg, factory, fargs in runs(kind, model, B, T, H, D):
            row = f"| {model} | {T} | {B} | {impl} | {cname} |"
            if time.time() > deadline - 10:
                lines.append(row + " skipped (time budget) | | | | |")
                save(lines)
                continue
            if warm_only and impl in EAGER_TORCH:  # eager torch: nothing compiles, nothing to cache
                lines.append(row + " nothing to compile (not warmed) | | | | |")
                save(lines)
                continue
            try:
                made, why = factory(*fargs)
                if made is None:
                    lines.append(row + f" {why} | | | | |")
                elif warm_only:
                    lines.append(row + f" compiled in {warm(*made[:2]):.1f} s (warm-up, not timed) | | | | |")
                else:
                    step, forward, leaves = made
                    fwd = cases.bench_ms(forward, rep_ms=100)
                    full = cases.bench_ms(step, grad_to_none=leaves)
                    if cfg.memory in ("mlp", "gated_mlp"):
                        flops = cases.mlp_memory_flops(B, T, H, D, cfg.expansion * D, cfg.chunk_size, cfg.window,
                                                       cfg.uses_momentum, cfg.memory == "gated_mlp")  # fmt: skip
                    else:
                        flops = cases.linear_memory_flops(B, T, H, D, D, cfg.chunk_size, cfg.window, cfg.decay_first)
                    tflops = flops / (full * 1e-3) / 1e12
                    timed.append((model, impl, cname, factory, fargs, full))
                    lines.append(row + f" {fwd:.2f} | {full:.2f} | {B * T / (full * 1e-3):,.0f} | {tflops:.1f} | "
                                 f"{100 * tflops / peak:.1f}% |")  # fmt: skip
            except Exception as exc:
                lines.append(row + error_cells(exc, 4))
            row_done(lines, save)
    if profile and not warm_only:
        profile_rows(timed, deadline, lines, save)
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", choices=("eager", "compiled"), default="eager")
    ap.add_argument("--budget", type=float, default=40.0, help="seconds; rows past it are listed as skipped")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--smoke", action="store_true", help="CPU, Triton interpreter, tiny shapes")
    ap.add_argument("--warm", action="store_true", help="run every row's first calls (compiles), time none")
    ap.add_argument("--no-profile", action="store_true", help="no profiled step after the timed rows")
    args = ap.parse_args()
    if args.smoke:
        global COMPILE_WITH
        cases.smoke_setup()
        COMPILE_WITH = "eager"
        del COMPILED_CONFIGS[1:]
        GRAPH_CONFIGS[:] = COMPILED_CONFIGS
    elif not torch.cuda.is_available():
        print("timing_rows.py needs a CUDA GPU (none visible); nothing was run.")
        return 2
    import triton

    device = torch.cuda.get_device_name() if cases.DEVICE == "cuda" else "CPU (smoke run, interpreter)"
    header = [f"- device: {device}; torch {torch.__version__}; triton {triton.__version__}",
              f"- command: `python benchmarks/gpu/timing_rows.py {' '.join(sys.argv[1:])}`", ""]  # fmt: skip

    def save(lines: list[str], done: bool = False) -> None:
        tmp = args.out.with_name(args.out.name + ".tmp")
        tmp.write_text("\n".join(header + lines + ([] if done else ["", "(run in progress)"])) + "\n")
        tmp.replace(args.out)

    start = time.time()
    peak = float("nan") if args.warm else cases.matmul_tflops()  # the warm-up shares the GPU: it measures nothing
    lines = table(
        args.rows, args.budget - (time.time() - start), peak, save, warm_only=args.warm, profile=not args.no_profile
    )
    lines += ["", f"Wall time: {time.time() - start:.0f} s (budget {args.budget:.0f} s)."]
    save(lines, done=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
