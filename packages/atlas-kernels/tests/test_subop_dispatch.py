"""Sub-op dispatch of the torch chunk op: Newton-Schulz (Muon with ns_form="materialise") and the poly feature map
run their Triton kernels (`newton_schulz_auto`, `poly_features_auto`) on CUDA tensors the kernels support, the
torch references elsewhere.

On CPU the forced Triton path runs under the interpreter (conftest): float32 chunk op with every sub-op on Triton ==
the same op on the torch references (outputs, every state tensor, every input gradient). The selection rule is
checked with the device test replaced (`dispatch._on_kernel_device`), so that float64, the kernel limits and a
missing triton are exercised on CPU too. The `gpu` test checks the real selection and numerics in bf16 on CUDA.
"""

import subprocess
import sys

import pytest
import torch

from atlas_kernels import MemoryConfig, init_memory_params
from atlas_kernels.ops import dispatch
from atlas_kernels.ops.features import auto as poly_auto
from atlas_kernels.ops.memory import functional
from atlas_kernels.ops.memory.chunk import memory_chunk_torch
from atlas_kernels.ops.memory.triton.checks import err_ratio
from atlas_kernels.ops.newton_schulz import auto as ns_auto
from atlas_kernels.testing import random_inputs, rel_err

INTERPRETER = pytest.mark.skipif(torch.cuda.is_available(), reason="CPU interpreter path (the gpu test covers CUDA)")

CONFIGS = {
    "mlp-muon": MemoryConfig(memory="mlp", optimizer="muon", ns_form="materialise", window=2, chunk_size=4),
    "linear-muon": MemoryConfig(memory="linear", optimizer="muon", ns_form="materialise", window=2, chunk_size=4),
    "linear-gd-poly": MemoryConfig(memory="linear", optimizer="gd", feature_map="poly", window=2, chunk_size=4),
    "mlp-muon-poly": MemoryConfig(
        memory="mlp",
        optimizer="muon",
        ns_form="materialise",
        feature_map="poly",
        memory_norm=False,
        window=3,
        chunk_size=4,
    ),
}


@pytest.fixture
def spies(monkeypatch):
    """Count the calls of both implementations of each sub-op (the Triton entry points are looked up at call time
    by the dispatchers, the references are their module globals)."""
    pytest.importorskip("triton")
    from atlas_kernels.ops.features import triton as poly_triton
    from atlas_kernels.ops.newton_schulz import triton as ns_triton

    calls = {"ns.triton": 0, "ns.torch": 0, "poly.triton": 0, "poly.torch": 0, "poly.bypass": 0}

    def counted(name, fn):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return fn(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(ns_triton, "newton_schulz_triton", counted("ns.triton", ns_triton.newton_schulz_triton))
    monkeypatch.setattr(ns_auto, "newton_schulz", counted("ns.torch", ns_auto.newton_schulz))
    monkeypatch.setattr(
        poly_triton, "poly_features_l2norm_triton", counted("poly.triton", poly_triton.poly_features_l2norm_triton)
    )
    monkeypatch.setattr(poly_auto, "poly_features", counted("poly.torch", poly_auto.poly_features))
    # the torch reference called directly, past the dispatcher (the oracles do; the chunk op must not)
    monkeypatch.setattr(functional, "poly_features", counted("poly.bypass", functional.poly_features))
    return calls


def _force(monkeypatch, triton: bool):
    monkeypatch.setattr(ns_auto, "_use_triton", lambda x, steps: triton)
    monkeypatch.setattr(poly_auto, "_use_triton", lambda x, coeffs, degree: triton)


def _forward_backward(cfg, T, *, B=1, H=2, D=4, dtype=torch.float32, device="cpu", seed=0):
    """Outputs, state tensors and the gradient of every input of one chunk-op call (a random linear loss over
    the outputs and every state tensor)."""
    q, k, v, gates = random_inputs(B, T, H, D, seed=seed, eta_scale=0.5)
    params = init_memory_params(cfg, H, D, D, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    leaves = {"q": q, "k": k, "v": v, **{f"gates.{n}": g for n, g in gates.items()}, **params}
    leaves = {n: t.to(device=device, dtype=dtype).requires_grad_() for n, t in leaves.items()}
    o, state = memory_chunk_torch(
        leaves["q"],
        leaves["k"],
        leaves["v"],
        {n: leaves[f"gates.{n}"] for n in gates},
        {n: leaves[n] for n in params},
        cfg,
    )
    outs = {"o": o, **{f"state.{n}": t for n, t in state.tensors().items()}}
    gen = torch.Generator().manual_seed(seed + 1)
    loss = sum((t.float() * torch.randn(t.shape, generator=gen).to(device)).sum() for t in outs.values())
    grads = torch.autograd.grad(loss, list(leaves.values()), allow_unused=True)
    for name, g in zip(leaves, grads):
        outs[f"grad.{name}"] = torch.zeros_like(leaves[name]) if g is None else g
    return outs


CASES = [(c, T) for c in CONFIGS for T in (7, 33) if (c, T) != ("mlp-muon-poly", 33)]  # both sub-ops: T = 7 only


@INTERPRETER
@pytest.mark.parametrize("config,T", CASES, ids=[f"{c}-T{T}" for c, T in CASES])
def test_forced_triton_subops_match_the_torch_references(config, T, spies, monkeypatch):
    """float32: Triton vs torch within 6x the torch path's own float32 rounding error (measured against float64:
    Muon + the memory LayerNorm amplify it to ~4e-3 at T = 33), or 1e-4. The ratio depends on the CPU's BLAS
    kernels: below 3 where this test was written, up to 4.2 on an AMD EPYC with MKL 2024.2 (mlp-muon, T = 33, the
    momentum's W2); a wrong sub-op kernel gives errors of order 1. float64 (T = 7): equal to round-off,
    the same function and gradients."""
    cfg = CONFIGS[config]
    _force(monkeypatch, False)
    ref64 = _forward_backward(cfg, T, dtype=torch.float64)
    ref32 = _forward_backward(cfg, T)
    assert spies["ns.triton"] == spies["poly.triton"] == 0
    torch_calls = dict(spies)  # two reference runs
    _force(monkeypatch, True)
    out32 = _forward_backward(cfg, T)
    # every sub-op call of the forced run went to Triton, and there was something to dispatch
    assert spies["ns.torch"] == torch_calls["ns.torch"] and spies["poly.torch"] == torch_calls["poly.torch"]
    if cfg.optimizer == "muon":
        assert 2 * spies["ns.triton"] == torch_calls["ns.torch"] > 0
    if cfg.feature_map == "poly":
        assert 2 * spies["poly.triton"] == torch_calls["poly.torch"] > 0
    assert spies["poly.bypass"] == 0  # keys and queries both went through the dispatcher
    assert ref32.keys() == out32.keys()
    bad32 = {}
    for n in ref32:
        assert out32[n].dtype == ref32[n].dtype == torch.float32
        err, base = rel_err(ref32[n], out32[n]), rel_err(ref64[n], ref32[n].double())
        if not err <= max(1e-4, 6 * base):
            bad32[n] = (err, base)
    assert not bad32, bad32
    if T == 7:
        out64 = _forward_backward(cfg, T, dtype=torch.float64)
        bad64 = {n: e for n in ref64 if not (e := rel_err(ref64[n], out64[n])) < 1e-9}
        assert not bad64, bad64


def test_cpu_tensors_take_the_torch_references(spies):
    """The real rule on CPU (no replaced predicate): nothing reaches a Triton kernel."""
    x = torch.randn(2, 3, 4, 6, 5)
    assert not ns_auto._use_triton(x, 5)
    assert not poly_auto._use_triton(x, torch.rand(3, 3), 2)
    _forward_backward(CONFIGS["mlp-muon-poly"], 7)
    assert spies["ns.triton"] == spies["poly.triton"] == 0
    assert spies["ns.torch"] > 0 and spies["poly.torch"] > 0


def test_selection_rule(monkeypatch):
    """dtype, the kernels' own limits (their `_check`) and the triton install, with the device test passing."""
    pytest.importorskip("triton")
    monkeypatch.setattr(dispatch, "_on_kernel_device", lambda x: True)
    a = torch.rand(3, 3)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        assert ns_auto._use_triton(torch.zeros(2, 5, 8, 24, dtype=dtype), 5)
        assert poly_auto._use_triton(torch.zeros(2, 3, 7, 16, dtype=dtype), a, 2)
    assert not ns_auto._use_triton(torch.zeros(2, 8, 24, dtype=torch.float64), 5)
    assert not poly_auto._use_triton(torch.zeros(2, 3, 7, 16, dtype=torch.float64), a, 2)
    assert not ns_auto._use_triton(torch.zeros(2, 129, 130), 5)  # min(m, n) > 128
    assert not ns_auto._use_triton(torch.zeros(2, 8, 257), 5)  # max(m, n) > 256
    assert not poly_auto._use_triton(torch.zeros(2, 3, 7, 257), a, 2)  # d > 256
    assert not poly_auto._use_triton(torch.zeros(2, 4, 7, 16), a, 2)  # per-head coefficients of 3 heads, not 4
    assert not poly_auto._use_triton(torch.zeros(2, 3, 0, 16), a, 2)  # empty
    monkeypatch.setattr(dispatch, "triton_available", lambda: False)
    assert not ns_auto._use_triton(torch.zeros(2, 8, 24), 5)
    assert not poly_auto._use_triton(torch.zeros(2, 3, 7, 16), a, 2)


def test_environment_switch_turns_the_subop_kernels_off(monkeypatch):
    """ATLAS_KERNELS_TRITON_SUBOPS=0: torch references even where the kernels would apply (read at call time)."""
    pytest.importorskip("triton")
    monkeypatch.setattr(dispatch, "_on_kernel_device", lambda x: True)
    x, a = torch.zeros(2, 5, 8, 24), torch.rand(3, 3)
    assert ns_auto._use_triton(x, 5) and dispatch.subops_enabled()
    for off in ("0", ""):
        monkeypatch.setenv(dispatch.SUBOPS_ENV, off)
        assert not dispatch.subops_enabled()
        assert not ns_auto._use_triton(x, 5)
        assert not poly_auto._use_triton(torch.zeros(2, 3, 7, 16), a, 2)
    monkeypatch.setenv(dispatch.SUBOPS_ENV, "1")
    assert ns_auto._use_triton(x, 5)


@pytest.mark.parametrize("norm", [0.0, 0.3, 0.5, 1.0, 1.0 + 1e-6, 3.0, 1e3])
def test_power_of_two_bound_keeps_rows_inside_the_unit_ball(norm):
    """x / 2^k has row norms <= 1/2: the kernel's normalisation (eps = 1) is then the identity map."""
    x = torch.randn(3, 4, 6, dtype=torch.float32)
    x = torch.nn.functional.normalize(x, dim=-1) * norm
    k = poly_auto._power_of_two_bound(x)
    assert k.dtype in (torch.int32, torch.int64) and k.item() >= 0
    assert (x * 2.0 ** -k.item()).norm(dim=-1).max() <= 0.5
    if norm > 0:  # and 2^k is not needlessly large
        assert k.item() == 0 or x.norm(dim=-1).max() >= 2.0 ** (k.item() - 2)


def test_atlas_kernels_imports_and_runs_without_triton():
    code = (
        "import sys; sys.modules['triton'] = None\n"
        "import torch\n"
        "from atlas_kernels import MemoryConfig, init_memory_params, memory_chunk\n"
        "from atlas_kernels.ops.dispatch import triton_available\n"
        "from atlas_kernels.testing import random_inputs\n"
        "assert not triton_available()\n"
        "cfg = MemoryConfig(memory='mlp', optimizer='muon', feature_map='poly', chunk_size=4)\n"
        "q, k, v, gates = random_inputs(1, 5, 2, 4, dtype=torch.float32)\n"
        "o, _ = memory_chunk(q, k, v, gates, init_memory_params(cfg, 2, 4, 4), cfg)\n"
        "assert torch.isfinite(o).all()\n"
        "assert 'atlas_kernels.ops.newton_schulz.triton' not in sys.modules\n"
        "assert 'atlas_kernels.ops.features.triton' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


@pytest.mark.gpu
def test_cuda_bf16_muon_chunk_selects_triton(spies, monkeypatch):
    """bf16 inputs (the op computes in float32: NS takes padded tiles <= 64 x 64 there): every NS and feature call
    runs Triton; the result matches the same op on the torch references by rms error ratio."""
    cfg = MemoryConfig(
        memory="mlp", optimizer="muon", ns_form="materialise", feature_map="poly", window=2, chunk_size=16
    )
    shapes = {"B": 2, "H": 4, "D": 8, "dtype": torch.bfloat16, "device": "cuda"}  # W1 [8, 32], W2 [32, 45]
    assert ns_auto._use_triton(torch.zeros(2, 8, 32, device="cuda"), cfg.ns_steps)
    assert not ns_auto._use_triton(torch.zeros(2, 96, 96, device="cuda"), cfg.ns_steps)  # float32 tile limit
    assert ns_auto._use_triton(torch.zeros(2, 96, 96, device="cuda", dtype=torch.bfloat16), cfg.ns_steps)
    assert not ns_auto._use_triton(torch.zeros(2, 8, 32, device="cuda", dtype=torch.float64), cfg.ns_steps)
    assert poly_auto._use_triton(torch.zeros(2, 4, 7, 8, device="cuda"), torch.rand(4, 3, device="cuda"), 2)
    out = _forward_backward(cfg, 77, **shapes)
    assert spies["ns.triton"] > 0 and spies["poly.triton"] > 0
    assert spies["ns.torch"] == spies["poly.torch"] == 0
    _force(monkeypatch, False)
    ref = _forward_backward(cfg, 77, **shapes)
    assert spies["ns.torch"] > 0 and spies["poly.torch"] > 0
    errs = {n: err_ratio(ref[n], out[n]) for n in ref}
    bad = {n: e for n, e in errs.items() if not e <= 1e-2}
    assert not bad, bad
