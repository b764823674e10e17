"""`atlas eval babilong`: BABILong-style bAbI qa1-qa5 hidden in corpus text, accuracy per context length
(protocol: `evaluation.long_context`, stories: `atlas_data.synthetic.babilong`)."""

from __future__ import annotations

import argparse
import re

from atlas_experiments.evaluation.long_context import BABILONG_LENGTHS
from atlas_experiments.evaluation.tasks.spec import CHECKPOINT, EvalTask, RunsByModel


def add_options(p: argparse.ArgumentParser) -> None:
    from atlas_experiments.evaluation.long_context import add_long_context_options
    from atlas_experiments.evaluation.model_io import add_model_args

    add_model_args(p)
    add_long_context_options(p, lengths=BABILONG_LENGTHS, samples=100, max_new=8)
    p.add_argument("--tasks", default="qa1,qa2,qa3,qa4,qa5", help="bAbI tasks (qa1..qa5)")
    p.add_argument("--n-facts", type=int, help="facts per story (default per task: qa1 6, qa2 8, qa3 12, qa4 2, qa5 8)")


def run(args: argparse.Namespace) -> int:
    from atlas_data.synthetic import babilong
    from atlas_experiments.evaluation.long_context import long_context_run, run_babilong_protocol
    from atlas_experiments.evaluation.model_io import model_from_args, parse_ints
    from atlas_experiments.evaluation.results import finish

    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    for t in tasks:
        if t not in babilong.BABI_TASKS:
            raise ValueError(f"--tasks: unknown bAbI task {t!r}; choose from {', '.join(babilong.BABI_TASKS)}")
    lengths = parse_ints(args.lengths, "--lengths")
    settings = long_context_run(args)
    loaded = model_from_args(args)
    result, figure = run_babilong_protocol(
        loaded, tasks, lengths=lengths, samples_per_length=args.samples, n_facts=args.n_facts, run=settings
    )
    return finish(result, args, artifact=figure)


def babilong_section(by_model: RunsByModel) -> str:
    """Accuracy (x 100) by context length and by task; the paper gives BABILong only as a figure (Fig. 6)."""
    from atlas_experiments.reporting.eval_tables import numeric_suffix
    from atlas_experiments.reporting.markdown import table

    keys = sorted(
        {k for runs in by_model.values() for k in runs.get("babilong", {}).get("metrics", {})
         if re.fullmatch(r"acc/(len_\d+|qa\d+)", k)}, key=numeric_suffix,
    )  # fmt: skip
    if not keys:
        return ""
    header = ["model", *[k.removeprefix("acc/").replace("len_", "len ") for k in keys], "mean"]
    rows = []
    for name, runs in sorted(by_model.items()):
        m = runs.get("babilong", {}).get("metrics")
        if m:
            rows.append([name, *[None if m.get(k) is None else 100 * m[k] for k in keys], 100 * m.get("acc", 0.0)])
    return "\n## BABILong-style QA (accuracy %; the paper reports Fig. 6 only)\n\n" + table(header, rows)


TASK = EvalTask(
    name="babilong",
    command="babilong",
    kind=CHECKPOINT,
    help="BABILong-style bAbI qa1-qa5 hidden in corpus text: accuracy per length",
    add_options=add_options,
    run=run,
    report=lambda by_model, ctx: babilong_section(by_model),
)
