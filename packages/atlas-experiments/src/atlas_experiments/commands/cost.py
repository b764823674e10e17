"""`atlas cost`: count what training jobs cost per token and project their GPU-hours (docs/costs.md).

    atlas cost --config train.json                       # one job, printed
    atlas cost --jobs jobs.json --out costs.json --markdown costs.md --gpus 8

`--jobs` is a JSON mapping of job name -> TrainConfig mapping (what `atlas train --config` reads); the workflow
writes it (`snakemake cost_table`). `--out` keeps rows whose key still matches, so a rerun counts only what
changed.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cost", help="FLOPs and bytes per token of training jobs, projected GPU-hours and runtimes")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--config", help="one TrainConfig file, YAML or JSON (as `atlas train --config`)")
    src.add_argument("--jobs", help="JSON mapping job name -> TrainConfig mapping")
    p.add_argument("--out", help="cost table (JSON) to write; rows with a matching key are reused")
    p.add_argument("--markdown", help="also write the table as markdown")
    p.add_argument("--gpus", type=int, default=8, help="GPUs per job (wall hours and runtimes; default 8)")
    p.add_argument("--mfu", type=float, default=0.4, help="model FLOP utilisation assumed (default 0.4)")
    p.add_argument("--peak-tflops", type=float, default=675.0, help="bf16 matmul peak per GPU (default 675)")
    p.add_argument(
        "--fp64-tflops", type=float, default=67.0, help="float64 matmul peak per GPU (default 67, an H200's nominal)"
    )
    p.add_argument("--hbm-tbps", type=float, default=4.8, help="memory bandwidth per GPU in TB/s (default 4.8)")
    p.add_argument("--margin", type=float, default=1.5, help="requested runtime = projection x margin (default 1.5)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from atlas_experiments.configio import load_mapping
    from atlas_experiments.cost import GpuAssumptions, JobSpec, cost_jobs, markdown, project

    if args.gpus < 1:
        raise ValueError(f"--gpus: must be >= 1, got {args.gpus}")
    assumptions = GpuAssumptions(args.peak_tflops, args.mfu, args.hbm_tbps, args.margin, args.fp64_tflops)
    if args.config:
        jobs = [JobSpec.from_train_config(Path(args.config).stem, load_mapping(args.config))]
    else:
        mapping = load_mapping(args.jobs)
        jobs = []
        for name, data in mapping.items():
            if not isinstance(data, dict):
                raise ValueError(f"{args.jobs}: job {name!r} is not a TrainConfig mapping")
            jobs.append(JobSpec.from_train_config(name, data))
    if args.out:
        costs = cost_jobs(jobs, assumptions, args.out, args.gpus)
    else:
        costs = [project(job, assumptions) for job in jobs]
    text = markdown(costs, assumptions, args.gpus)
    if args.markdown:
        from atlas_experiments._io import write_text_atomic

        write_text_atomic(args.markdown, text)
    print(text)
    return 0
