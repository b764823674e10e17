"""`atlas eval lm-eval`: lm-eval-harness zero-shot tasks on a pretrained model (protocol:
`evaluation.lm_protocols`, task sets: `evaluation.lm_eval_tasks`); its report section is the paper's Table 2
layout, which also holds the perplexities of `ppl`."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from atlas_experiments.evaluation.tasks.spec import CHECKPOINT, EvalTask, RunsByModel

LM_OURS = (  # (column, metric); accuracies already x 100 in lm-eval's `paper/` summaries
    ("wiki ppl", "paper/wiki_ppl"),
    ("lmb ppl", "paper/lmb_ppl"),
    ("lmb acc", "paper/lmb_acc"),
    ("piqa", "paper/piqa"),
    ("hella", "paper/hella"),
    ("wino", "paper/wino"),
    ("arc-e", "paper/arc_e"),
    ("arc-c", "paper/arc_c"),
    ("siqa", "paper/siqa"),
    ("boolq", "paper/boolq"),
    ("avg", "paper/avg"),
    ("last-word acc", "offline/lastword_acc"),
    ("last-word ppl", "offline/lastword_ppl"),
    ("cloze acc", "offline/cloze_acc"),
    ("word ppl", "offline/word_ppl"),
)


def add_options(p: argparse.ArgumentParser) -> None:
    from atlas_experiments.evaluation.model_io import add_model_args

    add_model_args(p)
    p.add_argument("--tasks", default="offline", help="paper, recall, offline, or comma-separated task names")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--limit", type=float, help="lm-eval --limit: docs per task (int) or fraction (< 1)")
    p.add_argument("--max-length", type=int, help="model context for lm-eval (default: the training context)")
    p.add_argument("--max-docs", type=int, default=500, help="docs per offline task (default 500)")
    p.add_argument("--task-dir", help="where the offline task YAMLs go (default: <out stem>_tasks/)")
    p.add_argument("--bootstrap-iters", type=int, default=1000, help="lm-eval stderr bootstrap (default 1000)")


def run(args: argparse.Namespace) -> int:
    from atlas_experiments.evaluation.lm_eval_tasks import check_hub_access, resolve_tasks
    from atlas_experiments.evaluation.lm_protocols import run_lm_eval_protocol
    from atlas_experiments.evaluation.model_io import model_from_args
    from atlas_experiments.evaluation.protocol import sibling
    from atlas_experiments.evaluation.results import finish

    tasks = resolve_tasks(args.tasks)
    check_hub_access(tasks)  # before loading anything: offline, fail in a second, not after minutes of retries
    loaded = model_from_args(args)
    result = run_lm_eval_protocol(
        loaded,
        tasks,
        task_dir=Path(args.task_dir) if args.task_dir else sibling(args.out, "_tasks"),
        seed=args.seed,
        max_docs=args.max_docs,
        batch_size=args.batch_size,
        limit=args.limit,
        max_length=args.max_length,
        bootstrap_iters=args.bootstrap_iters,
    )
    return finish(result, args)


def lm_section(by_model: RunsByModel, preset_of: Callable[[str], str | None]) -> str:
    """Table 2 layout: lm-eval columns (paper tasks, or the offline stand-ins), perplexity at each evaluated
    length, and the paper's 760M row of the same preset."""
    from atlas_experiments.reporting import paper_tables as paper
    from atlas_experiments.reporting.eval_tables import drop_empty, numeric_suffix
    from atlas_experiments.reporting.markdown import table

    lengths = sorted(
        {k.split("/", 1)[1] for runs in by_model.values() for k in runs.get("ppl", {}).get("metrics", {})
         if k.startswith("ppl/len_")}, key=numeric_suffix,
    )  # fmt: skip
    header = ["model", *[c for c, _ in LM_OURS], *[f"ppl@{n.removeprefix('len_')}" for n in lengths]]
    header += ["paper 760M wiki ppl", "paper 760M lmb ppl", "paper 760M avg"]
    rows = []
    for name, runs in sorted(by_model.items()):
        lm = runs.get("lm_eval", {}).get("metrics", {})
        ppl = runs.get("ppl", {}).get("metrics", {})
        if not lm and not ppl:
            continue
        ref = paper.TABLE2_760M.get(preset_of(name) or "")
        rows.append(
            [name, *[lm.get(k) for _, k in LM_OURS], *[ppl.get(f"ppl/{n}") for n in lengths]]
            + ([ref[0], ref[1], ref[-1]] if ref else [None] * 3)
        )
    if not rows:
        return ""
    header, rows = drop_empty(header, rows)
    return "\n## Language modeling and common-sense reasoning (Table 2 layout)\n\n" + table(header, rows)


TASK = EvalTask(
    name="lm_eval",
    command="lm-eval",
    kind=CHECKPOINT,
    help="lm-eval-harness zero-shot: --tasks paper | recall | offline | names",
    add_options=add_options,
    run=run,
    report=lambda by_model, ctx: lm_section(by_model, ctx.preset_of),
)
