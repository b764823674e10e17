"""How well conditioned the outer gradient of the claims study's MQAR models is, by sequence length: the norm of the
training loss's gradient (float64) and the relative error of the same gradient computed in float32.

A relative error near 1 means the float32 gradient the optimizer follows is rounding noise: the inner recurrence
amplifies perturbations faster than the loss averages them (docs: atlas-experiments eval-synthetic.md,
"Investigation"). The models are those `atlas eval mqar` trains (2 blocks, width 64, memory head dim 8, expansion 2,
vocab 64), at initialisation, on B random token sequences; the loss is the next-token cross-entropy of every
position. One torch thread. Usage:

    python benchmarks/outer_grad_conditioning.py --out benchmarks/outer_grad_conditioning.md
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from atlas_study_cost import Arm, build, next_token_loss  # noqa: E402

VARIANTS = (
    Arm("Atlas", "atlas"),
    Arm("Atlas, decay to W_0", "atlas", {"decay_target": "init"}),
    Arm("Atlas, alpha_init 0.999", "atlas", fields={"alpha_init": 0.999}),
    Arm("OmegaNet", "omeganet"),
    Arm("OmegaNet, decay to W_0", "omeganet", {"decay_target": "init"}),
    Arm("OmegaNet, eta_init 0.04, decay to W_0", "omeganet", {"decay_target": "init"}, fields={"eta_init": 0.04}),
    Arm("Titans (LMM)", "titans_lmm"),
    Arm("Gated DeltaNet", "gated_deltanet"),
)


def gradients(arm: Arm, tokens, dtype):
    import torch

    from atlas_experiments.evaluation.synthetic_models import lm_forward

    model = build(arm).to(dtype)
    loss = next_token_loss(lm_forward(model, tokens[:, :-1]), tokens)
    loss.backward()
    flat = torch.cat([p.grad.detach().double().flatten() for p in model.parameters() if p.grad is not None])
    return flat


def measure(arm: Arm, T: int, batch: int, seed: int) -> tuple[float, float]:
    """(|g| in float64, |g32 - g64| / |g64|) of the whole parameter gradient; NaN when float32 is not finite."""
    import torch

    tokens = torch.randint(0, 64, (batch, T + 1), generator=torch.Generator().manual_seed(seed))
    g64 = gradients(arm, tokens, torch.float64)
    try:
        g32 = gradients(arm, tokens, torch.float32)
        err = float((g32 - g64).norm() / g64.norm())
    except ValueError:  # the op refuses non-finite gates: the float32 forward itself blew up
        err = float("nan")
    return float(g64.norm()), err


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lengths", default="16,32,64,128")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--out", help="write the markdown table here (atomically) as well as to stdout")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    lengths = [int(t) for t in args.lengths.split(",")]
    start = time.perf_counter()
    rows = []
    for arm in VARIANTS:
        cells = []
        for T in lengths:
            runs = [measure(arm, T, args.batch, seed) for seed in range(args.seeds)]
            norm = statistics.median(r[0] for r in runs)
            err = max(r[1] for r in runs)
            cells.append(f"{norm:.2g} / {err:.1e}")
            print(f"{arm.label} T={T}: |g| {norm:.3g}, float32 error {err:.2e}", flush=True)
        rows.append(f"| {arm.label} | " + " | ".join(cells) + " |")
    lines = [
        f"Command: `python benchmarks/outer_grad_conditioning.py {' '.join(sys.argv[1:])}`",
        "",
        f"Machine: {os.cpu_count()}-core CPU ({platform.machine()}), torch {torch.__version__}, 1 thread; date "
        f"{datetime.date.today().isoformat()}; wall {time.perf_counter() - start:.0f} s. Models at initialisation "
        f"(2 blocks, width 64, memory head dim 8, expansion 2, vocab 64), B = {args.batch} random sequences, "
        f"seeds 0-{args.seeds - 1}.",
        "",
        "Each cell: median over seeds of the float64 gradient norm |g| / the largest over seeds of "
        "|g_float32 - g_float64| / |g_float64| (nan: the float32 forward produced non-finite gates).",
        "",
        "| model | " + " | ".join(f"T = {T}" for T in lengths) + " |",
        "|---|" + "---:|" * len(lengths),
        *rows,
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
