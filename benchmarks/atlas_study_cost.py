"""What one training step of Atlas costs at the claims study's MQAR shapes, side by side with OmegaNet (its GD twin),
per Muon form and memory backend: the measurement behind the study's CPU budget (docs/study.md of atlas-experiments
and the issue on Atlas's cost at the study's shapes).

The models are those `atlas eval mqar` trains (`synthetic_models.model_config`: 2 blocks, width 64, memory head dim
8, inner expansion 2, degree-2 polynomial features, window c = 4, chunk 4, vocab 64); one step is the forward, the
cross-entropy of every position, the backward and an AdamW step on B x T random tokens, one torch thread. The arms
run interleaved, `--rounds` rounds of `--steps` steps each after `--warmup` steps (where compilation happens, timed
apart), and the table gives the median round. Before timing, every variant of a model is checked to compute the same
first-step loss and gradients as its first variant (they differ only in how the op is evaluated). Usage:

    python benchmarks/atlas_study_cost.py --out benchmarks/atlas_study_cost.md
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Arm:
    label: str
    preset: str
    memory: dict = field(default_factory=dict)
    backend: str = "torch"
    fields: dict = field(default_factory=dict)  # other AtlasConfig overrides (gate initialisations, ...)


ARMS = (
    Arm("Atlas, lowrank float32, eager (the study's pin)", "atlas", {"ns_form": "lowrank", "muon_float64": False}),
    Arm("Atlas, materialise, eager (auto before)", "atlas", {"ns_form": "materialise"}),
    Arm("Atlas, gram, eager", "atlas", {"ns_form": "gram"}),
    Arm("Atlas, auto, eager", "atlas", {"ns_form": "auto"}),
    Arm("Atlas, auto, compiled", "atlas", {"ns_form": "auto"}, "compiled"),
    Arm("OmegaNet, eager", "omeganet"),
    Arm("OmegaNet, compiled", "omeganet", {}, "compiled"),
)
VOCAB, WIDTH, LAYERS, HEAD_DIM, EXPANSION = 64, 64, 2, 8, 2


def build(arm: Arm, seed: int = 0):
    import torch

    from atlas_experiments.evaluation.synthetic_models import ModelChoice, build_lm, model_config

    overrides = {"memory": arm.memory, "memory_backend": arm.backend, **arm.fields}
    choice = ModelChoice(arm.label, arm.preset, overrides=overrides)
    cfg = model_config(
        choice, vocab_size=VOCAB, width=WIDTH, layers=LAYERS, memory_head_dim=HEAD_DIM, memory_expansion=EXPANSION
    )
    return build_lm(cfg, seed, torch.device("cpu"))


def next_token_loss(logits, tokens):
    import torch

    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), tokens[:, 1:].reshape(-1))


def make_step(model, tokens):
    import torch

    from atlas_experiments.evaluation.synthetic_models import lm_forward

    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step() -> float:
        loss = next_token_loss(lm_forward(model, tokens[:, :-1]), tokens)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return float(loss)

    return step


def first_gradients(arm: Arm, tokens):
    """Loss and parameter gradients of the first step in float64, where the variants' rounding is negligible (in
    float32 the outer gradient of these models at T = 64 carries relative rounding errors of 1e-3 to 1e-1)."""
    from atlas_experiments.evaluation.synthetic_models import lm_forward

    model = build(arm).double()
    loss = next_token_loss(lm_forward(model, tokens[:, :-1]), tokens)
    loss.backward()
    return float(loss), {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def check_equal(arms, tokens) -> list[str]:
    """Per model, the largest relative difference of loss and gradients of each variant against the first."""
    notes, reference = [], {}
    for arm in arms:
        loss, grads = first_gradients(arm, tokens)
        if arm.preset not in reference:
            reference[arm.preset] = (arm.label, loss, grads)
            continue
        label, ref_loss, ref_grads = reference[arm.preset]
        worst = max(float((grads[n] - g).norm() / g.norm().clamp_min(1e-30)) for n, g in ref_grads.items())
        gap = f"loss {loss:.12f} vs {ref_loss:.12f}, largest relative gradient gap {worst:.1e}"
        notes.append(f"{arm.label} vs {label}: {gap}")
        if abs(loss - ref_loss) > 1e-10 * abs(ref_loss) or worst > 1e-8:
            raise SystemExit(f"{arm.label}: does not compute the model of {label} (see above: {notes[-1]})")
    return notes


def profile(arm: Arm, args) -> int:
    """Self CPU time of one step by aten op (after the warm-up), and the share of the batched matmuls by shape."""
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    tokens = torch.randint(0, VOCAB, (args.batch, args.seq_len + 1), generator=torch.Generator().manual_seed(0))
    step = make_step(build(arm), tokens)
    for _ in range(args.warmup):
        step()
    with torch_profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        step()
    events = prof.key_averages(group_by_input_shape=True)
    total = sum(e.self_cpu_time_total for e in events)
    by_op: dict[str, float] = {}
    for e in events:
        by_op[e.key] = by_op.get(e.key, 0.0) + e.self_cpu_time_total
    print(f"{arm.label}: one step, {total / 1e6:.3f} s of self CPU time under the profiler")
    print("| op | share | calls' input shapes (largest shares) |")
    print("|---|---:|---|")
    for op, t in sorted(by_op.items(), key=lambda kv: -kv[1])[:8]:
        shapes = sorted((e for e in events if e.key == op), key=lambda e: -e.self_cpu_time_total)[:2]
        detail = "; ".join(f"{e.input_shapes} x{e.count} ({e.self_cpu_time_total / total:.0%})" for e in shapes)
        print(f"| {op} | {t / total:.0%} | {detail} |")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=64, help="T of the training sequences (MQAR settings 32x4, 64x8)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=5, help="steps per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--arms", help="comma-separated substrings of arm labels to run (default: every arm)")
    ap.add_argument("--profile", help="profile one step of the first arm whose label contains this, print the top ops")
    ap.add_argument("--out", help="write the markdown table here (atomically) as well as to stdout")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    if args.profile:
        return profile(next(a for a in ARMS if args.profile in a.label), args)
    arms = [a for a in ARMS if not args.arms or any(s.strip() in a.label for s in args.arms.split(","))]
    tokens = torch.randint(0, VOCAB, (args.batch, args.seq_len + 1), generator=torch.Generator().manual_seed(0))
    checks = check_equal(arms, tokens)
    steps, warm = {}, {}
    for arm in arms:
        steps[arm.label] = make_step(build(arm), tokens)
        start = time.perf_counter()
        for _ in range(args.warmup):
            steps[arm.label]()
        warm[arm.label] = time.perf_counter() - start
        print(f"{arm.label}: warm-up {warm[arm.label]:.1f} s", flush=True)
    rounds: dict[str, list[float]] = {a.label: [] for a in arms}
    for r in range(args.rounds):
        for arm in arms:
            start = time.perf_counter()
            for _ in range(args.steps):
                steps[arm.label]()
            rounds[arm.label].append((time.perf_counter() - start) / args.steps)
        print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.3f}" for k, v in rounds.items()), flush=True)
    base = statistics.median(rounds[arms[0].label])
    tokens_per_step = args.batch * args.seq_len
    lines = [
        f"Command: `python benchmarks/atlas_study_cost.py {' '.join(sys.argv[1:])}`",
        "",
        f"Machine: {os.cpu_count()}-core CPU ({platform.machine()}, {platform.processor() or 'unknown'}), torch "
        f"{torch.__version__}, 1 thread; date {datetime.date.today().isoformat()}. Model: 2 blocks, width {WIDTH}, "
        f"memory head dim {HEAD_DIM}, expansion {EXPANSION}, degree-2 features, c = 4, chunk 4, vocab {VOCAB}; "
        f"B = {args.batch}, T = {args.seq_len}; fwd + cross-entropy + bwd + AdamW. Median of {args.rounds} "
        f"interleaved rounds of {args.steps} steps after {args.warmup} warm-up steps.",
        "",
        f"| arm | s per step | tokens/s | speed vs {arms[0].label} | warm-up (s, {args.warmup} steps) |",
        "|---|---:|---:|---:|---:|",
    ]
    for arm in arms:
        t = statistics.median(rounds[arm.label])
        lines.append(
            f"| {arm.label} | {t:.3f} | {tokens_per_step / t:,.0f} | {base / t:.2f}x | {warm[arm.label]:.1f} |"
        )
    lines += [
        "",
        "Same model: float64 loss and gradients of the first step against the first variant of each model:",
        "",
    ]
    lines += [f"- {n}" for n in checks]
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
