"""Offline compile check of the Triton kernels for an H100/H200 (sm_90a), no GPU needed: every main variant must
compile through ptxas and fit the 227 KB shared-memory limit of one block.

Slow (minutes on 2 CPU cores): excluded from the default run (`-m 'not slow'`); run it with
`pytest packages/atlas-kernels/tests/test_triton_compile_sm90.py -m slow` before a GPU session.
Each case compiles in a subprocess (`python -m atlas_kernels.ops.triton_offline`, which also reports registers and
spills) with TRITON_INTERPRET=0: the conftest turns the interpreter on for this test session, and triton reads it
when @triton.jit functions, its own included, are defined.
"""

import pytest

pytest.importorskip("triton")
from atlas_kernels.ops.triton_offline import LINEAR_VARIANTS, measure  # noqa: E402

pytestmark = pytest.mark.slow
SMEM_LIMIT = 232448  # bytes of dynamic shared memory per block on sm_90


def _run(*case: str) -> None:
    try:
        kernels = measure(list(case))
    except RuntimeError as exc:
        tail = str(exc)
        if "ptxas" in tail and "not found" in tail.lower():
            pytest.skip(f"no CUDA compile toolchain in this triton install: {tail[-300:]}")
        raise AssertionError(tail) from None
    assert max(k["shared"] for k in kernels) <= SMEM_LIMIT, kernels


@pytest.mark.parametrize("variant", LINEAR_VARIANTS)
@pytest.mark.parametrize("BK", [64, 128])
@pytest.mark.parametrize("direction", ["fwd", "bwd"])
def test_linear_memory_compiles(variant, BK, direction):
    _run("linear", variant, direction, str(BK))


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
