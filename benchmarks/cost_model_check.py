"""The cost model (docs/costs.md) against measured CPU time: does a model's counted FLOPs (and unfused bytes)
predict what a training step costs here?

For each preset at the `tiny` size (width 64, 2 blocks, memory head dim 16, chunk 4, Omega window 4), one forward
and backward of a batch of B x T random tokens (loss on every position, one torch thread), timed over `--rounds`
rounds after a warm-up, median taken; the same model's step counted by `atlas_experiments.cost.count_step` on this
CPU (real tensors, so the Muon form is the one the timed run takes). The machine's float32 GEMM rate is measured in
the same run (a 1024 x 1024 x 1024 matmul), and the table gives the achieved rate of each model and the ratio of
its measured time to the compute-bound prediction at that rate: a ratio near 1 means FLOPs explain the time, a
larger one means small matmuls and pointwise calls (what the GPU projection calls launch overhead) dominate.

    python benchmarks/cost_model_check.py --out benchmarks/cost_model_check.md
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from pathlib import Path

PRESETS = ("transformer_pp", "gated_deltanet", "titans_lmm", "omeganet", "atlas")


def _gemm_rate(n: int = 1024, reps: int = 5) -> float:
    import torch

    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - t)
    return 2 * n**3 / min(times)


def _step_time(preset: str, batch: int, seq_len: int, rounds: int) -> float:
    import torch
    from transformers import AutoModelForCausalLM

    from atlas_model import AtlasConfig

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AtlasConfig.from_preset(preset, "tiny"))
    ids = torch.randint(0, model.config.vocab_size, (batch, seq_len))

    def step() -> None:
        model(input_ids=ids, labels=ids).loss.backward()
        model.zero_grad(set_to_none=True)

    step()
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main(argv=None) -> None:
    root = Path(__file__).resolve().parents[1]
    for pkg in ("atlas-kernels", "atlas-model", "atlas-experiments"):
        sys.path.insert(0, str(root / "packages" / pkg / "src"))
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import torch
    from marked_block import write_block

    from atlas_experiments.cost import count_step
    from atlas_model import AtlasConfig

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--presets", nargs="+", default=list(PRESETS))
    p.add_argument("--out", help="markdown file to write the table into (marked block)")
    args = p.parse_args(argv)
    torch.set_num_threads(1)

    rate = _gemm_rate()
    rows = []
    for preset in args.presets:
        config = AtlasConfig.from_preset(preset, "tiny")
        count = count_step(config, args.seq_len, batch=args.batch, device="cpu")
        total = count.rest
        total.add(count.layer.scaled(config.num_hidden_layers))
        seconds = _step_time(preset, args.batch, args.seq_len, args.rounds)
        flops, tokens = total.flops, args.batch * args.seq_len
        megabytes = total.bytes_unfused / tokens / 1e6
        rows.append(
            f"| {preset} | {flops / tokens / 1e6:.3g} | {total.gemm_share:.1%} | {megabytes:.3g} "
            f"| {total.kernels / tokens:.3g} | {seconds * 1e3:.1f} | {flops / seconds / 1e9:.2f} "
            f"| {seconds / (flops / rate):.1f} |"
        )
        print(rows[-1], flush=True)
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    cmd = "python benchmarks/cost_model_check.py " + " ".join(argv if argv is not None else sys.argv[1:])
    block = (
        f"Command: `{cmd.strip()}`. Machine: {platform.machine()} CPU ({os.cpu_count()} cores), one torch thread, "
        f"torch {torch.__version__}. Date: {now}. Size tiny, B {args.batch}, T {args.seq_len}, float32. Measured "
        f"float32 GEMM rate (1024^3 matmul): {rate / 1e9:.1f} GFLOP/s.\n\n"
        "| preset | counted MFLOP / token (fwd+bwd) | GEMM share | unfused MB / token | kernels / token "
        "| measured ms / step | achieved GFLOP/s | measured / (FLOPs at the GEMM rate) |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|\n" + "\n".join(rows)
    )
    if args.out:
        write_block(args.out, "cost-model-check", block, "benchmarks/cost_model_check.py")
    print(block)


if __name__ == "__main__":
    main()
