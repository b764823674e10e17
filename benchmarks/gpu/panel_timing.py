"""The study's GPU panel measured on a CPU, and its wall time on one GPU projected from those measurements.

    python benchmarks/gpu/panel_timing.py [--arms atlas,omeganet] [--budget-s 300] [--out panel_timing.md]
        [--plan-out benchmarks/gpu/panel_plan.json]

For each (protocol, arm) of the `gpu`-scale lm protocols (config/study/claims.yaml) it builds the arm's model the
way `atlas study run` does (`study.execute.lm_train_config`) and, on one thread, measures one training step
(forward, backward) on one sequence of the protocol's length:
  - `GFLOP/seq`: matmul FLOPs (torch's FLOP counter) at the protocol's width;
  - `cpu s/seq`: its wall time at that width, float32 (the CPU cost, for the record);
  - `kernels/step` and `host ms/step`: the aten calls that launch work (views left out) and the wall time of the
    same step at a tiny width (hidden 16), where the arithmetic is negligible and the time is the framework's per-op
    cost (Python, dispatch, autograd). Neither depends on the batch: the ops are batched.
A GPU step of these small models is bound by issuing and running many tiny kernels, not by the GPU's arithmetic,
so the projection per step of the protocol's batch (micro batch x seq_len tokens) is
    host s/step = host ms/step x HOST_SPEED + kernels/step x LAUNCH_US         (the arm's process, one core)
    gpu s/step  = kernels/step x KERNEL_US + micro batch x GFLOP/seq / GPU_TFLOPS  (the GPU's busy time)
and an arm's step takes the larger of the two. The panel runs single-threaded processes side by side: per-arm (the
default of `study_panel.sh`), one per arm running its seeds in sequence; per-job, one per seed. Without MPS the GPU
runs the kernels of one process at a time, so the panel's wall time is at least what the cores need and at least
the sum of every job's GPU time:
    panel s = max(longest process, sum of process times / cores, START_S + sum over jobs of steps x gpu s/step)
    process s = START_S + seeds x (steps x max(host, gpu) s/step + SEED_S)   (per-job: seeds = 1)
Every constant in capitals is an assumption (each is an option), to be replaced by what one GPU call measures.
`--plan-out` writes the claims that fit `--budget-s` under the registered priority rule (the pilot's: whole claims
dropped, highest priority number first) for the grouping that keeps the most jobs, as a plan that `atlas study run
--plan` honours (the pilot's format plus `grouping`; a dropped job records that it did not run).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for _pkg in ("atlas-kernels", "atlas-model", "atlas-data", "atlas-experiments"):
    sys.path.insert(0, str(ROOT / "packages" / _pkg / "src"))

HOST_SPEED = 1.0  # a GPU machine's core vs this CPU's: both server x86 cores, taken as equal
LAUNCH_US = 3.0  # host cost of a CUDA launch beyond the op's CPU dispatch
KERNEL_US = 3.0  # GPU time of one tiny kernel back to back with the next (launch latency + a few blocks)
GPU_TFLOPS = 50.0  # small fp32 / bf16 GEMMs of hidden 128 reach a few % of an H200's 790 TFLOP/s roof
START_S = 15.0  # per process: imports, CUDA context, cuBLAS handles, the data's first reads
SEED_S = 3.0  # per seed: model build, the peak-FLOP probe, final evaluation, checkpoint and loss-curve files
CORES = 16
GROUPINGS = ("per-arm", "per-job")
TINY_WIDTH = {"hidden_size": 16, "intermediate_size": 32}


def panel_jobs(claims: str | Path, scale: str = "gpu") -> dict[tuple[str, str], list]:
    """The lm jobs of the panel grouped by (protocol, arm), in plan order."""
    from atlas_experiments.study.claims import load_claims
    from atlas_experiments.study.plan import plan_jobs

    groups: dict[tuple[str, str], list] = {}
    for job in plan_jobs(load_claims(claims), [scale]):
        if job.protocol.task == "lm":
            groups.setdefault((job.protocol.name, job.arm.name), []).append(job)
    return groups


class _CountKernels:
    """Counts the aten calls dispatched inside the block that are not views (each launches at least one kernel on a
    GPU): forward, backward and all."""

    def __enter__(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        counter = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                if not func.is_view:
                    counter.n += 1
                return func(*args, **(kwargs or {}))

        self.n = 0
        self._mode = Mode()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc):
        self._mode.__exit__(*exc)


def _model_step(job, vocab: int, width: dict | None = None):
    import torch

    from atlas_experiments.study.execute import lm_train_config
    from atlas_experiments.train.config import TrainConfig
    from atlas_experiments.train.loop import lm_loss
    from atlas_experiments.train.model_factory import build_model

    data = lm_train_config(job, ROOT)
    if width:
        data["model"]["overrides"] = {**data["model"]["overrides"], **width}
    cfg = TrainConfig.from_dict(data)
    torch.manual_seed(0)
    model = build_model(cfg.model, vocab)
    x = torch.randint(0, vocab, (1, cfg.data.seq_len))
    y = torch.randint(0, vocab, (1, cfg.data.seq_len))

    def step():
        model.zero_grad(set_to_none=True)
        lm_loss(model, x, y).backward()

    return step, cfg


def _best(step, reps: int) -> float:
    step()  # allocator growth, lazy initialisation
    best = math.inf
    for _ in range(reps):
        t0 = time.perf_counter()
        step()
        best = min(best, time.perf_counter() - t0)
    return best


def measure_arm(job, vocab: int, reps: int = 2, real: bool = True) -> dict:
    from torch.utils.flop_counter import FlopCounterMode

    out = {}
    if real:
        step, cfg = _model_step(job, vocab)
        counter = FlopCounterMode(display=False)
        with counter:
            step()
        out["gflop_seq"] = counter.get_total_flops() / 1e9
        out["cpu_s_seq"] = _best(step, 1)
    step, cfg = _model_step(job, vocab, TINY_WIDTH)
    out["host_s"] = _best(step, reps)
    with _CountKernels() as kernels:
        step()
    out["kernels"] = kernels.n
    out["micro_batch"], out["steps"] = cfg.micro_batch * cfg.grad_accum(1), cfg.total_steps
    return out


def project(rows: list[dict], *, grouping: str = "per-arm", host_speed=HOST_SPEED, launch_us=LAUNCH_US,
            kernel_us=KERNEL_US, gpu_tflops=GPU_TFLOPS, cores=CORES) -> dict:  # fmt: skip
    """Per-arm step and arm times (added to each row) and the panel's wall time (module docstring). `per-job`: one
    process per seed instead (the start-up paid per seed, the seeds of an arm side by side)."""
    if not rows:
        return {"wall_s": 0.0, "host_bound_s": 0.0, "gpu_bound_s": 0.0, "grouping": grouping}
    gpu_total, host_total, longest = 0.0, 0.0, 0.0
    for r in rows:
        r["host_step_s"] = r["host_s"] * host_speed + r["kernels"] * launch_us * 1e-6
        r["gpu_step_s"] = r["kernels"] * kernel_us * 1e-6 + r["micro_batch"] * r["gflop_seq"] / (gpu_tflops * 1e3)
        r["step_s"] = max(r["host_step_s"], r["gpu_step_s"])
        r["job_s"] = START_S + r["steps"] * r["step_s"] + SEED_S
        r["arm_s"] = START_S + r["seeds"] * (r["steps"] * r["step_s"] + SEED_S)
        gpu_total += r["seeds"] * r["steps"] * r["gpu_step_s"]
        if grouping == "per-arm":
            host_total += r["arm_s"]
            longest = max(longest, r["arm_s"])
        else:
            host_total += r["seeds"] * r["job_s"]
            longest = max(longest, r["job_s"])
    host_bound = max(longest, host_total / cores)  # single-threaded processes packed on the cores
    gpu_bound = START_S + gpu_total
    return {"wall_s": max(host_bound, gpu_bound), "host_bound_s": host_bound, "gpu_bound_s": gpu_bound,
            "grouping": grouping}  # fmt: skip


def fit_plan(rows: list[dict], claims: str | Path, budget_s: float, scale: str = "gpu", **assume) -> dict:
    """The registered priority rule (`study.pilot.fit_by_priority`): drop whole claims, the highest priority number
    first (ties: the last listed first; None: never), until the jobs of the kept claims fit `budget_s` under this
    module's projection; the plan in the pilot's format, plus the grouping it was fitted for."""
    from atlas_experiments.study.claims import load_claims
    from atlas_experiments.study.plan import plan_jobs, planned_claims

    registry = load_claims(claims)
    by_arm = {(r["protocol"], r["arm"]): r for r in rows}
    kept = sorted(planned_claims(registry, [scale]), key=lambda c: (c.priority is not None, c.priority or 0))
    kept = [c for c in kept if {(registry.protocol_of(c).name, a.name) for a in c.arms} <= by_arm.keys()]
    dropped: list[str] = []

    def arms_of(claims_kept) -> dict:
        need = {(registry.protocol_of(c).name, a.name) for c in claims_kept for a in c.arms}
        return {k: dict(by_arm[k]) for k in need}

    while kept and project(list(arms_of(kept).values()), **assume)["wall_s"] > budget_s:
        if kept[-1].priority is None:
            break
        dropped.append(kept.pop().id)
    chosen = arms_of(kept)
    jobs = [j.name for j in plan_jobs(registry, [scale]) if j.arm and (j.protocol.name, j.arm.name) in chosen]
    proj = project(list(chosen.values()), **assume)
    return {"budget_minutes": budget_s / 60, "accepted_jobs": sorted(jobs), "dropped_claims": dropped,
            "accepted_claims": [c.id for c in kept], "jobs": len(plan_jobs(registry, [scale])),
            "projected_wall_s": round(proj["wall_s"], 1), "grouping": proj["grouping"], "assumptions": assume,
            "source": "benchmarks/gpu/panel_timing.py (projected from CPU measurements)"}  # fmt: skip


def _machine() -> str:
    import torch

    return (f"{os.cpu_count()}-core CPU, torch {torch.__version__}, 1 thread, float32, "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {os.getloadavg()[0]:.1f}")  # fmt: skip


def render(rows: list[dict], projections: dict, args, plans: list[dict]) -> str:

    seeds = max(r["seeds"] for r in rows)
    lines = [
        f"Measured on: {rows[0].get('machine', _machine())}.",
        "",
        "| arm | GFLOP/seq | cpu s/seq | kernels/step | host ms/step | proj. host s/step | proj. GPU s/step "
        "| proj. arm s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['arm']} | {r['gflop_seq']:.2f} | {r['cpu_s_seq']:.2f} | {r['kernels']:,} | {r['host_s'] * 1e3:.0f} "
            f"| {r['host_step_s']:.3f} | {r['gpu_step_s']:.3f} | {r['arm_s']:.0f} |"
        )
    lines += [
        "",
        f"Assumptions: host speed x{args.host_speed}, {args.launch_us:g} us launch, {args.kernel_us:g} us GPU time per "
        f"kernel, {args.gpu_tflops:g} TFLOP/s, {START_S:g} s start-up per process, {SEED_S:g} s per seed, "
        f"{args.cores} cores; {len(rows)} arms x {seeds} seeds x {rows[0]['steps']} steps of "
        f"{rows[0]['micro_batch']} sequences.",
    ]
    for name, p in projections.items():
        lines.append(f"Projected panel, {name}: **{p['wall_s']:.0f} s** (the cores: {p['host_bound_s']:.0f} s; the "
                     f"GPU's serial kernel time of every job: {p['gpu_bound_s']:.0f} s).")  # fmt: skip
    for plan in plans:
        kept, dropped = ", ".join(plan["accepted_claims"]) or "none", ", ".join(plan["dropped_claims"]) or "none"
        lines += [
            "",
            f"Fits {plan['budget_minutes'] * 60:.0f} s by priority, {plan['grouping']}: {len(plan['accepted_jobs'])} "
            f"of {plan['jobs']} jobs, projected {plan['projected_wall_s']:.0f} s; claims: {kept}; dropped: {dropped}.",
        ]
    return "\n".join(lines) + "\n"


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--claims", default=str(ROOT / "config" / "study" / "claims.yaml"))
    ap.add_argument("--scale", default="gpu")
    ap.add_argument("--arms", default="", help="comma-separated arm names (default: every arm of the panel)")
    ap.add_argument("--vocab", type=int, default=8192, help="the embedded corpus' vocabulary")
    ap.add_argument("--host-speed", type=float, default=HOST_SPEED)
    ap.add_argument("--launch-us", type=float, default=LAUNCH_US)
    ap.add_argument("--kernel-us", type=float, default=KERNEL_US)
    ap.add_argument("--gpu-tflops", type=float, default=GPU_TFLOPS)
    ap.add_argument("--cores", type=int, default=CORES)
    ap.add_argument("--budget-s", type=float, default=300.0, help="the panel's wall-time target (--plan-out)")
    ap.add_argument("--measured", type=Path, help="reuse the measurements of an earlier run (its --json)")
    ap.add_argument("--json", type=Path, help="write the measurements (JSON)")
    ap.add_argument("--plan-out", type=Path)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    groups = panel_jobs(args.claims, args.scale)
    wanted = {a for a in args.arms.split(",") if a}
    if args.measured:
        rows = [r for r in json.loads(args.measured.read_text()) if not wanted or r["arm"] in wanted]
    else:
        rows = []
        for (protocol, arm), jobs in groups.items():
            if wanted and arm not in wanted:
                continue
            row = {"protocol": protocol, "arm": arm, "seeds": len(jobs), **measure_arm(jobs[0], args.vocab),
                   "machine": _machine()}  # fmt: skip
            rows.append(row)
            print(f"{protocol}/{arm}: {row['gflop_seq']:.2f} GFLOP/seq, cpu {row['cpu_s_seq']:.2f} s/seq, "
                  f"{row['kernels']} kernels, host {row['host_s'] * 1e3:.0f} ms/step", flush=True)  # fmt: skip
            if args.json:
                _write(args.json, json.dumps(rows, indent=1))
    if not rows:
        print("no lm arm at this scale")
        return 1
    assume = {"host_speed": args.host_speed, "launch_us": args.launch_us, "kernel_us": args.kernel_us,
              "gpu_tflops": args.gpu_tflops, "cores": args.cores}  # fmt: skip
    projections = {g: project(rows, grouping=g, **assume) for g in GROUPINGS}
    plans = [fit_plan(rows, args.claims, args.budget_s, args.scale, grouping=g, **assume) for g in GROUPINGS]
    text = render(rows, projections, args, plans)
    print(text)
    if args.out:
        _write(args.out, text)
    if args.plan_out:  # the grouping that keeps the most jobs within the budget
        best = max(plans, key=lambda p: (len(p["accepted_jobs"]), -p["projected_wall_s"]))
        _write(args.plan_out, json.dumps(best, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
