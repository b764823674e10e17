"""`atlas eval mad`: the MAD benchmark's six tasks (the paper's Table 4): an lr x weight-decay sweep per model,
best of the sweep, mean over difficulty settings (protocol: `evaluation.mad`); its report section is the Table 4
layout beside the paper's rows."""

from __future__ import annotations

import argparse

from atlas_experiments.evaluation.tasks.spec import PER_PRESET, EvalTask
from atlas_experiments.evaluation.tasks.synthetic_options import (
    add_model_options,
    add_resume_options,
    finish_synthetic,
    model_options,
    resume_dir,
)


def add_options(p: argparse.ArgumentParser) -> None:
    from atlas_experiments.evaluation.synthetic_train import add_run_options

    add_model_options(p, width="64")
    g = p.add_argument_group("task")
    g.add_argument("--tasks", default="all", help="comma-separated MAD tasks or 'all' (default)")
    g.add_argument(
        "--grid",
        default="reduced",
        choices=("baseline", "reduced", "paper", "paper_baseline"),
        help="difficulty settings: paper (mad-lab), paper_baseline (mad-lab's baseline setting alone), reduced (CPU, "
        "2 per task; default), baseline (reduced's first)",
    )
    g.add_argument("--train-examples", type=int, help="override every setting's train-set size")
    g.add_argument("--test-examples", type=int, help="test sequences per setting (default: paper 1280, else 256)")
    t = p.add_argument_group("training")
    t.add_argument(
        "--sweep",
        default="single",
        choices=("paper", "reduced", "single"),
        help="paper: lr {1e-4,5e-4,1e-3} x wd {0,0.1}; reduced: lr {5e-4,1e-3} x wd 0; single: lr 1e-3, wd 0 (default)",
    )
    t.add_argument("--lrs", help="explicit learning rates (replace the sweep's)")
    t.add_argument("--wds", help="explicit weight decays (replace the sweep's)")
    t.add_argument("--steps", type=int, default=100, help="optimizer steps per run (default 100)")
    t.add_argument("--batch-size", type=int, default=16, help="sequences per step (default 16; MAD 128)")
    add_resume_options(t)
    add_run_options(p, "results/eval/mad.json")


def mad_protocol(args: argparse.Namespace):
    """The `MADProtocol` of `atlas eval mad` with these options (the study builds its gates' data from it too)."""
    from atlas_data.synthetic.mad import MAD_TASKS
    from atlas_experiments.evaluation.mad import SWEEPS, MADProtocol
    from atlas_experiments.evaluation.synthetic_train import parse_list

    tasks = MAD_TASKS if args.tasks == "all" else tuple(parse_list(args.tasks, str, "--tasks"))
    widths = parse_list(args.width, int, "--width")
    if len(widths) != 1:
        raise ValueError("--width: mad takes one width")
    lrs, wds = SWEEPS[args.sweep]
    if args.lrs:
        lrs = tuple(parse_list(args.lrs, float, "--lrs"))
    if args.wds:
        wds = tuple(parse_list(args.wds, float, "--wds"))
    return MADProtocol(
        tasks=tuple(tasks),
        grid=args.grid,
        lrs=tuple(lrs),
        wds=tuple(wds),
        width=widths[0],
        **model_options(args),
        num_train_examples=args.train_examples,
        num_test_examples=args.test_examples,
    )


def run(args: argparse.Namespace) -> int:
    from atlas_experiments.devices import resolve_device
    from atlas_experiments.evaluation.mad import run_mad
    from atlas_experiments.evaluation.synthetic_train import parse_models, torch_threads

    protocol = mad_protocol(args)
    models = parse_models(args.models, args.size)
    device = resolve_device(args.device)
    with torch_threads(args.threads):
        result = run_mad(
            models, protocol, seed=args.seed, device=device, progress=not args.no_progress, resume=resume_dir(args)
        )
    for row in result.details["table"]:
        cells = " ".join(f"{t}={row[t]:.3f}" for t in protocol.tasks)
        print(f"mad {row['model']:>18} average {row['average']:.3f}  {cells}")
    return finish_synthetic(result, args)


MAD_OURS = {  # our task names -> the paper's Table 4 columns (noisy ICR is MAD's, not in the paper's table)
    "compression": "compression",
    "in_context_recall": "icr",
    "fuzzy_in_context_recall": "fuzzy_icr",
    "selective_copying": "selective_copying",
    "memorization": "memorization",
    "noisy_in_context_recall": "noisy_icr",
}


def mad_section(by_model: dict[str, dict[str, dict]]) -> str:
    """Table 4 layout: accuracy (x 100) per MAD task; `avg` over the paper's five tasks (when all ran), `avg all`
    over every task we ran; the paper's rows below."""
    from atlas_experiments.reporting import paper_tables as paper
    from atlas_experiments.reporting.eval_tables import drop_empty
    from atlas_experiments.reporting.markdown import table

    paper_tasks = paper.MAD_COLUMNS[:-1]
    rows = []
    for name, runs in sorted(by_model.items()):
        m = runs.get("mad", {}).get("metrics")
        if not m:
            continue
        acc = {MAD_OURS.get(k.split("/")[-1], k.split("/")[-1]): 100 * v for k, v in m.items()
               if k.startswith("acc/") and k.count("/") == 2 and not k.endswith("/average")}  # fmt: skip
        five = [acc[c] for c in paper_tasks if c in acc]
        avg = sum(five) / len(five) if len(five) == len(paper_tasks) else None
        # the memory an arm holds (floats after the recall baseline's T tokens): accuracies compare fairly only
        # beside it
        memory = next(
            (v for k, v in m.items() if k.startswith("memory_size/") and k.endswith("/in_context_recall")), None
        )
        rows.append([name, *[acc.get(c) for c in paper_tasks], avg, acc.get("noisy_icr"),
                     sum(acc.values()) / len(acc) if acc else None,
                     int(memory) if memory is not None else None])  # fmt: skip
    if not rows:
        return ""
    header, rows = drop_empty(["model", *paper.MAD_COLUMNS, "noisy_icr", "avg all", "memory floats (recall)"], rows)
    out = "\n## MAD (Table 4 layout, accuracy %)\n\n" + table(header, rows)
    out += "\nPaper (Table 4, MAD accuracy %):\n\n"
    out += table(["model", *paper.MAD_COLUMNS], [[k, *v] for k, v in paper.TABLE4_MAD.items()])
    return out


TASK = EvalTask(
    name="mad",
    command="mad",
    kind=PER_PRESET,
    help="MAD benchmark (6 tasks): lr x wd sweep, best-of, mean over difficulty settings",
    add_options=add_options,
    run=run,
    report=lambda by_model, ctx: mad_section(by_model),
)
