"""Triton linear memory == the torch chunk op and the naive oracle: outputs, final state, every input gradient.

Interpreter-sized shapes (B <= 2, H = 2, T <= 33, D <= 20). float64 runs check the hand-written backward to
round-off; float32 / bfloat16 runs check the precision policy against a float64 reference.
"""

import pytest
import torch

from atlas_kernels import MemoryConfig, memory_chunk, memory_naive, memory_naive_chunked
from atlas_kernels.testing import assert_empty_input, assert_results_match, assert_state_handoff, leaf_inputs, rel_err

pytest.importorskip("triton")
from atlas_kernels.ops.memory.triton.linear import memory_chunk_triton  # noqa: E402

pytestmark = pytest.mark.usefixtures("nan_empty")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
H = 2


def _cfg(bias="l2", window=1, chunk_size=4, decay_first=False, optimizer="gd"):
    return MemoryConfig(
        memory="linear",
        optimizer=optimizer,
        feature_map="identity",
        bias=bias,
        window=window,
        chunk_size=chunk_size,
        decay_first=decay_first,
    )


def _case(cfg, **shape):
    return leaf_inputs(cfg, H, device=DEVICE, **shape)


def _run(op, q, k, v, gates, p, cfg, state=None, seed=9):
    """Forward, then the gradient of a loss that touches the outputs and the final state."""
    o, s = op(q, k, v, gates, p, cfg, state)
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(o.shape, generator=g, dtype=torch.float64).to(o.device)
    ww = torch.randn(s.weights["W"].shape, generator=g, dtype=torch.float64).to(o.device)
    loss = (o.double() * w).sum() + (s.weights["W"].double() * ww).sum()
    if s.momentum is not None:
        loss = loss + (s.momentum["W"].double() * ww.flip(-1)).sum()
    leaves = {"q": q, "k": k, "v": v, **{f"gates.{n}": t for n, t in gates.items()}, **p}
    grads = torch.autograd.grad(loss, list(leaves.values()), allow_unused=True)
    return o, s, dict(zip(leaves, grads))


CASES = {
    "gd-l2": ("l2", False, "gd"),
    "gd-l2-decay_first": ("l2", True, "gd"),  # the gated delta rule ordering
    "gd-dot": ("dot", False, "gd"),
    "momentum-l2": ("l2", False, "momentum"),
    "momentum-dot": ("dot", False, "momentum"),
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("window", [1, 3])
@pytest.mark.parametrize("chunk_size,T", [(4, 11), (16, 33), (5, 7)])
def test_matches_torch_op_float64(case, window, chunk_size, T):
    bias, decay_first, optimizer = CASES[case]
    cfg = _cfg(bias, window, chunk_size, decay_first, optimizer)
    args = _case(cfg, T=T)
    ref = _run(memory_chunk, *args, cfg)
    out = _run(memory_chunk_triton, *args, cfg)
    assert out[0].dtype == ref[0].dtype == torch.float64
    assert_results_match(ref, out, 1e-10)


@pytest.mark.parametrize("optimizer", ["gd", "momentum"])
@pytest.mark.parametrize("window,chunk_size", [(1, 1), (2, 1), (3, 4), (6, 4)], ids=["b1", "b1-c2", "b4-c3", "b4-c6"])
def test_matches_naive_oracle(window, chunk_size, optimizer):
    """Against the token loop: b = 1 is the exact recurrence; window 6 > b reaches two chunks back."""
    cfg = _cfg("l2", window, chunk_size, optimizer=optimizer)
    args = _case(cfg, T=9, seed=5)
    oracle = memory_naive if chunk_size == 1 else memory_naive_chunked
    ref = _run(oracle, *args, cfg)
    out = _run(memory_chunk_triton, *args, cfg)
    assert_results_match(ref, out, 1e-9)


@pytest.mark.parametrize("optimizer", ["gd", "momentum"])
def test_value_blocks_and_odd_dims(optimizer):
    """Dv = 20 split into value blocks of 16 (two programs per head, partial dq/dk/gate sums); Dk = 5, B = 2."""
    cfg = _cfg("l2", 3, 4, optimizer=optimizer)
    args = _case(cfg, B=2, T=7, Dk=5, Dv=20)
    ref = _run(memory_chunk, *args, cfg)
    out = _run(lambda *a: memory_chunk_triton(*a, block_v=16), *args, cfg)
    assert_results_match(ref, out, 1e-10)


@pytest.mark.parametrize("decay_first,optimizer", [(False, "gd"), (True, "gd"), (False, "momentum")])
def test_float32_error_ratio(decay_first, optimizer):
    cfg = _cfg("l2", 2, 16, decay_first, optimizer)
    args64 = _case(cfg, T=33, Dk=8, eta_scale=0.5)
    args32 = _case(cfg, T=33, Dk=8, eta_scale=0.5, dtype=torch.float32)
    ref = _run(memory_chunk, *args64, cfg)
    errs_torch = assert_results_match(ref, _run(memory_chunk, *args32, cfg), 1e-4)
    errs = assert_results_match(ref, _run(memory_chunk_triton, *args32, cfg), 1e-4)
    # no worse than the torch op in float32 by more than a small factor
    for name, e in errs.items():
        assert e <= 10 * errs_torch[name] + 1e-6, (name, e, errs_torch[name])


def test_bfloat16_inputs_accumulate_in_float32():
    cfg = _cfg("l2", 2, 8)
    args64 = _case(cfg, T=17, Dk=8, eta_scale=0.5)
    rounded = [t.detach().to(torch.bfloat16).double().requires_grad_() for t in args64[:3]]
    g64 = {n: t.detach().to(torch.bfloat16).double().requires_grad_() for n, t in args64[3].items()}
    p64 = {n: t.detach().to(torch.bfloat16).double().requires_grad_() for n, t in args64[4].items()}
    ref = _run(memory_chunk, *rounded, g64, p64, cfg)
    bf = [t.detach().to(torch.bfloat16).requires_grad_() for t in args64[:3]]
    gbf = {n: t.detach().to(torch.bfloat16).requires_grad_() for n, t in args64[3].items()}
    pbf = {n: t.detach().to(torch.bfloat16).requires_grad_() for n, t in args64[4].items()}
    o, s, g = _run(memory_chunk_triton, *bf, gbf, pbf, cfg)
    assert o.dtype == torch.bfloat16 and s.weights["W"].dtype == torch.float32
    o_t, s_t, _ = _run(memory_chunk, *bf, gbf, pbf, cfg)
    assert s_t.weights["W"].dtype == s.weights["W"].dtype and s_t.halo_k.dtype == s.halo_k.dtype
    assert rel_err(ref[0], o.double()) < 2e-2
    assert rel_err(ref[1].weights["W"], s.weights["W"].double()) < 1e-5
    for name, gr in ref[2].items():
        assert rel_err(gr, g[name].double()) < 3e-2, name


@pytest.mark.parametrize("case", CASES)
def test_segments_carry_state_and_gradients(case):
    """Two segments (the first ends inside a chunk: pending tokens, resume state) with the state kept in the
    graph: outputs of both segments and every gradient, through the halo and the resume weights, == one torch
    call over the whole sequence."""
    bias, decay_first, optimizer = CASES[case]
    cfg = _cfg(bias, 3, 4, decay_first, optimizer)
    q, k, v, gates, p = _case(cfg, T=13, seed=11)

    def two_segments(op):
        def call(q, k, v, gates, p, cfg, state=None):
            pieces, state = [], None
            for a, b in ((0, 6), (6, None)):
                seg_gates = {n: g[:, a:b] for n, g in gates.items()}
                o, state = op(q[:, a:b], k[:, a:b], v[:, a:b], seg_gates, p, cfg, state)
                pieces.append(o)
            return torch.cat(pieces, 1), state

        return call

    ref = _run(memory_chunk, q, k, v, gates, p, cfg)
    out = _run(two_segments(memory_chunk_triton), q, k, v, gates, p, cfg)
    assert_results_match(ref, out, 1e-10)


@pytest.mark.parametrize("optimizer", ["gd", "momentum"])
def test_states_interoperate_with_the_torch_op(optimizer):
    """torch -> triton -> torch over three segments and token-by-token decoding == one call."""
    cfg = _cfg("l2", 3, 4, optimizer=optimizer)
    assert_state_handoff(memory_chunk_triton, *_case(cfg, B=2, T=15, seed=2, requires_grad=False), cfg)


def test_empty_sequence_returns_the_state():
    cfg = _cfg("l2", 2, 4)
    assert_empty_input(memory_chunk_triton, *_case(cfg, T=0), cfg)


def test_linear_gpu_check_helper_runs_on_cpu():
    """The check the GPU tests and benchmark use (`triton.checks.check_linear_memory`), interpreter-sized, fp32."""
    from atlas_kernels.ops.memory.triton.checks import check_linear_memory

    cfg = MemoryConfig(memory="linear", optimizer="momentum", window=2, chunk_size=8)
    errs = check_linear_memory(cfg, 1, 19, H, 8, 6, dtype=torch.float32, device=DEVICE)
    assert {"o", "state.weights.W", "state.momentum.W", "grad.q", "grad.gates.theta", "grad.W"} <= errs.keys()
    assert max(errs.values()) < 1e-5, errs
