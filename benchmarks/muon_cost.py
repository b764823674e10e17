"""Exact multiply-add and memory counts of one Atlas memory head, per token: Muon materialised vs factored (per weight,
and with the weights' Gram-space products stacked, `muon_batch="padded"`), the approximate Muon with one
Newton-Schulz polynomial per chunk, and the GD twin.

Counts, not timings: the torch chunk op runs on the `meta` device (shapes only, no data) under
`torch.utils.flop_counter.FlopCounterMode`, which counts every matmul / bmm / einsum of the forward and of
autograd's backward; a saved-tensor hook adds up what autograd keeps for the backward. One batch element, one
head, T = 4 chunks, divided by T (the first chunk has no halo, so the per-token figures are a few percent under
the steady state). The "chunk" memory column is what chunk checkpointing keeps alive while one chunk is recomputed.

Shapes (memory head dim d, MLP expansion e, Omega window c, chunk b; poly features of degree 2, n = C(d + 2, 2)):
the embedded default's CPU model, the CPU benchmark (`memory_op.py`), and the paper's 340M / 760M presets (both
use 64-dim memory heads, so their per-head counts are equal; 340M has 16 heads x 24 layers, 760M 24 x 24).

    .venv/bin/python benchmarks/muon_cost.py --out benchmarks/muon_cost.md
"""

from __future__ import annotations

import argparse
import sys

import torch
from marked_block import write_block
from torch.utils.flop_counter import FlopCounterMode

from atlas_kernels import MemoryConfig, init_memory_params
from atlas_kernels.ops.memory.chunk import memory_chunk_torch
from atlas_kernels.testing import random_inputs

SHAPES = {  # name -> (d, expansion, window, chunk)
    "embedded (d 8, e 2)": (8, 2, 4, 16),
    "CPU benchmark (d 32, e 4)": (32, 4, 4, 16),
    "340M / 760M (d 64, e 4)": (64, 4, 8, 16),
}
FORMS = {
    "Muon, materialised": dict(optimizer="muon", ns_form="materialise"),
    "Muon, factored (lowrank)": dict(optimizer="muon", ns_form="lowrank"),
    "Muon, factored, weights stacked (padded)": dict(optimizer="muon", ns_form="lowrank", muon_batch="padded"),
    "approx.: one polynomial per chunk": dict(optimizer="muon", muon_polynomial="chunk"),
    "GD twin": dict(optimizer="gd"),
}
CHUNKS = 4


def count(d: int, expansion: int, window: int, chunk: int, form: dict) -> dict[str, float]:
    cfg = MemoryConfig(
        memory="mlp",
        expansion=expansion,
        feature_map="poly",
        poly_degree=2,
        bias="l2",
        window=window,
        chunk_size=chunk,
        **form,
    )
    T = CHUNKS * chunk
    q, k, v, gates = random_inputs(1, T, 1, d, dtype=torch.float32)
    params = init_memory_params(cfg, 1, d, d, dtype=torch.float32)
    leaves = [t.to("meta").requires_grad_(True) for t in (q, k, v, *gates.values(), *params.values())]
    q, k, v = leaves[:3]
    gates = dict(zip(gates, leaves[3 : 3 + len(gates)]))
    params = dict(zip(params, leaves[3 + len(gates) :]))
    saved = [0]

    def pack(t):
        saved[0] += t.numel()
        return t

    with FlopCounterMode(display=False) as fwd, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        o, _ = memory_chunk_torch(q, k, v, gates, params, cfg, checkpoint=False)
    with FlopCounterMode(display=False) as both:
        torch.autograd.grad(o.sum(), leaves, allow_unused=True)
    fwd_macs = fwd.get_total_flops() / 2
    return {
        "fwd MACs / token": fwd_macs / T,
        "fwd+bwd MACs / token": (fwd_macs + both.get_total_flops() / 2) / T,
        "saved floats / token": saved[0] / T,
        "saved floats / chunk": saved[0] / CHUNKS,
    }


def _fmt(x: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x:.3g}"


def table() -> str:
    lines = [
        "| shape | form | fwd MACs / token | fwd+bwd MACs / token | saved floats / token | vs materialised "
        "(fwd+bwd, saved) |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for shape, dims in SHAPES.items():
        rows = {form: count(*dims, spec) for form, spec in FORMS.items()}
        ref = rows["Muon, materialised"]
        for form, r in rows.items():
            ratio = (
                f"{ref['fwd+bwd MACs / token'] / r['fwd+bwd MACs / token']:.1f}x, "
                f"{ref['saved floats / token'] / r['saved floats / token']:.1f}x"
            )
            lines.append(
                f"| {shape} | {form} | {_fmt(r['fwd MACs / token'])} | {_fmt(r['fwd+bwd MACs / token'])} | "
                f"{_fmt(r['saved floats / token'])} | {ratio} |"
            )
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="write the table into this markdown file (replacing the block between markers)")
    args = p.parse_args(argv)
    body = table()
    print(body)
    if args.out:
        cmd = f"`python {' '.join(sys.argv)}` (torch {torch.__version__})"
        write_block(args.out, "muon-cost", f"{cmd}\n\n{body}", "benchmarks/muon_cost.py")


if __name__ == "__main__":
    main()
