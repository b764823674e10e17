"""The open GPU faults of atlas-kernels, each check in its own process (a CUDA fault poisons the process it hits).

    python benchmarks/gpu/faults.py env --out env.txt         # versions, a GPU matmul and a Triton kernel
    python benchmarks/gpu/faults.py mlp --out mlp_sweep.md    # the MLP kernel: head dim x hidden block x warps
    python benchmarks/gpu/faults.py ns --out newton_schulz.md # Newton-Schulz fp32 / bf16 beside torch in bf16
    python benchmarks/gpu/faults.py case NAME                 # one case in this process (under compute-sanitizer)
    ... --smoke                                               # CPU, Triton interpreter, tiny shapes (rehearsal)

MLP (benchmarks/gpu/results-2026-11-30-h200.md, section 2): compiled for an H200 the MLP kernel's forward was already
wrong at head dim 64 (error ratio 0.95) while it matched the float64 torch op under TRITON_INTERPRET=1 at the same
tile sizes. The sweep runs that forward (gd, c = 1, hidden 4 x D) at D = 32 / 48 / 64, hidden block 16 / 32 / 64
and 4 / 8 warps against the torch op in float32 on the same bf16 inputs, beside the torch op itself in bf16, so a
wrong tile size or warp count stands out from rounding. `race-*` is the D = 64 forward at two chunks, small enough
for `compute-sanitizer --tool racecheck` (a missing barrier between a hidden block's state write and the next
chunk's read would show as a shared-memory hazard).

Newton-Schulz (same file, section 1): the bf16 kernel's error ratios (0.026 output, 0.055 gradient) were above the
2e-2 checks with no torch-bf16 baseline, and fp32 (what Muon's torch op runs on CUDA through `newton_schulz_auto`)
was never checked. Each row holds the kernel's error and the torch op's error in the same dtype, both against
float64: a kernel within 3x of torch's own error is rounding, not a fault.

Every table is rewritten (temp file, then rename) as each case ends, so a run cut short keeps what finished.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "packages" / "atlas-kernels" / "src"))

SWEEP = {
    "dims": (32, 48, 64),
    "blocks": (16, 32, 64),
    "warps": (4, 8),
    "shape": (1, 2048, 4),
    "chunk": 64,
    "alpha_low": 0.99,
}
RACE = {"dim": 64, "block": 32, "warps": 8, "shape": (1, 128, 1), "chunk": 64, "alpha_low": 0.99}
NS_CASES = [("bf16", (4096, 64, 64)), ("bf16", (1024, 64, 256)), ("bf16", (2048, 96, 96)), ("bf16", (512, 33, 7)),
            ("fp32", (4096, 64, 64)), ("fp32", (512, 33, 7))]  # fmt: skip
SMOKE_SWEEP = {"dims": (16,), "blocks": (16,), "warps": (4,), "shape": (1, 20, 1), "chunk": 16, "alpha_low": 0.99}
SMOKE_RACE = {"dim": 16, "block": 16, "warps": 4, "shape": (1, 20, 1), "chunk": 16, "alpha_low": 0.99}
SMOKE_NS = [("bf16", (2, 16, 24))]
TOL = 2e-2
DEVICE = "cuda"


def _smoke() -> None:
    """CPU under the Triton interpreter at tiny shapes: checks the plumbing, not the kernels' GPU code."""
    global SWEEP, RACE, NS_CASES, DEVICE
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is first imported (the cases import it lazily)
    SWEEP, RACE, NS_CASES, DEVICE = SMOKE_SWEEP, SMOKE_RACE, SMOKE_NS, "cpu"


def mlp_cases() -> dict[str, dict]:
    common = {k: SWEEP[k] for k in ("shape", "chunk", "alpha_low")}
    cases = {f"mlp-d{d}-h{h}-w{w}": {"dim": d, "block": h, "warps": w, **common}
             for d in SWEEP["dims"] for h in SWEEP["blocks"] for w in SWEEP["warps"]}  # fmt: skip
    cases[f"race-d{RACE['dim']}-h{RACE['block']}-w{RACE['warps']}"] = RACE
    return cases


def ns_cases() -> dict[str, tuple[str, tuple[int, ...]]]:
    return {f"ns-{dtype}-{'x'.join(map(str, shape))}": (dtype, shape) for dtype, shape in NS_CASES}


def run_mlp_case(spec: dict) -> dict:
    """Forward error ratios against the torch op in float64 on the same rounded inputs: the MLP kernel (bf16), the
    torch op in bf16 and the torch op in float32 ("cond": how far the problem itself amplifies rounding; the first
    call's sweep, at alpha in [0.9, 1), was ill-conditioned: float32 drifts to error ratios near 1 by T = 2048)."""
    import torch

    from atlas_kernels import MemoryConfig
    from atlas_kernels.ops.memory.chunk import memory_chunk_torch
    from atlas_kernels.ops.memory.triton import mlp as triton_mlp
    from atlas_kernels.ops.memory.triton.checks import cast_inputs, err_ratio
    from atlas_kernels.ops.memory.triton.mlp_checks import mlp_memory_inputs

    warps = spec["warps"]
    triton_mlp._num_warps = lambda BW, BK: warps  # the launch reads it at call time: one process per case
    cfg = MemoryConfig(memory="mlp", optimizer="gd", window=1, chunk_size=spec["chunk"])
    B, T, H = spec["shape"]
    inputs = mlp_memory_inputs(
        cfg, B, T, H, spec["dim"], dtype=torch.bfloat16, device=DEVICE, alpha_low=spec["alpha_low"]
    )
    with torch.no_grad():
        ref, _ = memory_chunk_torch(*cast_inputs(inputs, torch.float64), cfg)
        fp32, _ = memory_chunk_torch(*cast_inputs(inputs, torch.float32), cfg)
        base, _ = memory_chunk_torch(*inputs, cfg)
        out, _ = triton_mlp.memory_chunk_triton_mlp(*inputs, cfg, block_h=spec["block"])
    if DEVICE == "cuda":
        torch.cuda.synchronize()
    return {"err": err_ratio(ref, out), "base": err_ratio(ref, base), "cond": err_ratio(ref, fp32)}


def run_ns_case(dtype_name: str, shape: tuple[int, ...]) -> dict:
    """Output and input-gradient error ratios against float64 of the Triton kernel and of the torch op, both in
    `dtype_name` on the same rounded input."""
    import torch

    from atlas_kernels.ops.memory.triton.checks import err_ratio
    from atlas_kernels.ops.newton_schulz.naive import newton_schulz
    from atlas_kernels.ops.newton_schulz.triton import newton_schulz_triton

    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype_name]
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    x = torch.randn(*shape, generator=gen, device=DEVICE).to(dtype)
    w = torch.randn(*shape, generator=gen, device=DEVICE, dtype=torch.float64)
    res = {}
    for name, fn, xin in (
        ("ref", newton_schulz, x.double()),
        ("tri", newton_schulz_triton, x),
        ("torch", newton_schulz, x),
    ):
        xin = xin.detach().clone().requires_grad_()
        y = fn(xin, steps=5)
        (gx,) = torch.autograd.grad((y.double() * w).sum(), xin)
        res[name] = (y, gx)
    if DEVICE == "cuda":
        torch.cuda.synchronize()
    (y0, g0) = res["ref"]
    return {
        "out": err_ratio(y0, res["tri"][0]), "grad": err_ratio(g0, res["tri"][1]),
        "base_out": err_ratio(y0, res["torch"][0]), "base_grad": err_ratio(g0, res["torch"][1]),
    }  # fmt: skip


def run_case(name: str) -> dict:
    if name in ns_cases():
        return run_ns_case(*ns_cases()[name])
    return run_mlp_case(mlp_cases()[name])


def _subprocess(name: str, smoke: bool, timeout: float) -> tuple[str, dict | str]:
    env = dict(os.environ, CUDA_LAUNCH_BLOCKING="1")
    cmd = [sys.executable, __file__, "case", name, *(["--smoke"] if smoke else [])]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return name, "timeout"
    if p.returncode == 0 and p.stdout.strip():
        return name, json.loads(p.stdout.strip().splitlines()[-1])
    err = [ln for ln in p.stderr.strip().splitlines() if ln.strip()]
    return name, "FAULT: " + (err[-1][:200] if err else f"exit {p.returncode}")


def _mlp_row(name: str, res) -> str:
    spec = mlp_cases()[name]
    head = f"| {name} | {spec['dim']} | {4 * spec['dim']} | {spec['block']} | {spec['warps']} |"
    if isinstance(res, str):
        return head + f" - | - | - | {res} |"
    ok = res["err"] <= max(TOL, 3 * res["base"])
    return head + f" {res['err']:.2e} | {res['base']:.2e} | {res['cond']:.2e} | {'PASS' if ok else 'FAIL'} |"


def _ns_row(name: str, res) -> str:
    dtype, shape = ns_cases()[name]
    head = f"| newton-schulz k=5 | {'x'.join(map(str, shape))} | {dtype} |"
    if isinstance(res, str):
        return head + f" - | - | {res} |"
    tol = TOL if dtype == "bf16" else 1e-4
    worst = max(res["out"] / max(tol, 3 * res["base_out"]), res["grad"] / max(tol, 3 * res["base_grad"]))
    reading = "PASS" if max(res["out"], res["grad"]) <= tol else ("rounding" if worst <= 1 else "FAIL (kernel)")
    return head + (f" {res['out']:.2e} / {res['grad']:.2e} | {res['base_out']:.2e} / {res['base_grad']:.2e} | "
                   f"{reading} |")  # fmt: skip


HEADERS = {
    "mlp": ["## MLP kernel forward sweep (gd, c = 1, bf16, alpha in [0.99, 1); error ratio vs torch float64 on the "
            "same inputs)", "",
            "| case | head dim | hidden | hidden block | warps | triton err | torch bf16 err | torch fp32 err (cond.) "
            "| result |", "|---|---|---|---|---|---|---|---|---|"],
    "ns": ["## Newton-Schulz (5 steps) vs float64: kernel and torch op in the same dtype (output / input gradient)", "",
           "| check | shape | dtype | triton err | torch err (same dtype) | reading |", "|---|---|---|---|---|---|"],
}  # fmt: skip


def sweep(kind: str, out: Path | None, jobs: int, timeout: float, smoke: bool) -> str:
    names = [n for n in (mlp_cases() if kind == "mlp" else ns_cases()) if not n.startswith("race-")]
    row = _mlp_row if kind == "mlp" else _ns_row
    done: dict[str, str] = {}
    start = time.time()

    def save(final: bool) -> str:
        lines = [*HEADERS[kind], *(done[n] for n in names if n in done)]
        lines += [f"| {n} | (not finished) |" for n in names if n not in done and not final]
        text = "\n".join(lines) + f"\n\n{len(done)} of {len(names)} cases in {time.time() - start:.0f} s\n"
        if out is not None:
            tmp = out.with_name(out.name + ".tmp")
            tmp.write_text(text)
            tmp.replace(out)
        return text

    save(False)
    with ThreadPoolExecutor(max(1, jobs)) as pool:
        futures = [pool.submit(_subprocess, n, smoke, timeout) for n in names]
        for future in as_completed(futures):
            name, res = future.result()
            done[name] = row(name, res)
            print(done[name], flush=True)
            save(False)
    return save(True)


def environment(out: Path | None) -> int:
    """Versions, the device, a matmul checked against the CPU and one Triton kernel (the poly features, which
    passed on an H200): whether the toolchain works before any real check runs. Each line is written as it comes
    (a cold machine's first imports can outlast the step)."""
    import shutil

    lines: list[str] = []

    def emit(*new: str) -> None:
        lines.extend(new)
        for line in new:
            print(line, flush=True)
        if out is not None:
            tmp = out.with_name(out.name + ".tmp")
            tmp.write_text("\n".join(lines) + "\n")
            tmp.replace(out)

    emit(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    code = 0
    if shutil.which("nvidia-smi"):
        query = ["nvidia-smi", "--query-gpu=name,memory.total,driver_version,clocks.max.sm", "--format=csv"]
        smi = subprocess.run(query, capture_output=True, text=True, timeout=20, check=False)
        emit(*(smi.stdout or smi.stderr).strip().splitlines())
    else:
        emit("nvidia-smi not found")
    try:
        t0 = time.time()
        import torch
        import triton

        emit(f"python {sys.version.split()[0]}, torch {torch.__version__}, triton {triton.__version__} "
             f"(imported in {time.time() - t0:.1f} s)")  # fmt: skip
        if DEVICE == "cuda":
            emit(f"device {torch.cuda.get_device_name()}, capability {torch.cuda.get_device_capability()}")
        a = torch.randn(512, 512, generator=torch.Generator().manual_seed(0))
        err = (a.to(DEVICE) @ a.to(DEVICE)).cpu().sub(a @ a).abs().max().item()
        emit(f"matmul 512^3 on {DEVICE}: max abs difference to CPU {err:.2e}")
        from atlas_kernels.ops.memory.triton.checks import check_poly_features

        t0 = time.time()
        errs = check_poly_features((1, 2, 64, 16), 2, dtype=torch.float32, device=DEVICE)
        emit(f"triton poly-feature kernel fp32: max error ratio {max(errs.values()):.2e} ({time.time() - t0:.1f} s)")
    except Exception as exc:  # the rest of the call still runs: every step reports for itself
        emit(f"CUDA smoke check FAILED: {type(exc).__name__}: {exc}")
        code = 1
    for mod in ("fla", "titans_pytorch"):
        t0 = time.time()
        try:
            m = __import__(mod)
            emit(f"{mod} {getattr(m, '__version__', 'present')} (imported in {time.time() - t0:.1f} s)")
        except Exception as exc:
            emit(f"{mod} missing ({type(exc).__name__})")
    return code


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["env", "mlp", "ns", "case", "list"])
    ap.add_argument("name", nargs="?", help="with `case`: the case to run in this process")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--jobs", type=int, default=8, help="cases side by side (each compiles on its own core)")
    ap.add_argument("--timeout", type=float, default=120, help="seconds per case")
    ap.add_argument("--smoke", action="store_true", help="CPU, Triton interpreter, tiny shapes")
    args = ap.parse_args()
    if args.smoke:
        _smoke()
    if args.what == "env":
        return environment(args.out)
    if args.what == "list":
        print("\n".join([*mlp_cases(), *ns_cases()]))
        return 0
    if args.what == "case":
        res = run_case(args.name)
        print(json.dumps(res))
        return 0
    sweep(args.what, args.out, args.jobs, args.timeout, args.smoke)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
