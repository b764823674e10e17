"""The package's Triton kernels compiled for an H100 / H200 (sm_90a) on a machine without a GPU: shared memory,
registers and spills of each kernel at a given shape.

A GPU is rarely at hand, and a kernel that spills registers is slow there in a way no CPU run shows: every value
that does not fit the 255 registers a thread may hold goes to local memory and comes back, inside the chunk loop.
Triton compiles to PTX and ptxas (bundled with triton) assembles it for the target and reports per thread the
registers used and the bytes spilled; both are fixed at compile time, so they are the same offline as on the GPU
(for the same triton and ptxas versions).

    python -m atlas_kernels.ops.triton_offline linear gated-delta bwd 64 [--chunk 64] [--window 4] [--block-v 32]
    python -m atlas_kernels.ops.triton_offline mlp fwd 64 4 64 bf16 mlp [init] [--block-h 32] [--optimizer gd]
    python -m atlas_kernels.ops.triton_offline newton_schulz 64 64
    python -m atlas_kernels.ops.triton_offline poly

print one JSON list, one entry per kernel ({kernel, num_warps, shared, registers, spill_stores, spill_loads}).
Run it with TRITON_INTERPRET unset or 0: triton reads that variable when kernels are defined, so a process that has
imported the kernels under the interpreter cannot compile them (the tests call this module in a subprocess).
The launch options are the kernels' own (num_warps from their block sizes, num_stages = 1) unless overridden;
bf16 inputs (bf16 dot operands) unless the case says fp32.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import subprocess
import sys
from dataclasses import asdict, dataclass

TARGET_ARCH = 90
HALF = ("q_ptr", "k_ptr", "v_ptr", "a_ptr", "e_ptr", "g_ptr", "th_ptr", "y_ptr", "dy_ptr")

# the linear kernel's variants: the settings of the presets that use it
LINEAR_VARIANTS = {
    "gated-delta": dict(L2=True, DECAY_FIRST=True, MOMENTUM=False, HAS_HALO=False),
    "omega-halo": dict(L2=True, DECAY_FIRST=False, MOMENTUM=False, HAS_HALO=True),
    "dot-halo": dict(L2=False, DECAY_FIRST=False, MOMENTUM=False, HAS_HALO=True),
    "momentum-halo": dict(L2=True, DECAY_FIRST=False, MOMENTUM=True, HAS_HALO=True),
}


@dataclass(frozen=True)
class KernelUsage:
    kernel: str
    num_warps: int
    shared: int  # bytes of shared memory per program
    registers: int | None  # per thread; None where the compile's log held no ptxas report
    spill_stores: int | None  # bytes per thread
    spill_loads: int | None


def _compile(fn, types: dict, constexprs: dict, num_warps: int):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    signature = {n: ("constexpr" if n in constexprs else types.get(n, "i32")) for n in fn.arg_names}
    consts = {(fn.arg_names.index(n),): v for n, v in constexprs.items()}
    return triton.compile(
        ASTSource(fn, signature, consts),
        target=GPUTarget("cuda", TARGET_ARCH, 32),
        options={"num_warps": num_warps, "num_stages": 1},
    )


def parse_ptxas(text: str) -> tuple[int, int, int]:
    """(registers, spill store bytes, spill load bytes) of the one function in `ptxas -v` output."""
    regs = re.search(r"Used (\d+) registers", text)
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", text)
    if regs is None or spills is None:
        raise ValueError(f"ptxas -v output without a register or spill line: {text[-400:]!r}")
    return int(regs.group(1)), int(spills.group(1)), int(spills.group(2))


def usage(fn, types: dict, constexprs: dict, num_warps: int) -> KernelUsage:
    """Compile `fn` for the target and read ptxas's report of that very compile (triton runs ptxas -v with its own
    options and prints the log when asked), not of a separate ptxas call."""
    from triton import knobs

    saved = knobs.nvidia.dump_ptxas_log, knobs.compilation.always_compile
    knobs.nvidia.dump_ptxas_log = True
    knobs.compilation.always_compile = True  # a cached kernel would skip ptxas and print no report
    log = io.StringIO()
    try:
        with contextlib.redirect_stdout(log):
            kernel = _compile(fn, types, constexprs, num_warps)
    finally:
        knobs.nvidia.dump_ptxas_log, knobs.compilation.always_compile = saved
    try:
        regs, st, ld = parse_ptxas(log.getvalue())
    except ValueError:
        regs = st = ld = None
    return KernelUsage(fn.__name__, num_warps, int(kernel.metadata.shared), regs, st, ld)


def linear_case(variant: str, direction: str, head_dim: int, block_v=None, warps=None, chunk=64, window=4):
    import triton.language as tl

    from atlas_kernels.ops.memory.triton import linear as lt

    fn = lt._linear_fwd_kernel if direction == "fwd" else lt._linear_bwd_kernel
    types = {n: ("*bf16" if n in HALF else "*fp32") for n in fn.arg_names if n.endswith("_ptr")}
    types["gate_eps"] = "fp32"
    BT, BH, BK, BV = lt._blocks(chunk, window - 1, head_dim, head_dim, block_v, "bf16")
    cx = dict(BT=BT, BH=BH, BK=BK, BV=BV, ACC=tl.float32, PREC="bf16", **LINEAR_VARIANTS[variant])
    if direction == "bwd":
        mom = cx["MOMENTUM"]
        cx.update(HAS_DWT=True, HAS_DWR=True, HAS_DST=mom, HAS_DSR=mom)
    return [usage(fn, types, cx, warps or lt._num_warps(BT, BK, BV))]


def mlp_case(direction, chunk, window, head_dim, dtype, memory, init=False, block_h=None, warps=None, momentum=True):
    import triton.language as tl

    from atlas_kernels import MemoryConfig
    from atlas_kernels.ops.memory.state import halo_size
    from atlas_kernels.ops.memory.triton import mlp as mt
    from atlas_kernels.ops.memory.triton import mlp_bwd as mb

    prec = "bf16" if dtype == "bf16" else "tf32x3"
    fn = mt._mlp_fwd_kernel if direction == "fwd" else mb._mlp_bwd_kernel
    types = {n: ("*bf16" if n in HALF and prec == "bf16" else "*fp32") for n in fn.arg_names if n.endswith("_ptr")}
    types.update(gate_eps="fp32", norm_eps="fp32")
    halo = halo_size(MemoryConfig(memory="mlp", window=window, chunk_size=chunk))
    BT, BW, BK, BV, BD = mt._blocks(chunk, halo, head_dim, head_dim, 4 * head_dim, block_h, prec)
    cx = dict(BT=BT, BW=BW, BK=BK, BV=BV, BD=BD, L2=True, MOMENTUM=momentum, NORM=True, RESIDUAL=True, SILU=False)
    cx.update(GATED=memory == "gated", INIT=init, ACC=tl.float32, PREC=prec)
    return [usage(fn, types, cx, warps or mt._num_warps(BW, BK))]


def newton_schulz_case(BM: int, BN: int):
    import triton.language as tl

    from atlas_kernels.ops.newton_schulz import triton as nst

    types = {"x_ptr": "*bf16", "y_ptr": "*bf16", "dy_ptr": "*bf16", "dx_ptr": "*bf16", "ws_ptr": "*fp32"}
    types.update({n: "fp32" for n in ("eps", "ca", "cb", "cc")})
    cx = dict(STEPS=5, BM=BM, BN=BN, ACC=tl.float32, PREC="bf16")
    warps = nst._num_warps(BM, BN)
    return [
        usage(nst._ns_fwd_kernel, types, cx, warps),
        usage(nst._ns_bwd_kernel, types, dict(cx, USE_SCRATCH=True), warps),
    ]


def poly_case():
    import triton.language as tl

    from atlas_kernels.ops.features import triton as ft

    types = {"x_ptr": "*bf16", "out_ptr": "*bf16", "dout_ptr": "*bf16", "dx_ptr": "*bf16", "root_ptr": "*fp32"}
    types.update({"idx_ptr": "*i32", "deg_ptr": "*i32", "scale_ptr": "*fp64", "droot_ptr": "*fp32", "eps": "fp32"})
    cx = dict(P=2, BR=ft._BR, BD=64, BF=ft._BF, ACC=tl.float32)
    return [usage(ft._poly_fwd_kernel, types, cx, 4), usage(ft._poly_bwd_kernel, types, dict(cx, BP=4), 4)]


def measure(args: list[str], timeout: float = 1200) -> list[dict]:
    """This module's report for one case (`args` as on its command line), compiled in a fresh process without the
    Triton interpreter; RuntimeError with the end of its stderr when the compile fails."""
    env = dict(os.environ, TRITON_INTERPRET="0")
    cmd = [sys.executable, "-m", __name__, *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"compile failed for {args}:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kind", choices=("linear", "mlp", "newton_schulz", "poly"))
    ap.add_argument("args", nargs="*", help="the case (see the examples above)")
    ap.add_argument("--chunk", type=int, default=64, help="linear: chunk size b (the halo variants' tile)")
    ap.add_argument("--window", type=int, default=4, help="linear: Omega window c (halo c - 1; its tile only)")
    ap.add_argument("--block-v", type=int, default=None, help="linear: value columns per program")
    ap.add_argument("--block-h", type=int, default=None, help="mlp: hidden units per block")
    ap.add_argument("--warps", type=int, default=None, help="num_warps instead of the kernel's own choice")
    ap.add_argument("--optimizer", choices=("momentum", "gd"), default="momentum", help="mlp: the inner optimizer")
    a = ap.parse_args(argv)
    if a.kind == "linear":
        variant, direction, head_dim = a.args
        if variant not in LINEAR_VARIANTS:
            ap.error(f"linear variant {variant!r}: one of {sorted(LINEAR_VARIANTS)}")
        out = linear_case(variant, direction, int(head_dim), a.block_v, a.warps, a.chunk, a.window)
    elif a.kind == "mlp":
        direction, chunk, window, head_dim, dtype, memory, *rest = a.args
        out = mlp_case(direction, int(chunk), int(window), int(head_dim), dtype, memory, rest == ["init"],
                       a.block_h, a.warps, a.optimizer == "momentum")  # fmt: skip
    elif a.kind == "newton_schulz":
        out = newton_schulz_case(*map(int, a.args))
    else:
        out = poly_case()
    print(json.dumps([asdict(u) for u in out]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
