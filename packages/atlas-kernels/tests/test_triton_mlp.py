"""Triton MLP memory == the torch chunk op and the naive oracle: outputs, final state, every input gradient.

Interpreter-sized shapes (B <= 2, H = 2, T <= 33, D <= 6, hidden <= 24). float64 runs check the kernel and the
recomputing backward to round-off; float32 runs check them against a float64 reference. torch.empty is
NaN-poisoned (conftest `nan_empty`), so an output element the kernel forgets to write fails the comparison.
"""

import pytest
import torch

from atlas_kernels import MemoryConfig, api, memory_chunk, memory_naive, memory_naive_chunked
from atlas_kernels.testing import assert_empty_input, assert_results_match, assert_state_handoff, leaf_inputs, rel_err

pytest.importorskip("triton")
from atlas_kernels.ops.memory.triton.mlp import memory_chunk_triton_mlp  # noqa: E402

pytestmark = pytest.mark.usefixtures("nan_empty")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
H = 2


def _cfg(optimizer="gd", window=1, chunk_size=4, memory="mlp", **kw):
    return MemoryConfig(memory=memory, optimizer=optimizer, window=window, chunk_size=chunk_size, **kw)


def _case(cfg, **shape):
    return leaf_inputs(cfg, H, device=DEVICE, **shape)


def _run(op, q, k, v, gates, p, cfg, state=None, seed=9):
    """Forward, then the gradient of a loss that touches the outputs and every tensor of the final state."""
    o, s = op(q, k, v, gates, p, cfg, state)
    g = torch.Generator().manual_seed(seed)
    loss = (o.double() * torch.randn(o.shape, generator=g, dtype=torch.float64).to(o.device)).sum()
    for _, t in sorted(s.tensors().items()):
        loss = loss + (t.double() * torch.randn(t.shape, generator=g, dtype=torch.float64).to(o.device)).sum()
    leaves = {"q": q, "k": k, "v": v, **{f"gates.{n}": t for n, t in gates.items()}, **p}
    grads = torch.autograd.grad(loss, list(leaves.values()), allow_unused=True)
    return o, s, dict(zip(leaves, grads))


def _two_segments(q, k, v, gates, p, cfg, state=None):
    """The Triton op over tokens [0, 6) then the rest, the state kept in the graph (the first ends inside a chunk
    of 4: pending tokens and a resume state)."""
    pieces = []
    for a, b in ((0, 6), (6, None)):
        seg_gates = {n: g[:, a:b] for n, g in gates.items()}
        o, state = memory_chunk_triton_mlp(q[:, a:b], k[:, a:b], v[:, a:b], seg_gates, p, cfg, state)
        pieces.append(o)
    return torch.cat(pieces, 1), state


@pytest.mark.parametrize("memory", ["mlp", "gated_mlp"])
@pytest.mark.parametrize("optimizer", ["gd", "momentum"])
@pytest.mark.parametrize("window", [1, 3])
@pytest.mark.parametrize("chunk_size,T", [(4, 7), (4, 33)])
def test_matches_torch_op_float64(optimizer, window, chunk_size, T, memory):
    cfg = _cfg(optimizer, window, chunk_size, memory)
    args = _case(cfg, T=T, eta_scale=0.3)
    ref = _run(memory_chunk, *args, cfg)
    out = _run(memory_chunk_triton_mlp, *args, cfg)
    assert out[0].dtype == torch.float64
    # The memory LN amplifies round-off along the sequence (README, Numerics): at T = 33 the torch op and the
    # naive oracle themselves differ by up to 1.4e-10 on these inputs, the kernel by up to 4e-11.
    assert_results_match(ref, out, 1e-10 if T < 20 else 1e-9)


@pytest.mark.parametrize("memory", ["mlp", "gated_mlp"])
@pytest.mark.parametrize("optimizer", ["gd", "momentum"])
@pytest.mark.parametrize("window,chunk_size", [(1, 1), (2, 1), (3, 4), (6, 4)], ids=["b1", "b1-c2", "b4-c3", "b4-c6"])
def test_matches_naive_oracle(window, chunk_size, optimizer, memory):
    """Against the token loop: b = 1 is the exact recurrence; window 6 > b reaches two chunks back."""
    cfg = _cfg(optimizer, window, chunk_size, memory)
    args = _case(cfg, T=7, seed=5)
    oracle = memory_naive if chunk_size == 1 else memory_naive_chunked
    assert_results_match(_run(oracle, *args, cfg), _run(memory_chunk_triton_mlp, *args, cfg), 1e-9)


VARIANTS = {
    "no-norm": ({"memory_norm": False}, {}),
    "no-residual-Dv6": ({"residual": False}, {"Dv": 6}),
    "silu": ({"activation": "silu"}, {}),
    "dot-bias": ({"bias": "dot"}, {}),
    "hidden-blocks-B2": ({"expansion": 4}, {"Dk": 5, "B": 2}),  # Dh = 20 in blocks of 16: a partial block
    "expansion-1": ({"expansion": 1}, {}),
    "gated-silu-no-norm": ({"memory": "gated_mlp", "activation": "silu", "memory_norm": False}, {}),
    "gated-dot-no-residual": ({"memory": "gated_mlp", "bias": "dot", "residual": False}, {"Dv": 6}),
    "gated-hidden-blocks": ({"memory": "gated_mlp", "expansion": 4}, {"Dk": 5, "B": 2}),
}


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("optimizer", ["gd", "momentum"])
def test_variants_match_torch_op(variant, optimizer):
    fields, shape = VARIANTS[variant]
    cfg = _cfg(optimizer, 3, 4, **fields)
    args = _case(cfg, T=9, seed=7, **shape)
    ref = _run(memory_chunk, *args, cfg)
    out = _run(lambda *a: memory_chunk_triton_mlp(*a, block_h=16), *args, cfg)
    assert_results_match(ref, out, 1e-10)


@pytest.mark.parametrize("memory", ["mlp", "gated_mlp"])
@pytest.mark.parametrize("optimizer", ["gd", "momentum"])
@pytest.mark.parametrize("window,T", [(1, 7), (3, 33)])
def test_decay_toward_init_matches_torch_op(optimizer, memory, window, T):
    """decay_target="init" (every A W_0 becomes A W_0 + (1 - A) W_init): outputs, states and every gradient,
    W_init's (the same params as the initial state) included."""
    cfg = _cfg(optimizer, window, 4, memory, decay_target="init")
    args = _case(cfg, T=T, seed=13, eta_scale=0.3)
    assert_results_match(
        _run(memory_chunk, *args, cfg), _run(memory_chunk_triton_mlp, *args, cfg), 1e-10 if T < 20 else 1e-9
    )


@pytest.mark.parametrize("optimizer", ["gd", "momentum"])
def test_decay_toward_init_matches_oracle_and_resumes(optimizer):
    """Against the token loop (b = 1), and as two segments with a state that starts away from W_init."""
    cfg = _cfg(optimizer, 2, 1, "gated_mlp", decay_target="init")
    args = _case(cfg, T=7, seed=17)
    assert_results_match(_run(memory_naive, *args, cfg), _run(memory_chunk_triton_mlp, *args, cfg), 1e-9)
    cfg = _cfg(optimizer, 3, 4, decay_target="init")
    q, k, v, gates, p = _case(cfg, T=13, seed=19, eta_scale=0.5)

    assert_results_match(_run(memory_chunk, q, k, v, gates, p, cfg), _run(_two_segments, q, k, v, gates, p, cfg), 1e-10)


@pytest.mark.parametrize("optimizer", ["gd", "momentum"])
def test_float32_error_ratio(optimizer):
    cfg = _cfg(optimizer, 2, 16)
    args64 = _case(cfg, T=33, Dk=8, eta_scale=0.3)
    args32 = _case(cfg, T=33, Dk=8, eta_scale=0.3, dtype=torch.float32)
    ref = _run(memory_chunk, *args64, cfg)
    errs_torch = assert_results_match(ref, _run(memory_chunk, *args32, cfg), 1e-3)
    errs = assert_results_match(ref, _run(memory_chunk_triton_mlp, *args32, cfg), 1e-3)
    assert _run(memory_chunk_triton_mlp, *args32, cfg)[0].dtype == torch.float32
    for name, e in errs.items():  # no worse than the torch op in float32 by more than a small factor
        assert e <= 10 * errs_torch[name] + 1e-6, (name, e, errs_torch[name])


@pytest.mark.parametrize("optimizer,memory", [("gd", "mlp"), ("momentum", "mlp"), ("momentum", "gated_mlp")])
def test_segments_carry_state_and_gradients(optimizer, memory):
    """Two segments (the first ends inside a chunk: pending tokens, resume state) with the state kept in the
    graph == one call, outputs and every gradient (through the halo and the resume weights)."""
    cfg = _cfg(optimizer, 3, 4, memory)
    q, k, v, gates, p = _case(cfg, T=13, seed=11, eta_scale=0.5)

    ref = _run(memory_chunk, q, k, v, gates, p, cfg)
    out = _run(_two_segments, q, k, v, gates, p, cfg)
    assert_results_match(ref, out, 1e-10)


@pytest.mark.parametrize("optimizer,memory", [("gd", "mlp"), ("momentum", "mlp"), ("momentum", "gated_mlp")])
def test_states_interoperate_with_the_torch_op(optimizer, memory):
    """torch -> triton -> torch over three segments, then decoding through backend="triton" == one call."""
    cfg = _cfg(optimizer, 3, 4, memory)
    args = _case(cfg, B=2, T=15, seed=2, eta_scale=0.5, requires_grad=False)
    assert_state_handoff(memory_chunk_triton_mlp, *args, cfg)


def test_empty_sequence_returns_the_state():
    cfg = _cfg("momentum", 2, 4)
    assert_empty_input(memory_chunk_triton_mlp, *_case(cfg, T=0), cfg)


def test_dispatch():
    q = torch.zeros(1, 3, 2, 4)
    assert api.select_backend(q, _cfg("momentum", 4), "triton") == "triton"  # interpreter (CPU) or CUDA
    assert api.select_backend(q, _cfg("gd", 4), "auto") == ("triton" if q.is_cuda else "torch")
    for cfg, field in (
        (_cfg("muon"), "optimizer"),
        (_cfg(feature_map="poly"), "feature_map"),
        (_cfg(window="global"), "window"),
        (_cfg(window=66), "window"),
        (_cfg(chunk_size=256), "chunk_size"),
    ):
        with pytest.raises(ValueError, match=f"^{field}: not supported by backend='triton'"):
            api.select_backend(q, cfg, "triton")
        assert api.select_backend(q, cfg, "auto") == "torch"
    with pytest.raises(ValueError, match="^optimizer: not supported by the Triton backend"):
        memory_chunk_triton_mlp(*_case(_cfg("gd"), T=3), _cfg("muon"))
    with pytest.raises(ValueError, match="^memory: not supported by the Triton backend.*'mlp' and 'gated_mlp'"):
        memory_chunk_triton_mlp(*_case(_cfg("gd"), T=3), MemoryConfig(memory="linear"))


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU interpreter path")
def test_memory_chunk_backend_triton_runs_the_mlp_kernel(monkeypatch):
    from atlas_kernels.ops.memory.triton import mlp as triton_mlp

    calls = []
    real = triton_mlp.memory_chunk_triton_mlp
    monkeypatch.setattr(triton_mlp, "memory_chunk_triton_mlp", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    cfg = _cfg("gd", 2)
    args = _case(cfg, T=5)
    o, _ = memory_chunk(*args, cfg, backend="triton")
    assert calls
    assert rel_err(memory_chunk(*args, cfg, backend="torch")[0], o) < 1e-12


def test_bfloat16_inputs_accumulate_in_float32():
    """bf16 inputs: fp32 tiles and states (the interpreter's bf16 dot is wrong, so operands stay fp32 here; the
    GPU tests cover bf16 operands). Reference: the torch op in float64 on the same rounded inputs."""
    cfg = _cfg("momentum", 2, 8)
    args64 = _case(cfg, T=17, Dk=8, eta_scale=0.3)

    def make(dt):  # the same bf16-rounded inputs, held in dtype dt
        rnd = lambda t: t.detach().to(torch.bfloat16).to(dt).requires_grad_()  # noqa: E731
        q, k, v, gates, p = args64
        return rnd(q), rnd(k), rnd(v), {n: rnd(t) for n, t in gates.items()}, {n: rnd(t) for n, t in p.items()}

    ref = _run(memory_chunk, *make(torch.float64), cfg)
    o, s, g = _run(memory_chunk_triton_mlp, *make(torch.bfloat16), cfg)
    assert o.dtype == torch.bfloat16 and s.weights["W1"].dtype == torch.float32
    assert s.momentum["W2"].dtype == torch.float32 and s.halo_k.dtype == torch.float32
    assert rel_err(ref[0], o.double()) < 2e-2
    for name, t in ref[1].tensors().items():
        assert rel_err(t, s.tensors()[name].double()) < 1e-5, name
    for name, gr in ref[2].items():
        assert g[name].dtype == torch.bfloat16
        assert rel_err(gr, g[name].double()) < 3e-2, name


@pytest.mark.parametrize("memory", ["mlp", "gated_mlp"])
def test_gpu_check_helper_runs_on_cpu(memory):
    """The check the GPU tests and benchmark use, at an interpreter-sized shape in float32."""
    from atlas_kernels.ops.memory.triton.mlp_checks import check_mlp_memory

    cfg = _cfg("momentum", 3, 8, memory)
    errs, base = check_mlp_memory(cfg, 1, 19, H, 8, dtype=torch.float32, device=DEVICE, baseline=True)
    assert {"o", "state.weights.W1", "state.momentum.W2", "grad.q", "grad.ln_weight", "grad.W2"} <= errs.keys()
    if memory == "gated_mlp":
        assert {"state.weights.W3", "state.momentum.W3", "grad.W3"} <= errs.keys()
    assert errs.keys() == base.keys()
    assert max(errs.values()) < 1e-5, errs


def test_gpu_shared_memory_guard():
    """Tile sizes measured to compile for sm_90 within 227 KB pass; larger ones are refused (on CUDA) by name."""
    from atlas_kernels.ops.memory.triton.mlp import gpu_tiles_fit

    assert gpu_tiles_fit(_cfg(window=4, chunk_size=64), 96, torch.bfloat16)  # 760M, Omega c = 4
    assert gpu_tiles_fit(_cfg(window=3, chunk_size=16), 48, torch.float32)  # the fp32 GPU test
    assert gpu_tiles_fit(_cfg(window=4, chunk_size=32), 64, torch.float32)
    assert not gpu_tiles_fit(_cfg(window=4, chunk_size=64), 64, torch.float32)
    assert not gpu_tiles_fit(_cfg(window=4, chunk_size=128), 256, torch.bfloat16)
