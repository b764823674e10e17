"""Muon's update precision at the paper's memory shape: how far float32 inputs land from the float64 op (outputs,
final state, every input gradient), with the factored update in float64 (`muon_float64`, the default) or in float32,
beside the materialising path in float32, and a diagnostic: the float64 update with only its polynomials in float32.

Why: on a GPU the float64 update is what bounds exact Atlas at the paper sizes (docs/costs.md, the "fp64" column;
float64 runs at about a tenth of the bf16 rate), while the precision case for it (docs/muon.md, "Precision of the
factored path") was measured at head dims 4 and 16 only. Precision is a property of the arithmetic, not of the
device: a CPU's IEEE float32 and float64 products measure what a GPU's give (not TF32, not bf16 autocast).

One memory head (B = 1, H = 1) of the Atlas memory of the 340M / 760M presets (head dim 64, expansion 4, degree-2
features 2,145 wide, window 8, chunk 16, five Newton-Schulz steps), T = 48 and 256, factored path with
matmul polynomials (what a GPU runs); inputs and parameters drawn in float64 and cast, the loss a fixed random
weighting of the outputs and final state (`atlas_kernels.testing.random_loss_grads`). The reference is the float64
op. Relative errors `||x - x_ref|| / ||x_ref||` per quantity; "worst" is the largest over all of them.

    .venv/bin/python benchmarks/muon_precision.py --out benchmarks/muon_precision.md
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import itertools
import platform
import sys
import time

import torch
from marked_block import write_block

from atlas_kernels import init_memory_params, memory_chunk
from atlas_kernels.testing import random_inputs, random_loss_grads, result_errors

LENGTHS, H, D = (48, 256), 1, 64  # three and sixteen chunks
# Not an option of the op: the float64 update with only its r x r polynomials evaluated in float32, to tell where the
# float32 update loses its precision (forming the Gram matrices, or the Newton-Schulz polynomial on them)
DIAGNOSTIC = "factored, float64 Gram matrices, float32 polynomial (diagnostic)"
# (gate_low, eta scale): the CPU benchmark's slowly forgetting gates and a faster-forgetting, larger-step regime
REGIMES = {"gates [0.9, 1), eta ~0.02": (0.9, 0.02), "gates [0.5, 1), eta ~0.1": (0.5, 0.1)}
PATHS = {
    "factored, float64 update (default)": dict(ns_form="lowrank", muon_float64=True),
    "factored, float32 update": dict(ns_form="lowrank", muon_float64=False),
    DIAGNOSTIC: dict(ns_form="lowrank", muon_float64=True),
    "materialised": dict(ns_form="materialise"),
}


def paper_memory():
    """The Atlas memory config of the 340M preset, factored path with matmul polynomials (a GPU's choice)."""
    from atlas_model import AtlasConfig

    config = AtlasConfig.from_preset("atlas", "340M")
    assert config.memory_head_dim == D, config.memory_head_dim
    return dataclasses.replace(config.memory_config(), ns_form="lowrank", ns_eval="matmul")


@contextlib.contextmanager
def polynomial_in_float32():
    """The factored path's polynomial evaluation (`muon_lowrank.ns_polynomial`) run in float32 on its float64 Gram
    matrices, its result cast back: everything else of the float64 update as it is."""
    from atlas_kernels.ops.memory import muon_lowrank

    evaluate = muon_lowrank.ns_polynomial
    muon_lowrank.ns_polynomial = lambda gram, *a: evaluate(gram.float(), *a).to(gram.dtype)
    try:
        yield
    finally:
        muon_lowrank.ns_polynomial = evaluate


def run(cfg, T: int, dtype, gate_low: float, eta: float, seed: int = 0):
    q, k, v, gates = random_inputs(1, T, H, D, seed=seed, gate_low=gate_low, eta_scale=eta)
    params = init_memory_params(cfg, H, D, D, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    leaves = {"q": q, "k": k, "v": v, **{f"gate.{n}": g for n, g in gates.items()}, **params}
    leaves = {n: t.to(dtype).requires_grad_(True) for n, t in leaves.items()}
    gates = {n[5:]: t for n, t in leaves.items() if n.startswith("gate.")}
    params = {n: leaves[n] for n in params}
    o, state = memory_chunk(leaves["q"], leaves["k"], leaves["v"], gates, params, cfg)
    return random_loss_grads(o, state, leaves)


def table(log=print) -> str:
    cfg = paper_memory()
    lines = [
        "| T | regime | path (float32 inputs) | worst | outputs | final state (worst) | input gradients (worst) | s |",
        "|---:|---|---|---:|---:|---:|---:|---:|",
    ]
    for T, (regime, (gate_low, eta)) in itertools.product(LENGTHS, REGIMES.items()):
        ref = run(cfg, T, torch.float64, gate_low, eta)
        for path, change in PATHS.items():
            start = time.perf_counter()
            with polynomial_in_float32() if path == DIAGNOSTIC else contextlib.nullcontext():
                errs = result_errors(ref, run(dataclasses.replace(cfg, **change), T, torch.float32, gate_low, eta))
            seconds = time.perf_counter() - start
            state = max(e for n, e in errs.items() if n.startswith("state."))
            grads = max(e for n, e in errs.items() if n.startswith("grad."))
            row = (
                f"| {T} | {regime} | {path} | {max(errs.values()):.1e} | {errs['o']:.1e} | {state:.1e} | {grads:.1e} "
                f"| {seconds:.0f} |"
            )
            log(row)
            lines.append(row)
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="write the table into this markdown file (the block between markers)")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    body = table()
    if args.out:
        when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
        header = (
            f"Command: `python {' '.join(sys.argv)}`. Machine: {platform.machine()} CPU, one thread, torch "
            f"{torch.__version__}. Date: {when}. Head dim {D}, one head."
        )
        write_block(args.out, "muon-precision", f"{header}\n\n{body}", "benchmarks/muon_precision.py")


if __name__ == "__main__":
    main()
