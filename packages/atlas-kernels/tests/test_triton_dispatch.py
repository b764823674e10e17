"""Backend dispatch of `memory_chunk`: "auto" | "torch" | "triton"."""

import pytest
import torch

from atlas_kernels import MemoryConfig, api, init_memory_params, memory_chunk, memory_step
from atlas_kernels.testing import random_inputs, rel_err

LINEAR = MemoryConfig(memory="linear", optimizer="gd", feature_map="identity", bias="l2", window=2, chunk_size=4)


def _args(cfg=LINEAR, T=6, dtype=torch.float64):
    q, k, v, gates = random_inputs(1, T, 2, 4, dtype=dtype)
    if not cfg.uses_momentum:
        del gates["theta"]
    p = init_memory_params(cfg, 2, 4, 4, dtype=dtype, generator=torch.Generator().manual_seed(0))
    return q, k, v, gates, p, cfg


def test_unknown_backend_is_rejected():
    with pytest.raises(ValueError, match="^backend: expected one of auto, torch, compiled, triton"):
        memory_chunk(*_args(), backend="cuda")


def test_auto_and_torch_run_the_torch_op_on_cpu():
    q = _args()[0]
    assert api.select_backend(q, LINEAR, "auto") == "torch"
    assert api.select_backend(q, LINEAR, "torch") == "torch"
    o_auto, _ = memory_chunk(*_args(), backend="auto")
    o_torch, _ = memory_chunk(*_args(), backend="torch")
    assert torch.equal(o_auto, o_torch)


@pytest.mark.parametrize(
    "fields,field",
    [
        ({"optimizer": "muon"}, "optimizer"),
        ({"feature_map": "poly"}, "feature_map"),
        ({"window": "global"}, "window"),
        ({"window": 66}, "window"),
        ({"chunk_size": 256}, "chunk_size"),
    ],
)
def test_triton_on_an_unsupported_config_names_the_field(fields, field):
    cfg = MemoryConfig(**{**LINEAR.to_dict(), "ns_coeffs": LINEAR.ns_coeffs, **fields})
    q = torch.zeros(1, 3, 2, 4)
    with pytest.raises(ValueError, match=f"^{field}: not supported by backend='triton'"):
        api.select_backend(q, cfg, "triton")
    assert api.select_backend(q, cfg, "auto") == "torch"


def test_triton_rejects_unsupported_inputs():
    with pytest.raises(ValueError, match="^q: not supported by backend='triton'.*key dim 512"):
        api.select_backend(torch.zeros(1, 3, 2, 512), LINEAR, "triton")
    with pytest.raises(ValueError, match="^q: not supported by backend='triton'.*int64"):
        api.select_backend(torch.zeros(1, 3, 2, 4, dtype=torch.int64), LINEAR, "triton")


def test_triton_on_cpu_needs_the_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match="^backend: 'triton' needs CUDA tensors"):
        memory_chunk(*_args(), backend="triton")


def test_triton_without_the_package(monkeypatch):
    monkeypatch.setattr(api, "triton_available", lambda: False)
    with pytest.raises(ValueError, match="needs the triton package"):
        memory_chunk(*_args(), backend="triton")
    assert api.select_backend(torch.zeros(1, 3, 2, 4), LINEAR, "auto") == "torch"


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU interpreter path")
def test_triton_backend_runs_under_the_interpreter():
    pytest.importorskip("triton")
    args = _args(T=7)
    o_ref, s_ref = memory_chunk(*args, backend="torch")
    o, s = memory_chunk(*args, backend="triton")
    assert rel_err(o_ref, o) < 1e-10
    assert rel_err(s_ref.weights["W"], s.weights["W"]) < 1e-10
    q, k, v, gates, p, cfg = args
    o1, _ = memory_step(q[:, 0], k[:, 0], v[:, 0], {n: g[:, 0] for n, g in gates.items()}, p, cfg, backend="triton")
    assert rel_err(o_ref[:, 0], o1) < 1e-10
    cfg_m = MemoryConfig(**{**LINEAR.to_dict(), "ns_coeffs": LINEAR.ns_coeffs, "optimizer": "momentum"})
    args_m = _args(cfg_m, T=7)
    o_ref, _ = memory_chunk(*args_m, backend="torch")
    o, _ = memory_chunk(*args_m, backend="triton")
    assert rel_err(o_ref, o) < 1e-10


@pytest.mark.gpu
def test_auto_picks_triton_on_cuda(monkeypatch):
    calls = []
    from atlas_kernels.ops.memory.triton import linear as triton_linear

    real = triton_linear.memory_chunk_triton
    monkeypatch.setattr(triton_linear, "memory_chunk_triton", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    q, k, v, gates, p, cfg = _args(dtype=torch.float32)
    to = lambda t: t.cuda()  # noqa: E731
    args = (to(q), to(k), to(v), {n: to(g) for n, g in gates.items()}, {n: to(t) for n, t in p.items()}, cfg)
    assert api.select_backend(args[0], cfg, "auto") == "triton"
    assert api.select_backend(args[0].double(), cfg, "auto") == "torch"  # float64 stays on the torch op
    o, _ = memory_chunk(*args)
    assert calls
    o_ref, _ = memory_chunk(*args, backend="torch")
    assert rel_err(o_ref, o) < 1e-4


def test_auto_keeps_mlp_memories_on_torch_unless_enabled(monkeypatch):
    """The MLP kernels failed the real-shape GPU check: "auto" holds them back, the variable releases them."""
    mlp = MemoryConfig(memory="mlp", optimizer="gd", window=2, chunk_size=16)
    gated = MemoryConfig(memory="gated_mlp", optimizer="momentum", window=2, chunk_size=16)
    monkeypatch.delenv(api.MLP_TRITON_ENV, raising=False)
    for cfg in (mlp, gated):
        assert "GPU check" in api.auto_excluded(cfg)
    assert api.auto_excluded(LINEAR) is None
    monkeypatch.setenv(api.MLP_TRITON_ENV, "1")
    assert api.auto_excluded(mlp) is None and api.auto_excluded(gated) is None


def test_memory_kernels_compile_without_wgmma_on_hopper_only(monkeypatch):
    """Hopper launches see DISABLE_MMA_V3=1 (wgmma miscompiles the memory kernels), other devices and the opt-in do
    not, and the variable is restored afterwards."""
    import os

    from atlas_kernels.ops import triton_common

    monkeypatch.delenv("DISABLE_MMA_V3", raising=False)
    monkeypatch.delenv("ATLAS_KERNELS_WGMMA", raising=False)
    cap = {"value": (9, 0)}
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: cap["value"])
    seen = {}
    for name, device, capability in (("hopper", "cuda", (9, 0)), ("ampere", "cuda", (8, 0)), ("cpu", "cpu", None)):
        cap["value"] = capability
        with triton_common.memory_kernel_compile(torch.device(device)):
            seen[name] = os.environ.get("DISABLE_MMA_V3")
        assert "DISABLE_MMA_V3" not in os.environ
    assert seen == {"hopper": "1", "ampere": None, "cpu": None}
    monkeypatch.setenv("ATLAS_KERNELS_WGMMA", "1")
    cap["value"] = (9, 0)
    with triton_common.memory_kernel_compile(torch.device("cuda")):
        assert "DISABLE_MMA_V3" not in os.environ
