"""CPU: what Muon's chunk checkpointing costs where memory is no concern, the measurement behind
`MemoryConfig.checkpoint_min_mib`.

One training step (forward, backward) of the claims study's MQAR models (`config/study/claims.yaml`, protocol
`mqar_cpu`: width 64, 2 layers, memory head dim 8, expansion 2, vocabulary 48, batch 32, T = 40, float32 update,
factored Muon) with the chunk op's checkpointing forced on and forced off, interleaved, 1 thread. Each row also
checks that both give bit-for-bit the same parameter gradients, and gives the size the default rule compares with
its threshold (T x the bytes of one memory state).

    .venv/bin/python benchmarks/checkpoint_default.py --out benchmarks/checkpoint_default.md
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from datetime import UTC, datetime

import torch
from marked_block import write_block

import atlas_kernels.ops.memory.chunk as chunk_op
from atlas_experiments.evaluation.synthetic_models import ModelChoice, build_lm, model_config
from atlas_kernels.ops.memory.checkpoint import segment_state_bytes

ARMS = {  # the study's arms of these names, as overrides of the atlas preset
    "atlas": {"muon_float64": False, "ns_form": "lowrank"},
    "atlas_identity": {"feature_map": "identity", "muon_float64": False, "ns_form": "lowrank"},
    "atlas_c1": {"window": 1, "muon_float64": False, "ns_form": "lowrank"},
}


def _model(memory: dict, checkpoint: bool) -> torch.nn.Module:
    # checkpoint_min_mib 0: every segment checkpoints; 2**40 MiB: none does. Same init seed: the same parameters.
    memory = {**memory, "checkpoint_min_mib": 0 if checkpoint else 2**40}
    choice = ModelChoice("atlas", "atlas", overrides={"memory": memory})
    cfg = model_config(choice, vocab_size=48, width=64, layers=2, memory_head_dim=8, memory_expansion=2)
    return build_lm(cfg, 0, torch.device("cpu"))


def _step(model: torch.nn.Module, ids: torch.Tensor) -> tuple[float, list[torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    t0 = time.perf_counter()
    model(input_ids=ids).logits.float().logsumexp(-1).mean().backward()
    seconds = time.perf_counter() - t0
    return seconds, [p.grad.clone() for p in model.parameters() if p.grad is not None]


def _state_mib(model: torch.nn.Module, ids: torch.Tensor) -> float:
    """The largest T x state bytes the default rule saw (a spy around it, put back afterwards)."""
    sizes, rule = [], chunk_op.default_checkpoint

    def spy(x, params, state, cfg):
        sizes.append(segment_state_bytes(x, state))
        return rule(x, params, state, cfg)

    chunk_op.default_checkpoint = spy
    try:
        model(input_ids=ids).logits.sum().backward()
    finally:
        chunk_op.default_checkpoint = rule
    return max(sizes) / 2**20


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5, help="interleaved on/off pairs per arm (default 5)")
    ap.add_argument("--out", help="markdown file to write the table into (marked block)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    rows = []
    for arm, memory in ARMS.items():
        models = {on: _model(memory, on) for on in (True, False)}
        ids = torch.randint(0, 48, (32, 40), generator=torch.Generator().manual_seed(0))
        mib = _state_mib(models[False], ids)
        for on in (True, False):  # warm-up
            _step(models[on], ids)
        times = {True: [], False: []}
        grads = {}
        for _ in range(args.repeats):
            for on in (True, False):
                seconds, grads[on] = _step(models[on], ids)
                times[on].append(seconds)
        same = all(torch.equal(a, b) for a, b in zip(grads[True], grads[False]))
        on, off = statistics.median(times[True]), statistics.median(times[False])
        rows.append(f"| {arm} | {mib:.0f} | {on:.2f} | {off:.2f} | {on / off:.2f}x | {'yes' if same else 'NO'} |")
        print(rows[-1], flush=True)
    head = (
        "| arm | T x state bytes (MiB) | step, checkpointed (s) | step, not (s) | speed-up | same gradients |\n"
        "|---|---:|---:|---:|---:|---|"
    )
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    cmd = (
        f"Command: `.venv/bin/python benchmarks/checkpoint_default.py --repeats {args.repeats}`. {when}, "
        f"{platform.machine()} {platform.processor() or ''}, torch {torch.__version__}, 1 thread; medians of "
        f"{args.repeats} interleaved steps."
    )
    body = head + "\n" + "\n".join(rows)
    print(body)
    if args.out:
        write_block(args.out, "checkpoint-default", f"{cmd}\n\n{body}", "benchmarks/checkpoint_default.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
