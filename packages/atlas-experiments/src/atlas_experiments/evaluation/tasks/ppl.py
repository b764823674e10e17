"""`atlas eval ppl`: perplexity of a pretrained model on the held-out split at its training context and longer
(protocol: `evaluation.lm_protocols`). Its numbers appear in the Table 2 section that `lm_eval` writes."""

from __future__ import annotations

import argparse

from atlas_experiments.evaluation.tasks.spec import CHECKPOINT, EvalTask


def add_options(p: argparse.ArgumentParser) -> None:
    from atlas_experiments.evaluation.model_io import add_model_args

    add_model_args(p)
    p.add_argument("--lengths", help="comma-separated context lengths (default: T, 2T, 4T of the training context)")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--max-tokens", type=int, help="cap the tokens scored per length (default: the whole split)")
    p.add_argument("--split", default="validation", help="prepared split to score (default validation)")


def run(args: argparse.Namespace) -> int:
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


TASK = EvalTask(
    name="ppl",
    command="ppl",
    kind=CHECKPOINT,
    help="perplexity on the held-out split at the training context and longer",
    add_options=add_options,
    run=run,
)
