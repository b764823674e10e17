#!/usr/bin/env python
"""GPU benchmark of the Triton kernels of atlas-kernels: correctness at real shapes, then forward+backward speed.

    python benchmarks/kernels_gpu.py [--out benchmarks/kernels_gpu_results.md] [--budget 270] [--quick]
    python benchmarks/kernels_gpu.py --only mlp  # the MLP memory only (checks + timing)
    python benchmarks/kernels_gpu.py --smoke     # CPU plumbing check: Triton interpreter, tiny shapes, no timing

1. Correctness (bf16 inputs, fp32 torch reference on the same rounded inputs; error ratio rms(out-ref)/rms(ref)):
   the linear memory (outputs, final state, every input gradient) for three configurations at the 340M and 760M
   layer shapes, Newton-Schulz at Muon shapes, phi(l2norm(x)); the MLP memory (Titans momentum c=1, OmegaNet-style
   gd c=4, gated MLP momentum c=4) at the 340M shape, held to max(tol, 3x the torch op's own bf16 error). As in
   tests/test_triton_gpu.py.
2. A bf16 matmul rate (8192^3), the roof the TFLOP/s are reported against.
3. Forward+backward wall time at d_model 1024 / 1536 (16 heads of 64 / 96), T = 2048 and 4096, 16K tokens per
   batch, bf16, for: the Triton op, the PyTorch chunk op (memory_chunk backend="torch"), titans-pytorch
   NeuralMemory (a full layer: projections + linear memory model + momentum; its own semantics) and
   flash-linear-attention's chunk_gated_delta_rule (imported lazily; "not installed" if absent).
   TFLOP/s use the FLOP count of the chunkwise linear-memory algorithm at that shape (useful multiply-adds of the
   forward and the hand-written backward, no padding) for every implementation, so the column compares speed on
   the same task, not the FLOPs each implementation actually executes.
   MLP memory (x + LN(W1 gelu(W2 x)), hidden 4D; and gated, x + LN(W1 (gelu(W2 x) * W3 x))): the Triton MLP op
   (Triton forward and backward kernels, each chunk recomputed in the backward), the torch chunk op, and
   titans-pytorch NeuralMemory with MemoryMLP(depth=2, expansion 4); its TFLOP/s use the useful FLOPs of the
   chunkwise MLP forward (`mlp_memory_flops`) x 3 for fwd+bwd.
A global time budget (default 270 s) skips what is left and says so; the whole script is meant to take < 5 min.
Writes a markdown report (--out) and prints it.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
import traceback
from pathlib import Path

import kernels_gpu_cases as cases
import torch
from kernels_gpu_cases import (
    atlas_factory,
    bench_ms,
    fla_step,
    linear_memory_flops,
    matmul_tflops,
    mlp_memory_flops,
    titans_step,
)


class Budget:
    def __init__(self, seconds: float):
        self.deadline = time.time() + seconds

    def left(self) -> float:
        return self.deadline - time.time()

    def ok(self, need: float = 0.0) -> bool:
        return self.left() > need


# ----------------------------------------------------------------------------------------------------------------
# sections
# ----------------------------------------------------------------------------------------------------------------


def correctness(budget: Budget, quick: bool, only: str = "all") -> list[str]:
    from atlas_kernels.ops.memory.triton.checks import check_linear_memory, check_newton_schulz, check_poly_features
    from atlas_kernels.ops.memory.triton.mlp_checks import check_mlp_memory

    if only == "atlas":  # no Triton kernel in these rows; the CPU tests check the torch paths in float64
        return ["## Correctness", "", "Not run with `--only atlas` (torch chunk op only; test_muon_lowrank.py).", ""]
    lines = ["## Correctness (bf16 inputs vs fp32 torch reference, max error ratio over all tensors)", ""]
    lines += ["| check | shape | max err ratio | worst tensor | tol | result |", "|---|---|---|---|---|---|"]
    jobs = []
    sname, shape = next(iter(cases.CHECK_SHAPES.items()))
    for cname, cfg in cases.MLP_CONFIGS.items():  # (triton errors, torch-in-bf16 errors): see _mlp_pass
        jobs.append((cname, sname, "mlp", lambda cfg=cfg, s=shape: check_mlp_memory(
            cfg, *s, dtype=torch.bfloat16, device=cases.DEVICE, baseline=True)))  # fmt: skip
    if only == "mlp":
        jobs = [job for job in jobs if job[2] == "mlp"]
    elif only == "linear":
        jobs = []
    for cname, cfg in cases.CHECK_CONFIGS.items() if only != "mlp" else ():
        for sname, shape in cases.CHECK_SHAPES.items():
            if quick and sname != next(iter(cases.CHECK_SHAPES)):
                continue
            jobs.append((f"linear memory {cname}", sname, "linear", lambda cfg=cfg, s=shape: check_linear_memory(
                cfg, *s, s[-1], dtype=torch.bfloat16, device=cases.DEVICE)))  # fmt: skip
    for shape in cases.NS_SHAPES if only != "mlp" else ():
        jobs.append(("newton-schulz k=5", "x".join(map(str, shape)), "ns", lambda s=shape: check_newton_schulz(
            s, dtype=torch.bfloat16, device=cases.DEVICE)))  # fmt: skip
    if only != "mlp":
        jobs.append(("phi(l2norm(x)) p=2", "x".join(map(str, cases.POLY_SHAPE)), "poly", lambda: check_poly_features(
            cases.POLY_SHAPE, 2, dtype=torch.bfloat16, device=cases.DEVICE)))  # fmt: skip
    for name, shape, kind, job in jobs:  # the first call of each kernel variant includes its compilation
        if not budget.ok(60):
            lines.append(f"| {name} | {shape} | - | - | {cases.TOL[kind]} | skipped (time budget) |")
            continue
        try:
            errs = job()
            base = None
            if kind == "mlp":  # the kernel vs max(tol, 3x the torch op's own bf16 error) per tensor
                errs, base = errs
                worst = max(errs, key=lambda n: errs[n] / max(cases.TOL[kind], 3 * base[n]))
                ok = all(errs[n] <= max(cases.TOL[kind], 3 * base[n]) for n in errs)
            else:
                worst = max(errs, key=errs.get)
                ok = errs[worst] <= cases.TOL[kind]
            note = f" (torch bf16: {base[worst]:.2e})" if base is not None else ""
            lines.append(
                f"| {name} | {shape} | {errs[worst]:.2e}{note} | {worst} | {cases.TOL[kind]} | "
                f"{'PASS' if ok else 'FAIL'} |"
            )
        except Exception as exc:  # report and go on
            lines.append(f"| {name} | {shape} | - | - | {cases.TOL[kind]} | ERROR {type(exc).__name__}: {exc} |")
            traceback.print_exc()
        print(lines[-1], flush=True)
    return lines


def timing(budget: Budget, peak: float, quick: bool, only: str = "all") -> list[str]:
    lines = [
        "## Forward + backward (bf16, 16K tokens per batch)",
        "",
        f"bf16 matmul roof (8192^3, measured): **{peak:.0f} TFLOP/s**. Model TFLOP/s = FLOPs of the chunkwise",
        "linear-memory algorithm at that shape (b = 64) / time, for every implementation (MLP rows: the chunkwise",
        "MLP-memory FLOPs, `mlp_memory_flops`); % = of the matmul roof.",
        "",
        "| model | T | B | implementation | config | fwd ms | fwd+bwd ms | tokens/s (fwd+bwd) | model TFLOP/s "
        "| % roof |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for model, (d_model, H, D) in cases.MODELS.items():
        for T in cases.LENGTHS:
            if quick and (model, T) != ("340M", 2048):
                continue
            B = cases.TOKENS_PER_BATCH // T
            gdr, omega, mom = (
                cases.CONFIGS["gated-delta c=1"],
                cases.CONFIGS["omega c=4"],
                cases.CHECK_CONFIGS["momentum c=2"],
            )
            # (implementation, config name, config, factory, factory arguments), most important first
            runs = [
                ("triton", "gated-delta c=1", gdr, atlas_factory, ("triton", B, T, H, D, gdr)),
                ("fla chunk_gated_delta_rule", "gated-delta c=1", gdr, fla_step, (B, T, H, D)),
                ("triton", "omega c=4", omega, atlas_factory, ("triton", B, T, H, D, omega)),
                ("torch chunk op", "gated-delta c=1", gdr, atlas_factory, ("torch", B, T, H, D, gdr)),
                ("torch chunk op", "omega c=4", omega, atlas_factory, ("torch", B, T, H, D, omega)),
                ("triton", "momentum c=2", mom, atlas_factory, ("triton", B, T, H, D, mom)),
                (
                    "titans NeuralMemory (layer)",
                    "linear MLP depth 1, momentum",
                    mom,
                    titans_step,
                    (B, T, d_model, H, D),
                ),
                ("torch chunk op", "momentum c=2", mom, atlas_factory, ("torch", B, T, H, D, mom)),
            ]
            titans_mlp, omega_mlp = cases.MLP_CONFIGS["mlp titans momentum c=1"], cases.MLP_CONFIGS["mlp omega gd c=4"]
            gated_mlp = cases.MLP_CONFIGS["gated mlp momentum c=4"]
            mlp_runs = [
                ("triton (MLP)", "mlp titans momentum c=1", titans_mlp, atlas_factory,
                 ("triton", B, T, H, D, titans_mlp)),
                ("torch chunk op", "mlp titans momentum c=1", titans_mlp, atlas_factory,
                 ("torch", B, T, H, D, titans_mlp)),
                ("titans NeuralMemory (layer)", "MemoryMLP depth 2 x4, momentum", titans_mlp, titans_step,
                 (B, T, d_model, H, D, 2)),
                ("triton (MLP)", "mlp omega gd c=4", omega_mlp, atlas_factory, ("triton", B, T, H, D, omega_mlp)),
                ("torch chunk op", "mlp omega gd c=4", omega_mlp, atlas_factory, ("torch", B, T, H, D, omega_mlp)),
                ("triton (MLP)", "gated mlp momentum c=4", gated_mlp, atlas_factory,
                 ("triton", B, T, H, D, gated_mlp)),
                ("torch chunk op", "gated mlp momentum c=4", gated_mlp, atlas_factory,
                 ("torch", B, T, H, D, gated_mlp)),
            ]  # fmt: skip
            runs = {"all": runs + mlp_runs, "linear": runs, "mlp": mlp_runs}[only]
            for impl, cname, cfg, factory, factory_args in runs:
                row = f"| {model} | {T} | {B} | {impl} | {cname} |"
                if not budget.ok(20):
                    lines.append(row + " skipped (time budget) | | | | |")
                    continue
                try:
                    made, why = factory(*factory_args)
                    if made is None:
                        lines.append(row + f" {why} | | | | |")
                        continue
                    step, forward, leaves = made
                    fwd = bench_ms(forward, rep_ms=100)
                    full = bench_ms(step, grad_to_none=leaves)
                    if cfg.memory in ("mlp", "gated_mlp"):
                        flops = mlp_memory_flops(B, T, H, D, cfg.expansion * D, cases.CHUNK, cfg.window,
                                                 cfg.uses_momentum, cfg.memory == "gated_mlp")  # fmt: skip
                    else:
                        flops = linear_memory_flops(B, T, H, D, D, cases.CHUNK, cfg.window, cfg.decay_first)
                    tflops = flops / (full * 1e-3) / 1e12
                    lines.append(
                        row + f" {fwd:.2f} | {full:.2f} | {B * T / (full * 1e-3):,.0f} | {tflops:.1f} | "
                        f"{100 * tflops / peak:.1f}% |"
                    )
                except Exception as exc:
                    msg = str(exc).splitlines()[0][:120] if str(exc) else ""
                    lines.append(row + f" ERROR {type(exc).__name__}: {msg} | | | | |")
                    traceback.print_exc()
                finally:
                    if cases.DEVICE == "cuda":
                        torch.cuda.empty_cache()
                print(lines[-1], flush=True)
    return lines


# seconds a row of atlas_timing needs left before its first call, and before its timed repeats (+ 2x the first)
ATLAS_ROW_RESERVE_S = 15.0
ATLAS_REPEAT_RESERVE_S = 5.0


def atlas_timing(budget: Budget, quick: bool, save=lambda lines: None) -> list[str]:
    """Atlas's memory (MLP, degree-2 features, c = 4) in the torch chunk op with each Muon path, as ratios to the same
    op with gd (the GD twin: OmegaNet's price), at the ATLAS_SHAPES; `quick`: the first shape only. `save(lines)` is
    called after every row, so that a run cut short keeps the rows it finished."""
    lines = [
        "## Atlas's Muon paths beside the GD twin (torch chunk op, bf16 inputs, chunk 16, window 4)",
        "",
        "Each row: best of 2 timed calls after a first, untimed one (its time alone, marked, when the budget has no",
        "room for more); peak = GPU memory the first forward+backward allocates beyond its inputs; vs GD twin =",
        "fwd+bwd time / the twin's at the same shape. docs/muon.md: the factored path with its float64 update is the",
        "default; the approximate Muon is a labelled option, never a default.",
        "",
        "| model | T | B | config | fwd ms | fwd+bwd ms | tokens/s (fwd+bwd) | peak GiB | vs GD twin |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for i, (model, (B, T)) in enumerate(cases.ATLAS_SHAPES.items()):
        if quick and i > 0:
            continue
        _, H, D = cases.MODELS[model]
        twin_ms = None
        for name, cfg in cases.ATLAS_CONFIGS.items():
            row = f"| {model} | {T} | {B} | {name} |"
            # the table is rewritten after every row, so a row cut by the step's limit loses only itself: the
            # reserves are small (a GPU call on 2026-12-04 skipped every Muon row at a 30 s reserve)
            if not budget.ok(ATLAS_ROW_RESERVE_S):
                lines.append(row + " skipped (time budget) | | | | |")
                print(lines[-1], flush=True)
                continue
            try:
                step, forward, leaves = cases.atlas_step("torch", B, T, H, D, cfg)
                first_ms, peak = cases.first_call(step, leaves)
                # the first call compiles (Triton sub-ops) and is much slower than the timed ones after it
                if budget.ok(ATLAS_REPEAT_RESERVE_S + 2e-3 * first_ms):  # two more fwd+bwd and three forwards
                    fwd = f"{cases.time_ms(forward):.1f}"
                    full = cases.time_ms(step, warm=True)
                    full_cell = f"{full:.1f}"
                else:
                    fwd, full = "-", first_ms
                    full_cell = f"{full:.1f} (first call only)"
                twin_ms = full if name == cases.ATLAS_TWIN else twin_ms
                ratio = f"{full / twin_ms:.1f}x" if twin_ms else "-"
                mem = "-" if peak is None else f"{peak:.1f}"
                lines.append(row + f" {fwd} | {full_cell} | {B * T / (full * 1e-3):,.0f} | {mem} | {ratio} |")
            except torch.OutOfMemoryError:
                lines.append(row + " out of memory | | | | |")
            except Exception as exc:
                msg = str(exc).splitlines()[0][:120] if str(exc) else ""
                lines.append(row + f" ERROR {type(exc).__name__}: {msg} | | | | |")
                traceback.print_exc()
            finally:
                step = forward = leaves = None
                if cases.DEVICE == "cuda":
                    torch.cuda.empty_cache()
            print(lines[-1], flush=True)
            save(lines)
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(cases.ROOT / "benchmarks" / "kernels_gpu_results.md"))
    parser.add_argument("--budget", type=float, default=270.0, help="seconds for the whole script")
    parser.add_argument("--quick", action="store_true", help="one shape only")
    parser.add_argument("--skip-checks", action="store_true", help="timing only")
    parser.add_argument(
        "--only",
        choices=("all", "linear", "mlp", "atlas"),
        default="all",
        help="which memory kernels (atlas: the torch chunk op's Muon paths beside the GD twin, timing only)",
    )
    parser.add_argument("--smoke", action="store_true", help="CPU plumbing check (Triton interpreter, tiny shapes)")
    args = parser.parse_args()
    if args.smoke:
        cases.smoke_setup()
    elif not torch.cuda.is_available():
        print("kernels_gpu.py needs a CUDA GPU (no CUDA device visible); nothing was run.")
        return 2
    start = time.time()
    budget = Budget(args.budget)
    import triton

    device_name = torch.cuda.get_device_name() if cases.DEVICE == "cuda" else "CPU (smoke run, interpreter)"
    header = [
        "# atlas-kernels: Triton kernels on GPU",
        "",
        f"- device: {device_name}; torch {torch.__version__}; triton {triton.__version__}; "
        f"python {platform.python_version()}",
        f"- command: `python benchmarks/kernels_gpu.py {' '.join(sys.argv[1:])}`",
        "",
    ]

    def save(more: list[str]) -> str:  # temp file, then rename: a run cut short leaves a complete earlier report
        text = "\n".join(header + lines + more) + "\n"
        tmp = Path(f"{args.out}.tmp")
        tmp.write_text(text)
        tmp.replace(args.out)
        return text

    lines = [] if args.skip_checks else correctness(budget, args.quick, args.only)
    if args.only != "atlas":
        peak = matmul_tflops()
        lines += [""] + timing(budget, peak, args.quick, args.only)
    if args.only in ("all", "atlas"):
        lines += [""] + atlas_timing(budget, args.quick, lambda rows: save(["", *rows, "", "(run in progress)"]))
    lines += ["", f"Total wall time: {time.time() - start:.0f} s (budget {args.budget:.0f} s)."]
    text = save([])
    print(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
