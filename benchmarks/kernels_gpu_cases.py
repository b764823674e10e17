"""Shapes, configurations, FLOP models, timing helpers and the step factories of the GPU benchmark
(`kernels_gpu.py`, which documents what it measures). `smoke_setup` shrinks the settings here for the CPU plumbing
check; the benchmark reads them as attributes of this module, so it sees the shrunk values.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import os
import sys
import time
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
# Atlas's memory (MLP, degree-2 features, Muon, c = 4) in the torch chunk op beside its GD twin (same op with gd):
# how far the factored Muon path (docs/muon.md) brings the paper's model toward OmegaNet's price on a GPU
ATLAS_CHUNK = 16
_ATLAS = MemoryConfig(memory="mlp", optimizer="muon", feature_map="poly", window=4, chunk_size=ATLAS_CHUNK)
# The twin first: every other row is reported as a ratio to it. The materialised path late: the most expensive row.
ATLAS_TWIN = "atlas gd twin"
ATLAS_CONFIGS = {
    ATLAS_TWIN: dataclasses.replace(_ATLAS, optimizer="gd"),
    "atlas muon, factored (float64 update)": _ATLAS,
    "atlas muon, factored (float32 update)": dataclasses.replace(_ATLAS, muon_float64=False),
    "atlas approx. muon (one polynomial per chunk)": dataclasses.replace(_ATLAS, muon_polynomial="chunk"),
    "atlas muon, materialised": dataclasses.replace(_ATLAS, ns_form="materialise"),
    # both weights' Gram matrices and polynomials in one stacked set of products (docs/muon.md, "One batch for all
    # the weights"): fewer launches for 1.9x the flops, which should lose at these sizes; last, the least needed row
    "atlas muon, factored, weights stacked": dataclasses.replace(_ATLAS, muon_batch="padded"),
}
# (B, T) of the Atlas rows, the paper's larger model first. One or two sequences: the GD twin keeps every chunk's
# state for the backward (the torch op checkpoints Muon only), 60 MB of bf16 weights per chunk at 760M (16 heads,
# W2 384 x 4753 with degree-2 features of head dim 96), 30 GB over 128 chunks with the backward's copies.
ATLAS_SHAPES = {"760M": (1, 2048), "340M": (2, 2048)}
# the 760M shape (Dk = 96 -> 128-wide tiles) is checked by tests/test_triton_gpu.py; here it would cost compile time
CHECK_SHAPES = {"340M T=2048 B=2": (2, 2048, 16, 64)}
TOL = {"linear": 2e-2, "ns": 2e-2, "poly": 2e-2, "mlp": 2e-2}
NS_SHAPES = [(4096, 64, 64), (1024, 64, 256), (2048, 96, 96)]
POLY_SHAPE = (2, 16, 512, 16)
DEVICE = "cuda"


def smoke_setup() -> None:
    """Shrink everything and run on CPU under the Triton interpreter (checks the script, not the kernels' speed)."""
    global MODELS, LENGTHS, TOKENS_PER_BATCH, CHECK_SHAPES, NS_SHAPES, POLY_SHAPE, DEVICE, ATLAS_SHAPES
    os.environ["TRITON_INTERPRET"] = "1"
    MODELS = {"tiny": (32, 2, 16)}
    ATLAS_SHAPES = {"tiny": (1, 70)}
    LENGTHS = (70,)
    TOKENS_PER_BATCH = 70
    CHECK_SHAPES = {"tiny T=70 B=1": (1, 70, 2, 16)}
    NS_SHAPES = [(4, 16, 48)]
    POLY_SHAPE = (1, 2, 9, 8)
    DEVICE = "cpu"


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


def time_ms(fn, reps: int = 2, warm: bool = False) -> float:
    """Best wall time of `reps` calls (after one untimed call unless `warm`): for steps of a second or more, where
    `triton.testing.do_bench`'s estimate-then-repeat would spend many calls."""
    if not warm:
        fn()
    times = []
    for _ in range(reps):
        if DEVICE == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if DEVICE == "cuda":
            torch.cuda.synchronize()
        times.append(1e3 * (time.perf_counter() - t0))
    return min(times)


def first_call(step, leaves) -> tuple[float, float | None]:
    """(wall ms, peak GiB) of the first call of `step`: the GPU memory it allocates at its peak beyond what was
    allocated before it (None on CPU). Its time includes one-off costs (cuBLAS handles, allocator growth)."""
    for t in leaves:
        t.grad = None
    if DEVICE == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated() if DEVICE == "cuda" else 0
    t0 = time.perf_counter()
    step()
    if DEVICE == "cuda":
        torch.cuda.synchronize()
    ms = 1e3 * (time.perf_counter() - t0)
    return ms, (torch.cuda.max_memory_allocated() - before) / 2**30 if DEVICE == "cuda" else None


def matmul_tflops() -> float:
    n = 8192 if DEVICE == "cuda" else 256
    dtype = torch.bfloat16 if DEVICE == "cuda" else torch.float32
    a = torch.randn(n, n, device=DEVICE, dtype=dtype)
    b = torch.randn(n, n, device=DEVICE, dtype=dtype)
    ms = bench_ms(lambda: a @ b)
    return 2 * n**3 / (ms * 1e-3) / 1e12


def memory_inputs(B, T, H, D, cfg, dtype=torch.bfloat16):
    from atlas_kernels.ops.memory.triton.checks import linear_memory_inputs
    from atlas_kernels.ops.memory.triton.mlp_checks import mlp_memory_inputs

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
