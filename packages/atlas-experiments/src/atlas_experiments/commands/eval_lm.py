"""`atlas eval ppl | lm-eval | niah | babilong`: evaluations of a pretrained checkpoint (or an untrained preset).

Every command takes the model as `--checkpoint <dir> [--data <prepared dir>]` or `--preset <name> --size <size>
--data <prepared dir>`, writes a results JSON (`--out`) that lists its deviations from the paper's protocol, and
logs the metrics to MLflow (`--no-track` to skip). See packages/atlas-experiments/docs/eval-lm.md.

The protocols themselves live in `atlas_experiments.evaluation` (`lm_protocols`: ppl and lm-eval;
`long_context`: S-NIAH and BABILong); this module parses the options and writes the results.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from atlas_experiments.evaluation.long_context import (
    BABILONG_LENGTHS,
    DEFAULT_DEPTHS,
    PAPER_NIAH_LENGTHS,
    LongContextRun,
)


def register_subcommands(sub: argparse._SubParsersAction) -> None:
    from atlas_experiments.evaluation.model_io import add_model_args

    p = sub.add_parser("ppl", help="perplexity on the held-out split at the training context and longer")
    add_model_args(p)
    p.add_argument("--lengths", help="comma-separated context lengths (default: T, 2T, 4T of the training context)")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--max-tokens", type=int, help="cap the tokens scored per length (default: the whole split)")
    p.add_argument("--split", default="validation", help="prepared split to score (default validation)")
    p.set_defaults(handler=run_ppl)

    p = sub.add_parser("lm-eval", help="lm-eval-harness zero-shot: --tasks paper | recall | offline | names")
    add_model_args(p)
    p.add_argument("--tasks", default="offline", help="paper, recall, offline, or comma-separated task names")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--limit", type=float, help="lm-eval --limit: docs per task (int) or fraction (< 1)")
    p.add_argument("--max-length", type=int, help="model context for lm-eval (default: the training context)")
    p.add_argument("--max-docs", type=int, default=500, help="docs per offline task (default 500)")
    p.add_argument("--task-dir", help="where the offline task YAMLs go (default: <out stem>_tasks/)")
    p.add_argument("--bootstrap-iters", type=int, default=1000, help="lm-eval stderr bootstrap (default 1000)")
    p.set_defaults(handler=run_lm_eval)

    p = sub.add_parser("niah", help="S-NIAH (RULER niah_single_1/2/3): accuracy per length x depth + heatmap")
    add_model_args(p)
    _add_long_context_args(p, lengths=PAPER_NIAH_LENGTHS, samples=100, max_new=None)
    p.add_argument("--tasks", default="niah_single_1,niah_single_2,niah_single_3", help="niah_single_1/2/3 (pk,n,w)")
    p.add_argument("--depths", default=",".join(f"{d:g}" for d in DEFAULT_DEPTHS), help="needle depths in [0, 1]")
    p.set_defaults(handler=run_niah)

    p = sub.add_parser("babilong", help="BABILong-style bAbI qa1-qa5 hidden in corpus text: accuracy per length")
    add_model_args(p)
    _add_long_context_args(p, lengths=BABILONG_LENGTHS, samples=100, max_new=8)
    p.add_argument("--tasks", default="qa1,qa2,qa3,qa4,qa5", help="bAbI tasks (qa1..qa5)")
    p.add_argument("--n-facts", type=int, help="facts per story (default per task: qa1 6, qa2 8, qa3 12, qa4 2, qa5 8)")
    p.set_defaults(handler=run_babilong)


def _add_long_context_args(p: argparse.ArgumentParser, lengths: tuple[int, ...], samples: int, max_new) -> None:
    p.add_argument("--lengths", default=",".join(map(str, lengths)), help="context lengths in tokens")
    p.add_argument("--samples", type=int, default=samples, help=f"samples per cell (default {samples})")
    p.add_argument("--scoring", default="generate", help="generate (paper/RULER), rank, or generate,rank")
    p.add_argument(
        "--haystack",
        default="validation",
        choices=("validation", "train", "embedded"),
        help="background text: the prepared data's validation/train split, or the embedded corpus",
    )
    p.add_argument("--max-new-tokens", type=int, default=max_new, help="tokens to generate (default: per task)")
    p.add_argument("--save-samples", action="store_true", help="also write every prompt and prediction (JSONL)")


def _long_context_run(args: argparse.Namespace) -> LongContextRun:
    """The run settings S-NIAH and BABILong take alike from `_add_long_context_args` and the output options,
    checked before the model loads."""
    from atlas_experiments.evaluation.protocol import parse_scorings

    if args.samples < 1:
        raise ValueError("--samples must be >= 1")
    return LongContextRun(
        scorings=tuple(parse_scorings(args.scoring)),
        haystack=args.haystack,
        max_new_tokens=args.max_new_tokens,
        seed=args.seed,
        out=args.out,
        save_samples=args.save_samples,
        progress=not args.no_progress,
    )


def run_ppl(args: argparse.Namespace) -> int:
    from atlas_experiments.evaluation.lm_protocols import ppl_lengths, run_ppl_protocol
    from atlas_experiments.evaluation.model_io import model_from_args
    from atlas_experiments.evaluation.results import finish

    loaded = model_from_args(args)
    lengths = ppl_lengths(args.lengths, loaded.train_seq_len)
    result = run_ppl_protocol(
        loaded,
        lengths,
        split=args.split,
        batch_size=args.batch_size,
        max_tokens=args.max_tokens,
        progress=not args.no_progress,
    )
    return finish(result, args)


def run_lm_eval(args: argparse.Namespace) -> int:
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


def run_niah(args: argparse.Namespace) -> int:
    from atlas_data.synthetic import niah
    from atlas_experiments.evaluation.long_context import run_niah_protocol
    from atlas_experiments.evaluation.model_io import model_from_args, parse_floats, parse_ints
    from atlas_experiments.evaluation.results import finish

    specs = [niah.resolve_task(t.strip()) for t in args.tasks.split(",") if t.strip()]
    lengths = parse_ints(args.lengths, "--lengths")
    depths = parse_floats(args.depths, "--depths")
    if any(not 0 <= d <= 1 for d in depths):
        raise ValueError(f"--depths {args.depths!r}: depths are fractions in [0, 1]")
    run = _long_context_run(args)
    loaded = model_from_args(args)
    result, figure = run_niah_protocol(
        loaded, specs, lengths=lengths, depths=depths, samples_per_cell=args.samples, run=run
    )
    return finish(result, args, artifact=figure)


def run_babilong(args: argparse.Namespace) -> int:
    from atlas_data.synthetic import babilong
    from atlas_experiments.evaluation.long_context import run_babilong_protocol
    from atlas_experiments.evaluation.model_io import model_from_args, parse_ints
    from atlas_experiments.evaluation.results import finish

    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    for t in tasks:
        if t not in babilong.BABI_TASKS:
            raise ValueError(f"--tasks: unknown bAbI task {t!r}; choose from {', '.join(babilong.BABI_TASKS)}")
    lengths = parse_ints(args.lengths, "--lengths")
    run = _long_context_run(args)
    loaded = model_from_args(args)
    result, figure = run_babilong_protocol(
        loaded, tasks, lengths=lengths, samples_per_length=args.samples, n_facts=args.n_facts, run=run
    )
    return finish(result, args, artifact=figure)
