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
import inspect
import math
import os
import platform
import sys
import time
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "packages" / "atlas-kernels" / "src"))

from atlas_kernels import MemoryConfig, memory_chunk  # noqa: E402

MODELS = {"340M": (1024, 16, 64), "760M": (1536, 16, 96)}  # d_model, heads, head dim
LENGTHS = (2048, 4096)
TOKENS_PER_BATCH = 16384
CHUNK = 64
CONFIGS = {
    # the gated delta rule (fla's ordering): comparable with chunk_gated_delta_rule
    "gated-delta c=1": MemoryConfig(
        memory="linear", optimizer="gd", feature_map="identity", bias="l2", window=1, chunk_size=CHUNK, decay_first=True
    ),
    # Omega-style window of 4 tokens (l2 bias, gamma gates, carried halo)
    "omega c=4": MemoryConfig(
        memory="linear", optimizer="gd", feature_map="identity", bias="l2", window=4, chunk_size=CHUNK
    ),
}
CHECK_CONFIGS = {
    **CONFIGS,
    "momentum c=2": MemoryConfig(
        memory="linear", optimizer="momentum", feature_map="identity", bias="l2", window=2, chunk_size=CHUNK
    ),
    "swla-dot c=4 b=32": MemoryConfig(
        memory="linear", optimizer="gd", feature_map="identity", bias="dot", window=4, chunk_size=32
    ),
}
MLP_CONFIGS = {
    # Titans-style: MLP memory with LN, momentum, online (c = 1)
    "mlp titans momentum c=1": MemoryConfig(memory="mlp", optimizer="momentum", window=1, chunk_size=CHUNK),
    # OmegaNet-style: MLP memory with LN, gd, window of 4 tokens with gamma gates
    "mlp omega gd c=4": MemoryConfig(memory="mlp", optimizer="gd", window=4, chunk_size=CHUNK),
    # the gated-MLP memory of the paper's ablation (x + LN(W1 (gelu(W2 x) * W3 x))), momentum, c = 4
    "gated mlp momentum c=4": MemoryConfig(memory="gated_mlp", optimizer="momentum", window=4, chunk_size=CHUNK),
}
# the 760M shape (Dk = 96 -> 128-wide tiles) is checked by tests/test_triton_gpu.py; here it would cost compile time
CHECK_SHAPES = {"340M T=2048 B=2": (2, 2048, 16, 64)}
TOL = {"linear": 2e-2, "ns": 2e-2, "poly": 2e-2, "mlp": 2e-2}
NS_SHAPES = [(4096, 64, 64), (1024, 64, 256), (2048, 96, 96)]
POLY_SHAPE = (2, 16, 512, 16)
DEVICE = "cuda"


def _smoke_setup() -> None:
    """Shrink everything and run on CPU under the Triton interpreter (checks the script, not the kernels' speed)."""
    global MODELS, LENGTHS, TOKENS_PER_BATCH, CHECK_SHAPES, NS_SHAPES, POLY_SHAPE, DEVICE
    os.environ["TRITON_INTERPRET"] = "1"
    MODELS = {"tiny": (32, 2, 16)}
    LENGTHS = (70,)
    TOKENS_PER_BATCH = 70
    CHECK_SHAPES = {"tiny T=70 B=1": (1, 70, 2, 16)}
    NS_SHAPES = [(4, 16, 48)]
    POLY_SHAPE = (1, 2, 9, 8)
    DEVICE = "cpu"


class Budget:
    def __init__(self, seconds: float):
        self.deadline = time.time() + seconds

    def left(self) -> float:
        return self.deadline - time.time()

    def ok(self, need: float = 0.0) -> bool:
        return self.left() > need


# ----------------------------------------------------------------------------------------------------------------
# FLOP model of the chunkwise linear memory (multiply-adds x 2), per chunk of b tokens, window halo h = c - 1
# ----------------------------------------------------------------------------------------------------------------


def linear_memory_flops(B, T, H, K, V, b, c, decay_first=False, backward=True) -> float:
    L, W = b, b + c - 1
    df = 2 if decay_first else 1
    fwd = L * L * W * df + L * W * K + L * K * V + W * K * V + L * W * V * df + W * V * K
    bwd = (
        L * L * W * df + L * W * K + L * K * V + W * K * V  # recompute coefficients, scores, qW, f0
        + 2 * L * K * V + W * K * V  # dW0 and dq from A W q, dW k
        + 2 * L * W * V * df + W * V * K  # dM, de (or df0 and dv), dk from the state update
        + 2 * L * L * W * df  # dMeta, dG
        + 2 * L * W * K  # dq, dk from the scores
        + 2 * W * V * K  # dk, dW0 through f0 = W k
    )  # fmt: skip
    macs = fwd + (bwd if backward else 0)
    return 2.0 * macs * B * H * math.ceil(T / b)


def mlp_memory_flops(B, T, H, D, Dh, b, c, momentum=False, gated=False) -> float:
    """Useful FLOPs of the chunkwise MLP memory (Dk = Dv = D, hidden Dh): forward x 3 for forward + backward."""
    L, W = b, b + c - 1
    fwd = (
        W * D * Dh + W * Dh * D  # branch at W_0 over the window: a0 = W2 k, b0 = W1 h0
        + W * D * Dh  # ds = (W1^T eb) * s'(a0)
        + L * L * W + L * W * D  # C = LA diag(eta) G, q . k
        + L * D * Dh + L * W * Dh  # a = A W2 q - (C * qk) ds
        + L * Dh * D + L * W * Dh + L * W * D  # b = A W1 h - (C * (h . h0)) eb
        + 2 * W * D * Dh  # end state W2, W1
    )  # fmt: skip
    if momentum:
        fwd += L * D * Dh + L * Dh * D + 2 * W * D * Dh + L * L * L  # P S q, P S h, S end state, LA LT
    if gated:  # gate = W3 k over the window, its retrieval layer, its end state (and momentum)
        fwd += W * D * Dh + L * D * Dh + L * W * Dh + W * D * Dh + (L * D * Dh + W * D * Dh if momentum else 0)
    return 2.0 * 3 * fwd * B * H * math.ceil(T / b)


# ----------------------------------------------------------------------------------------------------------------
# timing helpers
# ----------------------------------------------------------------------------------------------------------------


def bench_ms(fn, grad_to_none=None, rep_ms=200) -> float:
    import triton.testing

    fn()  # compile / warm the caches outside the measurement
    if DEVICE == "cpu":  # smoke run: one timed call
        t0 = time.perf_counter()
        fn()
        return 1e3 * (time.perf_counter() - t0)
    torch.cuda.synchronize()
    return float(triton.testing.do_bench(fn, warmup=50, rep=rep_ms, grad_to_none=grad_to_none))


def matmul_tflops() -> float:
    n = 8192 if DEVICE == "cuda" else 256
    dtype = torch.bfloat16 if DEVICE == "cuda" else torch.float32
    a = torch.randn(n, n, device=DEVICE, dtype=dtype)
    b = torch.randn(n, n, device=DEVICE, dtype=dtype)
    ms = bench_ms(lambda: a @ b)
    return 2 * n**3 / (ms * 1e-3) / 1e12


def memory_inputs(B, T, H, D, cfg, dtype=torch.bfloat16):
    from atlas_kernels.ops.memory.triton_checks import linear_memory_inputs
    from atlas_kernels.ops.memory.triton_mlp_checks import mlp_memory_inputs

    if cfg.memory in ("mlp", "gated_mlp"):
        q, k, v, gates, p = mlp_memory_inputs(cfg, B, T, H, D, dtype=dtype, device=DEVICE)
    else:
        q, k, v, gates, p = linear_memory_inputs(cfg, B, T, H, D, D, dtype=dtype, device=DEVICE)
    leaves = [q, k, v, *gates.values(), *p.values()]
    for t in leaves:
        t.requires_grad_()
    return q, k, v, gates, p, leaves


def atlas_step(backend, B, T, H, D, cfg):
    q, k, v, gates, p, leaves = memory_inputs(B, T, H, D, cfg)

    def step():
        o, _ = memory_chunk(q, k, v, gates, p, cfg, backend=backend)
        o.float().sum().backward()

    def forward():
        with torch.no_grad():
            memory_chunk(q, k, v, gates, p, cfg, backend=backend)

    return step, forward, leaves


def atlas_factory(backend, B, T, H, D, cfg):
    return atlas_step(backend, B, T, H, D, cfg), None


def fla_step(B, T, H, D):
    try:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    except ImportError:
        return None, "not installed"
    import torch.nn.functional as F

    g = torch.Generator(device=DEVICE).manual_seed(0)
    q = F.normalize(torch.randn(B, T, H, D, device=DEVICE, generator=g), dim=-1).bfloat16().requires_grad_()
    k = F.normalize(torch.randn(B, T, H, D, device=DEVICE, generator=g), dim=-1).bfloat16().requires_grad_()
    v = torch.randn(B, T, H, D, device=DEVICE, generator=g).bfloat16().requires_grad_()
    gate = F.logsigmoid(4 + torch.randn(B, T, H, device=DEVICE, generator=g)).requires_grad_()
    beta = torch.rand(B, T, H, device=DEVICE, generator=g).bfloat16().requires_grad_()
    kwargs = {"scale": 1.0}
    if "head_first" in inspect.signature(chunk_gated_delta_rule).parameters:
        kwargs["head_first"] = False

    def step():
        o, _ = chunk_gated_delta_rule(q, k, v, gate, beta, **kwargs)
        o.float().sum().backward()

    def forward():
        with torch.no_grad():
            chunk_gated_delta_rule(q, k, v, gate, beta, **kwargs)

    return (step, forward, [q, k, v, gate, beta]), None


def titans_step(B, T, d_model, H, D, depth=1):
    """titans-pytorch NeuralMemory layer; depth 1: a linear memory, depth 2: MLP with hidden 4D (gelu)."""
    try:
        from titans_pytorch import NeuralMemory
        from titans_pytorch.memory_models import MemoryMLP
    except ImportError:
        return None, "not installed"
    model = MemoryMLP(dim=D, depth=depth, expansion_factor=4.0)
    mem = NeuralMemory(dim=d_model, chunk_size=CHUNK, heads=H, dim_head=D, model=model).to(DEVICE)
    x = torch.randn(B, T, d_model, device=DEVICE).requires_grad_()
    leaves = [x, *mem.parameters()]

    def step():
        with torch.autocast(DEVICE, dtype=torch.bfloat16):
            out, _ = mem(x)
        out.float().sum().backward()

    def forward():
        with torch.no_grad(), torch.autocast(DEVICE, dtype=torch.bfloat16):
            mem(x)

    return (step, forward, leaves), None


# ----------------------------------------------------------------------------------------------------------------
# sections
# ----------------------------------------------------------------------------------------------------------------


def correctness(budget: Budget, quick: bool, only: str = "all") -> list[str]:
    from atlas_kernels.ops.memory.triton_checks import check_linear_memory, check_newton_schulz, check_poly_features
    from atlas_kernels.ops.memory.triton_mlp_checks import check_mlp_memory

    lines = ["## Correctness (bf16 inputs vs fp32 torch reference, max error ratio over all tensors)", ""]
    lines += ["| check | shape | max err ratio | worst tensor | tol | result |", "|---|---|---|---|---|---|"]
    jobs = []
    sname, shape = next(iter(CHECK_SHAPES.items()))
    for cname, cfg in MLP_CONFIGS.items():  # (triton errors, torch-in-bf16 errors): see _mlp_pass
        jobs.append((cname, sname, "mlp", lambda cfg=cfg, s=shape: check_mlp_memory(
            cfg, *s, dtype=torch.bfloat16, device=DEVICE, baseline=True)))  # fmt: skip
    if only == "mlp":
        jobs = [job for job in jobs if job[2] == "mlp"]
    elif only == "linear":
        jobs = []
    for cname, cfg in CHECK_CONFIGS.items() if only != "mlp" else ():
        for sname, shape in CHECK_SHAPES.items():
            if quick and sname != next(iter(CHECK_SHAPES)):
                continue
            jobs.append((f"linear memory {cname}", sname, "linear", lambda cfg=cfg, s=shape: check_linear_memory(
                cfg, *s, s[-1], dtype=torch.bfloat16, device=DEVICE)))  # fmt: skip
    for shape in NS_SHAPES if only != "mlp" else ():
        jobs.append(("newton-schulz k=5", "x".join(map(str, shape)), "ns", lambda s=shape: check_newton_schulz(
            s, dtype=torch.bfloat16, device=DEVICE)))  # fmt: skip
    if only != "mlp":
        jobs.append(("phi(l2norm(x)) p=2", "x".join(map(str, POLY_SHAPE)), "poly", lambda: check_poly_features(
            POLY_SHAPE, 2, dtype=torch.bfloat16, device=DEVICE)))  # fmt: skip
    for name, shape, kind, job in jobs:  # the first call of each kernel variant includes its compilation
        if not budget.ok(60):
            lines.append(f"| {name} | {shape} | - | - | {TOL[kind]} | skipped (time budget) |")
            continue
        try:
            errs = job()
            base = None
            if kind == "mlp":  # the kernel vs max(tol, 3x the torch op's own bf16 error) per tensor
                errs, base = errs
                worst = max(errs, key=lambda n: errs[n] / max(TOL[kind], 3 * base[n]))
                ok = all(errs[n] <= max(TOL[kind], 3 * base[n]) for n in errs)
            else:
                worst = max(errs, key=errs.get)
                ok = errs[worst] <= TOL[kind]
            note = f" (torch bf16: {base[worst]:.2e})" if base is not None else ""
            lines.append(
                f"| {name} | {shape} | {errs[worst]:.2e}{note} | {worst} | {TOL[kind]} | {'PASS' if ok else 'FAIL'} |"
            )
        except Exception as exc:  # report and go on
            lines.append(f"| {name} | {shape} | - | - | {TOL[kind]} | ERROR {type(exc).__name__}: {exc} |")
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
    for model, (d_model, H, D) in MODELS.items():
        for T in LENGTHS:
            if quick and (model, T) != ("340M", 2048):
                continue
            B = TOKENS_PER_BATCH // T
            gdr, omega, mom = CONFIGS["gated-delta c=1"], CONFIGS["omega c=4"], CHECK_CONFIGS["momentum c=2"]
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
            titans_mlp, omega_mlp = MLP_CONFIGS["mlp titans momentum c=1"], MLP_CONFIGS["mlp omega gd c=4"]
            gated_mlp = MLP_CONFIGS["gated mlp momentum c=4"]
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
                        flops = mlp_memory_flops(B, T, H, D, cfg.expansion * D, CHUNK, cfg.window, cfg.uses_momentum,
                                                 cfg.memory == "gated_mlp")  # fmt: skip
                    else:
                        flops = linear_memory_flops(B, T, H, D, D, CHUNK, cfg.window, cfg.decay_first)
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
                    if DEVICE == "cuda":
                        torch.cuda.empty_cache()
                print(lines[-1], flush=True)
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "kernels_gpu_results.md"))
    parser.add_argument("--budget", type=float, default=270.0, help="seconds for the whole script")
    parser.add_argument("--quick", action="store_true", help="one shape only")
    parser.add_argument("--skip-checks", action="store_true", help="timing only")
    parser.add_argument("--only", choices=("all", "linear", "mlp"), default="all", help="which memory kernels")
    parser.add_argument("--smoke", action="store_true", help="CPU plumbing check (Triton interpreter, tiny shapes)")
    args = parser.parse_args()
    if args.smoke:
        _smoke_setup()
    elif not torch.cuda.is_available():
        print("kernels_gpu.py needs a CUDA GPU (no CUDA device visible); nothing was run.")
        return 2
    start = time.time()
    budget = Budget(args.budget)
    import triton

    device_name = torch.cuda.get_device_name() if DEVICE == "cuda" else "CPU (smoke run, interpreter)"
    header = [
        "# atlas-kernels: Triton kernels on GPU",
        "",
        f"- device: {device_name}; torch {torch.__version__}; triton {triton.__version__}; "
        f"python {platform.python_version()}",
        f"- command: `python benchmarks/kernels_gpu.py {' '.join(sys.argv[1:])}`",
        "",
    ]
    lines = [] if args.skip_checks else correctness(budget, args.quick, args.only)
    peak = matmul_tflops()
    lines += [""] + timing(budget, peak, args.quick, args.only)
    lines += ["", f"Total wall time: {time.time() - start:.0f} s (budget {args.budget:.0f} s)."]
    text = "\n".join(header + lines) + "\n"
    Path(args.out).write_text(text)
    print(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
