"""How many aten operations the torch chunk op dispatches per chunk, forward and backward, for every memory of the
model presets at the 340M shape: the count that makes the op launch-bound on a GPU (each non-view op is at least
one kernel launch there).

Counts, not timings, and deterministic: a `TorchDispatchMode` records every aten call that reaches the backend (after
autograd, with composite ops such as `matmul` and `einsum` already decomposed into `bmm`, `mm`, views and copies)
while `memory_chunk_torch` runs, then while `torch.autograd.grad` takes the gradient of every input (q, k, v, the
gates and the memory parameters) from a random output cotangent. The calls are run twice, at 2 and at 4 chunks;
the per-chunk figures are the difference divided by 2, the steady state of a long sequence (what runs once per call,
input validation, layout changes, the final concatenation, drops out, and so does the first chunk's backward
being shorter: the zero initial momentum and halo take no gradient). The last column is the whole 4-chunk call.
The op runs as its per-chunk loop with every chunk building its own terms (`LOOP`: `batch_linear=False`,
`batch_terms=False`), the baseline that `linear_scan.py` and `chunk_terms.py` measure the batched paths against.

Columns: "ops" every aten call; "kernels" the calls that are not views (on a GPU each launches at least one
kernel); "GEMM" mm / bmm / addmm / baddbmm; "pointwise" the calls torch tags pointwise (what a fusing compiler
merges); "syncs" host reads of a tensor's value (`.item()`, `nonzero`, ...), each a device synchronisation.

Shape: the 340M size of atlas_model (16 memory heads of dim 64, MLP expansion 4, chunk b = 16, Omega window c = 8
for the "omega" presets), batch 1, float32, on this machine's CPU. The device picks some paths: on a CPU the torch
reference of the degree-2 features runs (on a GPU one Triton kernel), and ns_eval="auto" of the Atlas presets
resolves to the eigenvalue polynomial on a CPU; the table takes ns_eval="matmul", what "auto" resolves to on a GPU,
and ns_form="lowrank", what "auto" resolves to at the paper sizes (also at the small shape of `--compiled`).

    .venv/bin/python benchmarks/op_counts.py --out benchmarks/op_counts.md
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import platform
import shlex
import sys
from collections import Counter
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parents[1]
for pkg in ("atlas-kernels", "atlas-model"):
    sys.path.insert(0, str(ROOT / "packages" / pkg / "src"))

from marked_block import write_block  # noqa: E402

from atlas_kernels import MemoryConfig, init_memory_params  # noqa: E402
from atlas_kernels.ops.memory.chunk import memory_chunk_torch  # noqa: E402
from atlas_kernels.testing import random_inputs  # noqa: E402

# the baseline is the per-chunk loop with every chunk building its own terms: the batched paths (linear_scan.md,
# chunk_terms.md) are measured against it by their own scripts
LOOP = {"batch_linear": False, "batch_terms": False}
GEMM = {"mm", "bmm", "addmm", "baddbmm", "addbmm", "dot", "mv"}
# Calls that read a tensor's value on the host (a device synchronisation on a GPU).
SYNC = {"_local_scalar_dense", "nonzero", "is_nonzero", "equal", "allclose"}
# Not views by schema, but metadata-only on every backend.
METADATA = {"_unsafe_view", "lift_fresh", "_reshape_alias"}


class OpCounter(TorchDispatchMode):
    """Counts every aten call dispatched while active, by overload packet name."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[str] = Counter()
        self.kinds: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        self.calls[name] += 1
        self.kinds["ops"] += 1
        if not (func.is_view or name in METADATA):
            self.kinds["kernels"] += 1
            if name in GEMM:
                self.kinds["GEMM"] += 1
            if torch.Tag.pointwise in func.tags:
                self.kinds["pointwise"] += 1
        if name in SYNC:
            self.kinds["syncs"] += 1
        return func(*args, **(kwargs or {}))


KINDS = ("ops", "kernels", "GEMM", "pointwise", "syncs")


Memories = dict[str, tuple[list[str], MemoryConfig, int, int]]


def preset_memories(size: str = "340M", muon_batch: str = "per_weight") -> Memories:
    """{label: (presets, MemoryConfig, memory heads, head dim)} of every distinct memory of the model presets, the
    Muon memories with `muon_batch`."""
    from atlas_model import PRESETS, AtlasConfig
    from atlas_model.presets import PRESET_TABLE

    out: dict[MemoryConfig, tuple[list[str], int, int]] = {}
    for name in PRESETS:
        if PRESET_TABLE[name].memory is None:
            continue
        config = AtlasConfig.from_preset(name, size)
        cfg = config.memory_config()
        if cfg.ns_eval == "auto":  # what "auto" resolves to on a GPU (module docstring)
            cfg = dataclasses.replace(cfg, ns_eval="matmul")
        if cfg.ns_form == "auto":  # what "auto" resolves to at the paper sizes, on any device (module docstring)
            cfg = dataclasses.replace(cfg, ns_form="lowrank")
        if cfg.optimizer == "muon":
            cfg = dataclasses.replace(cfg, muon_batch=muon_batch)
        out.setdefault(cfg, ([], config.memory_heads, config.memory_head_dim))[0].append(name)
    return {label(cfg): (names, cfg, H, d) for cfg, (names, H, d) in out.items()}


def label(cfg: MemoryConfig) -> str:
    parts = [cfg.memory, cfg.optimizer, cfg.feature_map, cfg.bias, f"c={cfg.window}"]
    if cfg.exact_delta:
        parts.append("exact delta")
    if cfg.decay_first:
        parts.append("decay first")
    if cfg.muon_batch != "per_weight":
        parts.append(cfg.muon_batch)
    return " ".join(parts)


def op_inputs(cfg: MemoryConfig, H: int, d: int, T: int, B: int = 1, device: str = "cpu", dtype=torch.float32):
    """(q, k, v, gates, params, leaves) of the chunk op over T tokens, every one a leaf that requires grad."""
    q, k, v, gates = random_inputs(B, T, H, d, dtype=dtype)
    if not cfg.uses_momentum:
        del gates["theta"]
    params = init_memory_params(cfg, H, d, d, dtype=dtype)
    leaves = [t.to(device).requires_grad_(True) for t in (q, k, v, *gates.values(), *params.values())]
    gates = dict(zip(gates, leaves[3 : 3 + len(gates)]))
    params = dict(zip(params, leaves[3 + len(gates) :]))
    return *leaves[:3], gates, params, leaves


def count_call(
    cfg: MemoryConfig, H: int, d: int, T: int, B: int = 1, device: str = "cpu", dtype=torch.float32, **op_kwargs
):
    """(forward counter, backward counter) of one call of the chunk op over T tokens, gradients of every input;
    `op_kwargs` go to `memory_chunk_torch` (batch_linear=False: the linear memories' per-chunk loop)."""
    q, k, v, gates, params, leaves = op_inputs(cfg, H, d, T, B, device, dtype)
    with OpCounter() as fwd:
        o, _ = memory_chunk_torch(q, k, v, gates, params, cfg, **op_kwargs)
    cotangent = torch.randn(o.shape, generator=torch.Generator().manual_seed(1), dtype=o.dtype).to(device)
    with OpCounter() as bwd:
        torch.autograd.grad(o, leaves, cotangent, allow_unused=True)
    return fwd, bwd


def per_chunk(cfg: MemoryConfig, H: int, d: int, chunks: tuple[int, int] = (2, 4), **kw) -> dict[str, dict]:
    """{"fwd" | "bwd": {kind: per chunk, kind + " total": the call over chunks[1] chunks}, "top fwd" | "top bwd":
    per-chunk calls by op} from calls over chunks[0] and chunks[1] chunks."""
    count_call(cfg, H, d, cfg.chunk_size, **kw)  # warm-up: the first call builds cached constants (monomial tables)
    lo, hi = (count_call(cfg, H, d, n * cfg.chunk_size, **kw) for n in chunks)
    span = chunks[1] - chunks[0]
    out: dict[str, dict] = {}
    for i, part in enumerate(("fwd", "bwd")):
        a, b = lo[i], hi[i]
        row = {}
        for kind in KINDS:
            row[kind] = (b.kinds[kind] - a.kinds[kind]) / span
            row[kind + " total"] = b.kinds[kind]
        out[part] = row
        calls = Counter({n: (b.calls[n] - a.calls[n]) / span for n in b.calls})
        out["top " + part] = dict(calls.most_common())
    return out


def compiled_kernels(cfg: MemoryConfig, H: int, d: int, chunks: int = 3) -> dict[str, int]:
    """Kernels of one chunk compiled by `memory_chunk_torch(compiled=True)` (inductor on this CPU): per direction,
    fused kernels + extern calls (the GEMMs) + aten fallbacks in the generated code, the most over the compiled
    variants (the first chunk's and the later chunks'). Compiles into a fresh inductor cache directory, whose
    generated modules it reads."""
    import glob
    import re
    import tempfile

    import torch._dynamo

    with tempfile.TemporaryDirectory() as cache:
        previous = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
        try:
            torch._dynamo.reset()
            q, k, v, gates = random_inputs(1, chunks * cfg.chunk_size, H, d, dtype=torch.float32)
            if not cfg.uses_momentum:
                del gates["theta"]
            params = init_memory_params(cfg, H, d, d)
            leaves = [t.requires_grad_(True) for t in (q, k, v, *gates.values(), *params.values())]
            o, _ = memory_chunk_torch(q, k, v, gates, params, cfg, compiled=True)
            torch.autograd.grad(o, leaves, torch.ones_like(o), allow_unused=True)
            out = {"fwd": 0, "bwd": 0}
            for path in glob.glob(f"{cache}/*/*.py"):
                with open(path) as f:
                    src = f.read()
                if "def call(" not in src:
                    continue
                body = src[src.index("def call(") :]
                n = sum(
                    len(re.findall(pattern, body, re.M))
                    for pattern in (r"^\s+cpp_fused_\w+\(", r"extern_kernels\.\w+\(", r"torch\.ops\.aten\.\w+\.\w+\(")
                )
                part = "bwd" if "tangents_" in body else "fwd"
                out[part] = max(out[part], n)
            return out
        finally:
            torch._dynamo.reset()
            if previous is None:
                os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
            else:
                os.environ["TORCHINDUCTOR_CACHE_DIR"] = previous


def compiled_table(results, compiled: dict[str, dict[str, int]], baseline: dict[str, dict] | None = None) -> str:
    """`baseline` ({label: per_chunk counts} of the same memories with muon_batch="per_weight"): one more column,
    the compiled kernels against that eager baseline."""
    cols = ["memory", "presets", "eager fwd kernels", "compiled fwd", "eager bwd kernels", "compiled bwd"]
    cols += ["fewer (fwd+bwd)"] + (["fewer than eager per-weight"] if baseline else [])
    lines = ["| " + " | ".join(cols) + " |", "|---|---|" + "---:|" * (len(cols) - 2)]
    for lab, c in compiled.items():
        names, _, r = results[lab]
        f, b = r["fwd"]["kernels"], r["bwd"]["kernels"]
        ratio = (f + b) / (c["fwd"] + c["bwd"])
        row = f"| {lab} | {', '.join(names)} | {_n(f)} | {c['fwd']} | {_n(b)} | {c['bwd']} | {ratio:.1f}x |"
        if baseline:
            base = baseline[lab]["fwd"]["kernels"] + baseline[lab]["bwd"]["kernels"]
            row += f" {base / (c['fwd'] + c['bwd']):.1f}x ({_n(base)}) |"
        lines.append(row)
    return "\n".join(lines)


def _n(x: float) -> str:
    return f"{x:.0f}" if float(x).is_integer() else f"{x:.1f}"


def table(results: dict[str, tuple[list[str], MemoryConfig, dict]]) -> str:
    lines = [
        "| memory (optimizer, features, bias, window) | presets | fwd ops | fwd kernels | fwd GEMM | fwd pointwise "
        "| bwd ops | bwd kernels | bwd GEMM | bwd pointwise | kernels / token (fwd+bwd) | syncs / chunk | "
        "kernels of a 4-chunk call (fwd, bwd) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for lab, (names, cfg, r) in results.items():
        f, b = r["fwd"], r["bwd"]
        per_token = (f["kernels"] + b["kernels"]) / cfg.chunk_size
        lines.append(
            f"| {lab} | {', '.join(names)} | {_n(f['ops'])} | {_n(f['kernels'])} | {_n(f['GEMM'])} | "
            f"{_n(f['pointwise'])} | {_n(b['ops'])} | {_n(b['kernels'])} | {_n(b['GEMM'])} | {_n(b['pointwise'])} | "
            f"{per_token:.1f} | {_n(f['syncs'] + b['syncs'])} | {_n(f['kernels total'])}, {_n(b['kernels total'])} |"
        )
    return "\n".join(lines)


def top_ops(results, n: int = 8) -> str:
    """The most frequent non-view calls per chunk of each memory, forward and backward."""
    lines = ["| memory | forward, per chunk | backward, per chunk |", "|---|---|---|"]
    for lab, (_, _, r) in results.items():
        cells = []
        for part in ("top fwd", "top bwd"):
            items = [(k, c) for k, c in r[part].items() if c and not _is_view(k)][:n]
            cells.append(", ".join(f"{k} {_n(c)}" for k, c in items))
        lines.append(f"| {lab} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def _is_view(name: str) -> bool:
    if name in METADATA:
        return True
    packet = getattr(torch.ops.aten, name)
    return any(getattr(packet, o).is_view for o in packet.overloads())


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or "unknown model"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", default="340M", help="atlas_model size (default 340M)")
    p.add_argument("--only", nargs="*", help="labels (substrings) of the memories to count")
    p.add_argument("--out", help="write the tables into this markdown file (the block between markers)")
    p.add_argument("--block", default="op-counts", help="name of the marked block --out writes (default op-counts)")
    p.add_argument(
        "--compiled",
        nargs="*",
        help="labels (substrings) of the memories whose chunk is also compiled (inductor, CPU) and counted at a small "
        "shape (2 heads of dim 8, the size's b and c): generated kernels per chunk beside the eager kernels there",
    )
    p.add_argument(
        "--muon-batch",
        choices=("per_weight", "padded"),
        default="per_weight",
        help="MemoryConfig.muon_batch of the Muon memories (default per_weight, the presets'); with --compiled and "
        "padded, the compiled table also compares with the per-weight eager kernels",
    )
    args = p.parse_args(argv)
    torch.manual_seed(0)
    results = {}
    for lab, (names, cfg, H, d) in preset_memories(args.size, args.muon_batch).items():
        if args.only and not any(s in lab for s in args.only):
            continue
        results[lab] = (names, cfg, per_chunk(cfg, H, d, **LOOP))
        print(lab, {k: _n(v) for k, v in results[lab][2]["fwd"].items()}, flush=True)
    body = table(results) + "\n\nThe most frequent kernels per chunk:\n\n" + top_ops(results) if results else ""
    if args.compiled:
        small = {}
        for lab, (names, cfg, _, _) in preset_memories(args.size, args.muon_batch).items():
            if any(s in lab for s in args.compiled):
                small[lab] = (names, cfg, per_chunk(cfg, 2, 8, **LOOP))
        compiled = {lab: compiled_kernels(cfg, 2, 8) for lab, (_, cfg, _) in small.items()}
        baseline = None
        if args.muon_batch != "per_weight":
            baseline = {
                lab: per_chunk(dataclasses.replace(cfg, muon_batch="per_weight"), 2, 8, **LOOP)
                for lab, (_, cfg, _) in small.items()
            }
        body += (
            ("\n\n" if body else "")
            + "Compiled (`memory_chunk_torch(compiled=True)`, inductor on this CPU) against eager, both at 2 heads "
            "of dim 8 (kernels: fused + extern GEMM + aten fallback calls in the generated code of one chunk):\n\n"
            + compiled_table(small, compiled, baseline)
        )
    print(body)
    if args.out:
        when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
        cmd = f"`python {shlex.join(sys.argv)}`"
        machine = f"{platform.machine()} CPU ({_cpu_model()}, {os.cpu_count()} cores), torch {torch.__version__}"
        header = f"Command: {cmd}. Machine: {machine}. Date: {when}. Size {args.size}, batch 1, float32."
        write_block(args.out, args.block, f"{header}\n\n{body}", "benchmarks/op_counts.py")


if __name__ == "__main__":
    main()
