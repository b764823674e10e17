"""GPU checks of the Triton kernels at the paper's layer shapes (bf16 inputs; fp32 torch reference).

Skipped without CUDA (`gpu` marker, root conftest). The same checks run inside `benchmarks/kernels_gpu.py`.
340M: d_model 1024, 16 heads of 64; 760M: d_model 1536, 16 heads of 96 (MLP memory: hidden 4x).
"""

import pytest
import torch

from atlas_kernels import MemoryConfig

pytestmark = pytest.mark.gpu

SHAPES = {"340M-T2048": (2, 2048, 16, 64), "760M-T4096": (1, 4096, 16, 96)}
CONFIGS = {
    "gated-delta": MemoryConfig(
        memory="linear", optimizer="gd", feature_map="identity", bias="l2", window=1, chunk_size=64, decay_first=True
    ),
    "omega-c4": MemoryConfig(
        memory="linear", optimizer="gd", feature_map="identity", bias="l2", window=4, chunk_size=64
    ),
    "momentum-c2": MemoryConfig(
        memory="linear", optimizer="momentum", feature_map="identity", bias="l2", window=2, chunk_size=64
    ),
    "swla-dot-c4": MemoryConfig(
        memory="linear", optimizer="gd", feature_map="identity", bias="dot", window=4, chunk_size=32
    ),
}

MLP_CONFIGS = {  # Titans (momentum, online), OmegaNet-style (gd, window 4) and gated MLP memories with the memory LN
    "titans-momentum-c1": MemoryConfig(memory="mlp", optimizer="momentum", window=1, chunk_size=64),
    "omega-gd-c4": MemoryConfig(memory="mlp", optimizer="gd", window=4, chunk_size=64),
    "gated-momentum-c4": MemoryConfig(memory="gated_mlp", optimizer="momentum", window=4, chunk_size=64),
}


def _assert_small(errs, tol):
    bad = {n: e for n, e in errs.items() if not e <= tol}
    assert not bad, bad


@pytest.mark.parametrize("shape", SHAPES, ids=list(SHAPES))
@pytest.mark.parametrize("config", CONFIGS, ids=list(CONFIGS))
def test_linear_memory_bf16_real_shapes(shape, config):
    from atlas_kernels.ops.memory.triton.checks import check_linear_memory

    B, T, H, D = SHAPES[shape]
    errs = check_linear_memory(CONFIGS[config], B, T, H, D, D, dtype=torch.bfloat16, device="cuda")
    _assert_small(errs, 2e-2)


@pytest.mark.parametrize("optimizer", ["gd", "momentum"])
def test_linear_memory_fp32_odd_shape(optimizer):
    from atlas_kernels.ops.memory.triton.checks import check_linear_memory

    cfg = MemoryConfig(memory="linear", optimizer=optimizer, feature_map="identity", bias="l2", window=3, chunk_size=16)
    errs = check_linear_memory(cfg, 2, 333, 4, 48, 80, dtype=torch.float32, device="cuda")
    _assert_small(errs, 1e-4)


def _assert_close_to_torch(errs, base, tol):
    """The kernel's error ratio <= tol, or <= 3x the torch op's own error in the same dtype where rounding alone
    exceeds tol (the memory LayerNorm amplifies rounding over long sequences; see the README's Numerics)."""
    bad = {n: (e, base[n]) for n, e in errs.items() if not e <= max(tol, 3 * base[n])}
    assert not bad, bad


@pytest.mark.xfail(
    reason="H200, triton 3.6: error ratios near 1 at T = 2048 (2026-11-30, 2026-12-04), measured with alpha in "
    "[0.9, 1), where the float32 torch op itself drifts from float64 to 0.5-0.8 (benchmarks/gpu/"
    "results-2026-12-04-h200.md); this check now draws alpha in [0.99, 1) and has not run on a GPU since. "
    "backend='auto' keeps MLP memories on torch until it passes (api.auto_excluded)",
    strict=False,
)
@pytest.mark.parametrize("shape", SHAPES, ids=list(SHAPES))
@pytest.mark.parametrize("config", MLP_CONFIGS, ids=list(MLP_CONFIGS))
def test_mlp_memory_bf16_real_shapes(shape, config):
    from atlas_kernels.ops.memory.triton.mlp_checks import check_mlp_memory

    B, T, H, D = SHAPES[shape]
    # alpha in [0.99, 1): at alpha in [0.9, 1) the float32 reference itself drifts from float64 to error ratios
    # 0.5-0.8 by T = 2048 (README, "Numerics worth knowing"), which judges no kernel
    errs, base = check_mlp_memory(
        MLP_CONFIGS[config], B, T, H, D, dtype=torch.bfloat16, device="cuda", baseline=True, alpha_low=0.99
    )
    _assert_close_to_torch(errs, base, 2e-2)


@pytest.mark.parametrize("optimizer,memory", [("gd", "mlp"), ("momentum", "mlp"), ("momentum", "gated_mlp")])
def test_mlp_memory_fp32_odd_shape(optimizer, memory):
    """T = 333 (a short last chunk), Dk = 48 (padded tiles), hidden 192 (six hidden blocks), window 3."""
    from atlas_kernels.ops.memory.triton.mlp_checks import check_mlp_memory

    cfg = MemoryConfig(memory=memory, optimizer=optimizer, window=3, chunk_size=16)
    errs, base = check_mlp_memory(cfg, 2, 333, 4, 48, dtype=torch.float32, device="cuda", baseline=True)
    _assert_close_to_torch(errs, base, 1e-4)


def test_mlp_memory_auto_backend_picks_triton_when_enabled(monkeypatch):
    from atlas_kernels import api, memory_chunk
    from atlas_kernels.ops.memory.triton.mlp_checks import mlp_memory_inputs
    from atlas_kernels.testing import rel_err

    cfg = MemoryConfig(memory="mlp", optimizer="gd", window=4, chunk_size=16)  # fp32 tiles within shared memory
    q, k, v, gates, p = mlp_memory_inputs(cfg, 2, 200, 4, 64, dtype=torch.float32, device="cuda")
    monkeypatch.delenv(api.MLP_TRITON_ENV, raising=False)
    assert api.select_backend(q, cfg, "auto") == "torch"  # held back until the real-shape check passes
    monkeypatch.setenv(api.MLP_TRITON_ENV, "1")
    assert api.select_backend(q, cfg, "auto") == "triton"
    o, s = memory_chunk(q, k, v, gates, p, cfg)
    o_ref, s_ref = memory_chunk(q, k, v, gates, p, cfg, backend="torch")
    assert rel_err(o_ref, o) < 1e-4
    assert rel_err(s_ref.weights["W2"], s.weights["W2"]) < 1e-4
    big = MLP_CONFIGS["omega-gd-c4"]  # b = 64, c = 4 in fp32: the tile exceeds shared memory -> torch
    assert api.select_backend(q, big, "auto") == "torch"
    assert api.select_backend(q.bfloat16(), big, "auto") == "triton"


@pytest.mark.parametrize(
    "shape,dtype",
    [
        ((4096, 64, 64), torch.bfloat16),
        ((1024, 64, 256), torch.bfloat16),
        ((2048, 96, 96), torch.bfloat16),
        ((512, 33, 7), torch.bfloat16),
        ((4096, 64, 64), torch.float32),  # float32 on GPU: padded tiles up to 64 x 64
        ((512, 33, 7), torch.float32),
    ],
)
def test_newton_schulz(shape, dtype):
    from atlas_kernels.ops.memory.triton.checks import check_newton_schulz

    errs = check_newton_schulz(shape, dtype=dtype, device="cuda")
    _assert_small(errs, 2e-2 if dtype == torch.bfloat16 else 1e-4)


def test_newton_schulz_float32_large_tiles_are_refused():
    from atlas_kernels.ops.newton_schulz.triton import newton_schulz_triton

    with pytest.raises(ValueError, match="float32 limit"):
        newton_schulz_triton(torch.randn(4, 96, 96, device="cuda"))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_poly_features(dtype):
    from atlas_kernels.ops.memory.triton.checks import check_poly_features

    errs = check_poly_features((2, 16, 512, 16), 2, dtype=dtype, device="cuda")
    _assert_small(errs, 2e-2 if dtype == torch.bfloat16 else 1e-5)
