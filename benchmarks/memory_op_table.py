"""The op table of the memory-op CPU benchmark (`memory_op.py`, which documents the method): the ops it compares,
how one (op, T) cell builds and times an op, and the Linux /proc memory and CPU accounting that the cell and the
driver read. A cell runs in its own process (`memory_op.py --_cell OP:T`).
"""

from __future__ import annotations

import gc
import json
import os
import time

B, H, D = 2, 4, 32
CHUNK = 16
TINY_T = 32
TITANS_MAX_LR = 0.03
GATE_LOW = 0.9  # gates alpha, theta, gamma ~ U[GATE_LOW, 1); eta ~ ETA_SCALE U[GATE_LOW, 1)
ETA_SCALE = 0.02

# the Atlas settings every Atlas row starts from (poly p=2, and identity features)
_ATLAS = dict(memory="mlp", optimizer="muon", feature_map="poly", poly_degree=2, bias="l2", window=4, chunk_size=CHUNK)
_ATLAS_ID = dict(memory="mlp", optimizer="muon", feature_map="identity", bias="l2", window=4, chunk_size=CHUNK)

# name -> (kind, MemoryConfig kwargs or titans variant, description)
OPS: dict[str, tuple[str, dict, str]] = {
    "chunk-linear": (
        "chunk",
        dict(memory="linear", optimizer="gd", feature_map="identity", bias="l2", window=1, chunk_size=CHUNK),
        "memory_chunk: linear memory, l2 bias (delta rule), gd, identity phi, c=1, b=16",
    ),
    "chunk-titans": (
        "chunk",
        dict(memory="mlp", optimizer="momentum", feature_map="identity", bias="l2", window=1, chunk_size=CHUNK),
        "memory_chunk: Titans-matching: MLP (x4, GELU, LN, residual), l2, momentum, identity phi, c=1, b=16",
    ),
    "chunk-atlas-id": (
        "chunk",
        _ATLAS_ID,
        "memory_chunk: Atlas without features: MLP, l2, muon (NS-5, lowrank, float64 update), identity phi, c=4, b=16",
    ),
    "chunk-atlas": (
        "chunk",
        _ATLAS,
        "memory_chunk: Atlas: MLP, l2, muon (NS-5, ns_form=lowrank, float64 update), poly p=2 (D=561), c=4, b=16",
    ),
    "chunk-atlas-mat": (
        "chunk",
        {**_ATLAS, "ns_form": "materialise"},
        "chunk-atlas with ns_form=materialise: every token's momentum and weights formed, NS-5 on each",
    ),
    "chunk-atlas-f32": (
        "chunk",
        {**_ATLAS, "muon_float64": False},
        "chunk-atlas with muon_float64=False: the factored Muon update in float32 (faster, less precise)",
    ),
    "chunk-atlas-id-f32": (
        "chunk",
        {**_ATLAS_ID, "muon_float64": False},
        "chunk-atlas-id with muon_float64=False",
    ),
    "chunk-atlas-id-mat": (
        "chunk",
        {**_ATLAS_ID, "ns_form": "materialise"},
        "chunk-atlas-id with ns_form=materialise",
    ),
    "chunk-atlas-eigh": (
        "chunk",
        {**_ATLAS, "ns_eval": "eigh"},
        "chunk-atlas with ns_eval=eigh: each token's NS polynomial on the Gram matrix's eigenvalues",
    ),
    "chunk-atlas-id-eigh": (
        "chunk",
        {**_ATLAS_ID, "ns_eval": "eigh"},
        "chunk-atlas-id with ns_eval=eigh",
    ),
    "chunk-atlas-eigh-g8": (
        "chunk",
        {**_ATLAS, "ns_eval": "eigh", "checkpoint_group": 8},
        "chunk-atlas-eigh with checkpoint_group=8: every 8th chunk-boundary state kept for the backward",
    ),
    "chunk-atlas-id-eigh-g8": (
        "chunk",
        {**_ATLAS_ID, "ns_eval": "eigh", "checkpoint_group": 8},
        "chunk-atlas-id-eigh with checkpoint_group=8",
    ),
    "chunk-atlas-gd": (
        "chunk",
        dict(memory="mlp", optimizer="gd", feature_map="poly", poly_degree=2, bias="l2", window=4, chunk_size=CHUNK),
        "the GD twin of chunk-atlas (OmegaNet-like: same memory, features, window; no momentum, no NS)",
    ),
    "chunk-atlas-id-gd": (
        "chunk",
        dict(memory="mlp", optimizer="gd", feature_map="identity", bias="l2", window=4, chunk_size=CHUNK),
        "the GD twin of chunk-atlas-id",
    ),
    "chunk-atlas-approx": (
        "chunk",
        {**_ATLAS, "muon_polynomial": "chunk"},
        "chunk-atlas with the approximate Muon (muon_polynomial=chunk: one NS polynomial per chunk)",
    ),
    "chunk-atlas-id-approx": (
        "chunk",
        {**_ATLAS_ID, "muon_polynomial": "chunk"},
        "chunk-atlas-id with the approximate Muon (muon_polynomial=chunk)",
    ),
    "chunk-atlas-nockpt": (
        "chunk",
        _ATLAS,
        "chunk-atlas with checkpoint=False (memory_chunk_torch)",
    ),
    "chunk-atlas-id-nockpt": (
        "chunk",
        _ATLAS_ID,
        "chunk-atlas-id with checkpoint=False (memory_chunk_torch): every chunk's intermediates kept for the backward",
    ),
    "chunk-titans-ckpt": (
        "chunk",
        dict(memory="mlp", optimizer="momentum", feature_map="identity", bias="l2", window=1, chunk_size=CHUNK),
        "chunk-titans with checkpoint=True (memory_chunk_torch): each chunk recomputed in the backward",
    ),
    "naive-titans": (
        "naive",
        dict(memory="mlp", optimizer="momentum", feature_map="identity", bias="l2", window=1, chunk_size=CHUNK),
        "memory_naive (token loop, exact b=1) at the chunk-titans setting",
    ),
    "naive-atlas-id": (
        "naive",
        _ATLAS_ID,
        "memory_naive (token loop, exact b=1) at the chunk-atlas-id setting",
    ),
    "naive-atlas": (
        "naive",
        _ATLAS,
        "memory_naive (token loop, exact b=1) at the chunk-atlas setting (not in the default set: ~1 min/iter)",
    ),
    "titans-pt-b16": (
        "titans",
        dict(batch_size=CHUNK, strip=True),
        "titans-pytorch NeuralMemory, batch_size=16 (weights refreshed every chunk), projections removed",
    ),
    "titans-pt": (
        "titans",
        dict(batch_size=None, strip=True),
        "titans-pytorch NeuralMemory, default batch_size=None (no refresh in the sequence), projections removed",
    ),
    "titans-pt-b16-proj": (
        "titans",
        dict(batch_size=CHUNK, strip=False),
        "titans-pytorch NeuralMemory stock module (RMSNorm, q/k/v/out projections, retrieve gate), batch_size=16",
    ),
}
# ops that call memory_chunk_torch with an explicit `checkpoint` (memory_chunk decides by itself)
CHECKPOINT = {"chunk-atlas-id-nockpt": False, "chunk-atlas-nockpt": False, "chunk-titans-ckpt": True}
DEFAULT_OPS = [name for name in OPS if name != "naive-atlas" and name not in CHECKPOINT]


def base_op(op: str) -> str:
    """The OPS entry of an op name, without its `@LABEL` source suffix."""
    return op.split("@", 1)[0]


# ----------------------------------------------------------------------------------------------------------------
# memory accounting (Linux /proc)


def _proc_status_kb(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{key} not in /proc/self/status")


def _reset_peak_rss() -> None:
    """Reset VmHWM (and ru_maxrss) to the current RSS (Linux >= 4.0)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def _rss_mb() -> float:
    return _proc_status_kb("VmRSS") / 1024.0


def available_gb() -> float:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 2**20
    return float("inf")


def busy_seconds() -> float:
    """Non-idle CPU seconds of the whole machine since boot (/proc/stat, all cores)."""
    with open("/proc/stat") as f:
        parts = f.readline().split()[1:]
    ticks = [int(x) for x in parts[:8]]  # user nice system idle iowait irq softirq steal
    busy = sum(ticks) - ticks[3] - ticks[4]
    return busy / os.sysconf("SC_CLK_TCK")


# ----------------------------------------------------------------------------------------------------------------
# one cell (runs in a subprocess)


def build(op: str, T: int, seed: int = 0):
    """Returns (step, tensors): step() runs fwd+bwd once and returns the output; tensors get .grad reset."""
    import torch
    import torch.nn.functional as F

    kind, spec, _ = OPS[base_op(op)]
    g = torch.Generator().manual_seed(seed + 1)
    grad_out = torch.randn(B, T, H * D, generator=g)
    if kind in ("chunk", "naive"):
        from atlas_kernels.api import memory_chunk
        from atlas_kernels.config import MemoryConfig
        from atlas_kernels.ops.memory.naive import memory_naive
        from atlas_kernels.ops.memory.params import init_memory_params
        from atlas_kernels.testing import random_inputs

        cfg = MemoryConfig(**spec)
        fn = memory_chunk if kind == "chunk" else memory_naive
        if base_op(op) in CHECKPOINT:
            import functools

            from atlas_kernels.ops.memory.chunk import memory_chunk_torch

            fn = functools.partial(memory_chunk_torch, checkpoint=CHECKPOINT[base_op(op)])
        q, k, v, gates = random_inputs(
            B, T, H, D, dtype=torch.float32, seed=seed, requires_grad=True, gate_low=GATE_LOW, eta_scale=ETA_SCALE
        )
        gen = torch.Generator().manual_seed(seed + 2)
        params = {n: p.requires_grad_() for n, p in init_memory_params(cfg, H, D, D, generator=gen).items()}
        leaves = [q, k, v, *gates.values(), *params.values()]
        target = grad_out.view(B, T, H, D)

        def step():
            o, _ = fn(q, k, v, gates, params, cfg)
            (o * target).sum().backward()
            return o

        return step, leaves

    from titans_pytorch import NeuralMemory
    from torch import nn

    strip = spec["strip"]
    torch.manual_seed(seed)
    mem = NeuralMemory(
        dim=H * D,
        heads=H,
        dim_head=D,
        chunk_size=CHUNK,
        batch_size=spec["batch_size"],
        momentum=True,
        # the default max inner lr (1.0) diverges with batch_size=16 on these inputs (outputs inf / NaN from
        # T ~ 300-500); with 0.1 the outputs stay finite but the outer gradients overflow at T=4096 (1e27 at
        # T=2048); 0.03 keeps outputs and gradients finite at every length. Speed does not depend on it.
        default_step_transform_max_lr=TITANS_MAX_LR,
        pre_rmsnorm=not strip,
        qkv_receives_diff_views=strip,
        default_model_kwargs=dict(depth=2, expansion_factor=4.0),
    )
    if strip:
        # time the memory itself: q, k, v enter directly ([3, B, T, H*D], the l2-normalised per-head q, k of
        # our op), no output projection / retrieve gate. The per-token lr and per-chunk momentum / decay gates
        # still come from three Linear(128 -> 4) layers inside the module (our op takes gates as inputs).
        mem.to_queries, mem.to_keys, mem.to_values = nn.Identity(), nn.Identity(), nn.Identity()
        mem.combine_heads, mem.retrieve_gate = nn.Identity(), None
        gq = torch.Generator().manual_seed(seed)
        qkv = torch.randn(3, B, T, H, D, generator=gq)
        qkv[:2] = F.normalize(qkv[:2], dim=-1)
        x = qkv.reshape(3, B, T, H * D).requires_grad_()
    else:
        x = torch.randn(B, T, H * D, generator=torch.Generator().manual_seed(seed)).requires_grad_()
    leaves = [x, *mem.parameters()]

    def step():
        o, _ = mem(x)
        (o * grad_out).sum().backward()
        return o

    return step, leaves


def _rss_watchdog(base_mb: float, limit_mb: float, op: str, T: int) -> None:
    """Abort this cell (exit 3) when its RSS grows above limit_mb: a shared machine must not hit the OOM killer."""
    import threading

    def watch():
        while True:
            if _rss_mb() - base_mb > limit_mb:
                msg = f"aborted: RSS grew above the {limit_mb / 1024:.1f} GB cell limit"
                print(json.dumps(dict(op=op, T=T, error=msg)), flush=True)
                os._exit(3)
            time.sleep(0.05)

    threading.Thread(target=watch, daemon=True).start()


def run_cell(op: str, T: int, repeats: int, threads: int, cell_budget: float, mem_limit_gb: float = 1e9) -> dict:
    import torch
    import torch._dynamo  # noqa: F401  torch.utils.checkpoint imports it on first use (~140 MB RSS): not the op's

    _rss_watchdog(_rss_mb(), 1024 * min(mem_limit_gb, 0.8 * available_gb()), op, T)
    torch.set_num_threads(threads)
    tiny, tiny_leaves = build(op, TINY_T, seed=1)  # lazy init of kernels / thread pools, not measured
    tiny()
    del tiny, tiny_leaves
    step, leaves = build(op, T)
    gc.collect()
    _reset_peak_rss()
    base = _rss_mb()
    times, peaks, finite = [], [], True
    n_target = repeats + 1
    i = 0
    while i < n_target:
        for t in leaves:
            t.grad = None
        gc.collect()
        _reset_peak_rss()
        t0 = time.perf_counter()
        o = step()
        dt = time.perf_counter() - t0
        finite = finite and bool(torch.isfinite(o).all())
        finite = finite and all(bool(torch.isfinite(t.grad).all()) for t in leaves if t.grad is not None)
        del o
        peaks.append(_peak_rss_mb() - base)
        times.append(dt)
        if i == 0:  # adapt the number of timed repeats to the cell budget (at least one)
            n_target = 1 + max(1, min(repeats, int((cell_budget - dt) // max(dt, 1e-9))))
        i += 1
    return dict(
        op=op,
        T=T,
        warmup_s=times[0],
        times_s=times[1:],
        peak_mb=peaks[0],
        peak_mb_all=max(peaks),
        base_rss_mb=base,
        finite=finite,
        threads=torch.get_num_threads(),
    )


def profile(spec: str, threads: int, top: int = 15) -> None:
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    op, T = spec.rsplit(":", 1)
    torch.set_num_threads(threads)
    step, leaves = build(op, int(T))
    step()
    for t in leaves:
        t.grad = None
    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=top))
