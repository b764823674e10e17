"""Offline compile check of the Triton kernels for an H100/H200 (sm_90a), no GPU needed: every main variant must
compile through ptxas and fit the 227 KB shared-memory limit of one block.

Slow (minutes on 2 CPU cores): excluded from the default run (`-m 'not slow'`); run it with
`pytest packages/atlas-kernels/tests/test_triton_compile_sm90.py -m slow` before a GPU session.
Each case compiles in a subprocess with TRITON_INTERPRET=0 (the conftest turns the interpreter on for this test
session, and triton reads it when @triton.jit functions, its own included, are defined). It compiles with the
kernels' launch options (num_warps, num_stages = 1) and bf16 inputs (bf16 dot operands).
"""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("triton")
pytestmark = pytest.mark.slow
SMEM_LIMIT = 232448  # bytes of dynamic shared memory per block on sm_90

MEM_VARIANTS = {
    "gated-delta": dict(L2=True, DECAY_FIRST=True, MOMENTUM=False, HAS_HALO=False),
    "omega-halo": dict(L2=True, DECAY_FIRST=False, MOMENTUM=False, HAS_HALO=True),
    "dot-halo": dict(L2=False, DECAY_FIRST=False, MOMENTUM=False, HAS_HALO=True),
    "momentum-halo": dict(L2=True, DECAY_FIRST=False, MOMENTUM=True, HAS_HALO=True),
}


def _compile(fn, types, constexprs, num_warps) -> int:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    signature = {n: ("constexpr" if n in constexprs else types.get(n, "i32")) for n in fn.arg_names}
    consts = {(fn.arg_names.index(n),): v for n, v in constexprs.items()}
    kernel = triton.compile(
        ASTSource(fn, signature, consts),
        target=GPUTarget("cuda", 90, 32),
        options={"num_warps": num_warps, "num_stages": 1},
    )
    return kernel.metadata.shared


def _compile_case(kind: str, *args: str) -> list[int]:
    """Runs in the subprocess; returns the shared memory (bytes) of each compiled kernel."""
    import triton.language as tl

    if kind == "memory":
        from atlas_kernels.ops.memory.triton import linear as lt

        variant, BK, direction = args[0], int(args[1]), args[2]
        half = ("q_ptr", "k_ptr", "v_ptr", "a_ptr", "e_ptr", "g_ptr", "th_ptr", "y_ptr", "dy_ptr")
        names = lt._linear_bwd_kernel.arg_names + lt._linear_fwd_kernel.arg_names
        types = {n: "*fp32" for n in names if n.endswith("_ptr")}
        types.update({n: "*bf16" for n in half})
        types["gate_eps"] = "fp32"
        BT, BH, _, BV = lt._blocks(64, 3, BK, 64, None, "bf16")
        cx = dict(BT=BT, BH=BH, BK=BK, BV=BV, ACC=tl.float32, PREC="bf16", **MEM_VARIANTS[variant])
        if direction == "fwd":
            return [_compile(lt._linear_fwd_kernel, types, cx, lt._num_warps(BT, BK, BV))]
        mom = cx["MOMENTUM"]
        cx.update(HAS_DWT=True, HAS_DWR=True, HAS_DST=mom, HAS_DSR=mom)
        return [_compile(lt._linear_bwd_kernel, types, cx, lt._num_warps(BT, BK, BV))]
    if kind == "mlp":
        from atlas_kernels import MemoryConfig
        from atlas_kernels.ops.memory.state import halo_size
        from atlas_kernels.ops.memory.triton import mlp as mt
        from atlas_kernels.ops.memory.triton import mlp_bwd as mb

        direction, chunk, window, D, gated = args[0], int(args[1]), int(args[2]), int(args[3]), args[5] == "gated"
        prec = "bf16" if args[4] == "bf16" else "tf32x3"
        fn = mt._mlp_fwd_kernel if direction == "fwd" else mb._mlp_bwd_kernel
        half = ("q_ptr", "k_ptr", "v_ptr", "a_ptr", "e_ptr", "g_ptr", "th_ptr", "y_ptr", "dy_ptr")
        types = {n: ("*bf16" if n in half and prec == "bf16" else "*fp32") for n in fn.arg_names if n.endswith("_ptr")}
        types.update(gate_eps="fp32", norm_eps="fp32")
        halo = halo_size(MemoryConfig(memory="mlp", window=window, chunk_size=chunk))
        BT, BW, BK, BV, BD = mt._blocks(chunk, halo, D, D, 4 * D, None, prec)
        cx = dict(BT=BT, BW=BW, BK=BK, BV=BV, BD=BD, L2=True, MOMENTUM=True, NORM=True, RESIDUAL=True, SILU=False)
        cx.update(GATED=gated, INIT=len(args) > 6 and args[6] == "init")
        cx.update(ACC=tl.float32, PREC=prec)
        return [_compile(fn, types, cx, mt._num_warps(BW, BK))]
    if kind == "newton_schulz":
        from atlas_kernels.ops.newton_schulz import triton as nst

        BM, BN = int(args[0]), int(args[1])
        types = {"x_ptr": "*bf16", "y_ptr": "*bf16", "dy_ptr": "*bf16", "dx_ptr": "*bf16", "ws_ptr": "*fp32"}
        types.update({n: "fp32" for n in ("eps", "ca", "cb", "cc")})
        cx = dict(STEPS=5, BM=BM, BN=BN, ACC=tl.float32, PREC="bf16")
        return [
            _compile(nst._ns_fwd_kernel, types, cx, nst._num_warps(BM, BN)),
            _compile(nst._ns_bwd_kernel, types, dict(cx, USE_SCRATCH=True), nst._num_warps(BM, BN)),
        ]
    from atlas_kernels.ops.features import triton as ft

    types = {"x_ptr": "*bf16", "out_ptr": "*bf16", "dout_ptr": "*bf16", "dx_ptr": "*bf16", "root_ptr": "*fp32"}
    types.update({"idx_ptr": "*i32", "deg_ptr": "*i32", "scale_ptr": "*fp64", "droot_ptr": "*fp32", "eps": "fp32"})
    cx = dict(P=2, BR=ft._BR, BD=64, BF=ft._BF, ACC=tl.float32)
    return [_compile(ft._poly_fwd_kernel, types, cx, 4), _compile(ft._poly_bwd_kernel, types, dict(cx, BP=4), 4)]


def _run(*case: str) -> None:
    env = dict(os.environ, TRITON_INTERPRET="0")
    proc = subprocess.run([sys.executable, __file__, *case], capture_output=True, text=True, env=env, timeout=1200)
    if proc.returncode != 0:
        tail = proc.stderr[-3000:]
        if "ptxas" in tail and "not found" in tail.lower():
            pytest.skip(f"no CUDA compile toolchain in this triton install: {tail[-300:]}")
        raise AssertionError(f"compile failed for {case}:\n{tail}")
    smem = json.loads(proc.stdout.strip().splitlines()[-1])
    assert max(smem) <= SMEM_LIMIT, smem


@pytest.mark.parametrize("variant", MEM_VARIANTS)
@pytest.mark.parametrize("BK", [64, 128])
@pytest.mark.parametrize("direction", ["fwd", "bwd"])
def test_linear_memory_compiles(variant, BK, direction):
    _run("memory", variant, str(BK), direction)


# (chunk, window, head dim, dtype, memory): 340M / 760M layer shapes in bf16; fp32 at the largest tile the guard
# admits; the gated MLP (one more weight and momentum) at the largest of both
MLP_CASES = [
    (64, 4, 64, "bf16", "mlp"),
    (64, 4, 96, "bf16", "mlp"),
    (64, 4, 128, "bf16", "mlp"),
    (32, 4, 64, "fp32", "mlp"),
    (64, 4, 128, "bf16", "gated"),
    (32, 4, 64, "fp32", "gated"),
    (64, 4, 128, "bf16", "gated", "init"),  # decay_target="init": the W_init blocks on top
]


@pytest.mark.parametrize("case", MLP_CASES, ids=["-".join(map(str, c)) for c in MLP_CASES])
@pytest.mark.parametrize("direction", ["fwd", "bwd"])
def test_mlp_memory_compiles(case, direction):
    _run("mlp", direction, *map(str, case))


@pytest.mark.parametrize("shape", [(64, 64), (64, 256), (128, 128)])
def test_newton_schulz_compiles(shape):
    _run("newton_schulz", *map(str, shape))


def test_poly_features_compile():
    _run("poly")


if __name__ == "__main__":
    print(json.dumps(_compile_case(*sys.argv[1:])))
