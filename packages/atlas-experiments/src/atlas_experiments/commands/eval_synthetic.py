"""`atlas eval mqar | mad | learnability`: synthetic tasks that train small models from scratch per protocol.

Each command writes a results JSON (`--out`; figures next to it) listing its deviations from the paper's protocol and
logs the metrics to MLflow (`--no-track` to skip). The defaults are the CPU-sized embedded run; the paper-scale
protocol is a matter of options (see packages/atlas-experiments/docs/eval-synthetic.md).
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from atlas_experiments.evaluation.results import EvalResult

log = logging.getLogger("atlas.eval")

_MODELS = "atlas,gated_deltanet,transformer_pp"
# The deep memories of the presets (poly features of a 16-dim head, expansion 4) cost ~20 s and ~15 GB per step of
# 16 x 64 tokens on CPU with the PyTorch memory op; head dim 8 and expansion 2 bring that to ~1-2 s (docs).
CPU_MEMORY_HEAD_DIM = 8
CPU_MEMORY_EXPANSION = 2


def register_subcommands(sub: argparse._SubParsersAction) -> None:
    from atlas_data.synthetic.learnability import GENERATORS
    from atlas_experiments.evaluation.synthetic_train import add_run_options

    p = sub.add_parser(
        "mqar", help="multi-query associative recall: train per model, accuracy per (len, pairs) and memory size"
    )
    _add_model_options(p, width="64")
    g = p.add_argument_group("task")
    g.add_argument("--seq-lens", default="16,32", help="sequence lengths T (default 16,32)")
    g.add_argument("--kv-pairs", default="2,4", help="kv pairs P; settings are the valid (T, P) of the product")
    g.add_argument("--settings", help="explicit TxP settings, e.g. 64x4,128x8,256x16 (replaces --seq-lens/--kv-pairs)")
    g.add_argument("--vocab-size", type=int, default=64, help="task vocabulary (Zoology: 8192; default 64)")
    g.add_argument("--num-queries", type=int, help="queries per sequence (default: every key, as Zoology)")
    g.add_argument("--power-a", type=float, default=0.01, help="power law of the query gaps (Zoology 0.01)")
    g.add_argument("--train-examples", type=int, help="train sequences per setting (default: steps x batch / settings)")
    g.add_argument(
        "--val-examples",
        type=int,
        default=0,
        help="validation sequences per setting (their own seed): the lr sweep picks on them, never on the test set",
    )
    g.add_argument(
        "--eval-every", type=int, default=0, help="with --val-examples: validation accuracy every N steps (a curve)"
    )
    g.add_argument("--test-examples", type=int, default=256, help="held-out sequences per setting (default 256)")
    t = p.add_argument_group("training")
    t.add_argument("--steps", type=int, default=1000, help="optimizer steps per run (default 1000)")
    t.add_argument("--batch-size", type=int, default=32, help="sequences per step (default 32)")
    t.add_argument("--lrs", default="3e-3", help="learning-rate sweep, best-of (default 3e-3)")
    t.add_argument("--weight-decay", type=float, default=0.1, help="AdamW weight decay (default 0.1)")
    t.add_argument(
        "--resume-dir",
        help="keep each run's snapshot and result here: a rerun skips finished runs and continues the unfinished "
        "one from its last snapshot (the numbers of an uninterrupted run)",
    )
    t.add_argument(
        "--snapshot-every", type=int, default=250, help="with --resume-dir: steps between snapshots (default 250)"
    )
    add_run_options(p, "results/eval/mqar.json")
    p.set_defaults(handler=run_mqar_command)

    p = sub.add_parser("mad", help="MAD benchmark (6 tasks): lr x wd sweep, best-of, mean over difficulty settings")
    _add_model_options(p, width="64")
    g = p.add_argument_group("task")
    g.add_argument("--tasks", default="all", help="comma-separated MAD tasks or 'all' (default)")
    g.add_argument(
        "--grid",
        default="reduced",
        choices=("baseline", "reduced", "paper"),
        help="difficulty settings: paper (mad-lab), reduced (CPU, 2 per task; default), baseline",
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
    add_run_options(p, "results/eval/mad.json")
    p.set_defaults(handler=run_mad_command)

    p = sub.add_parser("learnability", help="online memory-MLP training on the 5 learnability streams (Fig. 6)")
    g = p.add_argument_group("streams")
    g.add_argument(
        "--settings",
        default="1,2,3,4,5",
        help="1 low_rank, 2 mlp, 3 attention_mlp, 4 attention_inputs_mlp, 5 swa_mlp (numbers or names)",
    )
    g.add_argument("--dim", type=int, default=256, help="d (paper 256)")
    g.add_argument("--seq-len", type=int, default=2048, help="stream length T (default 2048)")
    g.add_argument("--rank", type=int, default=16, help="rank k of setting 1 (default 16)")
    g.add_argument("--window", type=int, default=512, help="SWA window of setting 5 (paper 512)")
    g.add_argument(
        "--generator",
        default="gaussian",
        choices=GENERATORS,
        help="how inputs and random weights are drawn: gaussian (default) or orthogonal (a second stream family)",
    )
    m = p.add_argument_group("memory")
    m.add_argument("--memories", default="2x1,2x4,3x1,3x4", help="hidden LAYERSxEXPANSION configs (Fig. 6a-d)")
    m.add_argument("--optimizer", default="adam", choices=("adam", "rmsprop", "sgd"), help="inner optimizer")
    m.add_argument("--lr", type=float, default=3e-4, help="learning rate of the online steps (default 3e-4)")
    m.add_argument("--repeats", type=int, default=1, help="streams per setting (averaged; default 1)")
    m.add_argument("--bins", type=int, default=64, help="position bins of the stored curves (default 64)")
    add_run_options(p, "results/eval/learnability.json")
    p.set_defaults(handler=run_learnability_command)


def _add_model_options(p: argparse.ArgumentParser, *, width: str) -> None:
    g = p.add_argument_group("models")
    g.add_argument(
        "--models", default=_MODELS, help=f"comma-separated presets and/or model config files (default {_MODELS})"
    )
    g.add_argument("--size", default="tiny", help="atlas_model size the presets start from (default tiny)")
    g.add_argument("--width", default=width, help=f"model width d (default {width}; MAD: 128, MQAR papers: 64-512)")
    g.add_argument("--layers", type=int, default=2, help="blocks (default 2, as MAD and MQAR)")
    g.add_argument("--heads", type=int, help="attention heads (default: the size's)")
    g.add_argument(
        "--memory-head-dim",
        type=int,
        default=CPU_MEMORY_HEAD_DIM,
        help=f"head dim of the deep memories (default {CPU_MEMORY_HEAD_DIM}, CPU-sized; 0 = the preset's)",
    )
    g.add_argument(
        "--memory-expansion",
        type=int,
        default=CPU_MEMORY_EXPANSION,
        help=f"inner-MLP expansion of the deep memories (default {CPU_MEMORY_EXPANSION}, CPU-sized; 0 = preset's 4)",
    )
    g.add_argument(
        "--match-memory",
        metavar="PRESET|FLOATS",
        help="size every arm's memory (memory heads, MLP expansion) to this preset's memory floats at the task's "
        "width, or to a float count; attention arms keep theirs (docs: eval-synthetic.md, Equal memory)",
    )


def _model_options(args: argparse.Namespace) -> dict[str, Any]:
    """The protocol fields `_add_model_options` and the shared training options set (MQAR and MAD alike)."""
    return {
        "layers": args.layers,
        "heads": args.heads,
        "memory_head_dim": args.memory_head_dim or None,  # 0: the preset's
        "memory_expansion": args.memory_expansion or None,
        "match_memory": args.match_memory,
        "steps": args.steps,
        "batch_size": args.batch_size,
    }


def _finish(result: EvalResult, args: argparse.Namespace, figures: Sequence[Path] = ()) -> int:
    from atlas_experiments.evaluation.results import finish

    # a synthetic run is named by its models verbatim (they are presets or config names, not checkpoint paths)
    return finish(result, args, figures=figures, run_name=f"{result.task}:{result.model}")


def run_mqar_command(args: argparse.Namespace) -> int:
    from atlas_experiments.devices import resolve_device
    from atlas_experiments.evaluation.mqar import MQARProtocol, plot_mqar, plot_mqar_curves, run_mqar
    from atlas_experiments.evaluation.resume import ResumeDir
    from atlas_experiments.evaluation.synthetic_train import figure_path, parse_list, parse_models, torch_threads

    if args.settings:
        settings = []
        for item in parse_list(args.settings, str, "--settings"):
            try:
                t, p = (int(v) for v in item.lower().split("x"))
            except ValueError as exc:
                raise ValueError(f"--settings: expected TxP items like 64x4, got {item!r}") from exc
            settings.append((t, p))
    else:
        q = args.num_queries
        settings = [
            (t, p)
            for t in parse_list(args.seq_lens, int, "--seq-lens")
            for p in parse_list(args.kv_pairs, int, "--kv-pairs")
            if 2 * p + 2 * (q or p) <= t
        ]
        if not settings:
            raise ValueError("--seq-lens/--kv-pairs: no valid setting (each needs 2 * pairs + 2 * queries <= T)")
    protocol = MQARProtocol(
        settings=tuple(settings),
        vocab_size=args.vocab_size,
        num_queries=args.num_queries,
        power_a=args.power_a,
        train_examples=args.train_examples,
        test_examples=args.test_examples,
        val_examples=args.val_examples,
        eval_every=args.eval_every,
        widths=tuple(parse_list(args.width, int, "--width")),
        **_model_options(args),
        lrs=tuple(parse_list(args.lrs, float, "--lrs")),
        weight_decay=args.weight_decay,
    )
    models = parse_models(args.models, args.size)
    device = resolve_device(args.device)
    resume = ResumeDir(args.resume_dir, args.snapshot_every) if args.resume_dir else None
    with torch_threads(args.threads):
        result = run_mqar(models, protocol, seed=args.seed, device=device, progress=not args.no_progress, resume=resume)
    figures = [plot_mqar(result, figure_path(args.out))]
    curves = plot_mqar_curves(result, figure_path(args.out, "_curves"))
    figures += [curves] if curves else []
    result.details["figures"] = [str(f) for f in figures]
    for row in result.details["table"]:
        print(
            f"mqar {row['model']:>18} d={row['width']:<4} acc {row['acc']:.3f} (untrained {row['acc_init']:.3f}) "
            f"lr {row['best_lr']:g} memory {row['memory_size']}"
        )
    return _finish(result, args, figures)


def run_mad_command(args: argparse.Namespace) -> int:
    from atlas_data.synthetic.mad import MAD_TASKS
    from atlas_experiments.devices import resolve_device
    from atlas_experiments.evaluation.mad import SWEEPS, MADProtocol, run_mad
    from atlas_experiments.evaluation.synthetic_train import parse_list, parse_models, torch_threads

    tasks = MAD_TASKS if args.tasks == "all" else tuple(parse_list(args.tasks, str, "--tasks"))
    widths = parse_list(args.width, int, "--width")
    if len(widths) != 1:
        raise ValueError("--width: mad takes one width")
    lrs, wds = SWEEPS[args.sweep]
    if args.lrs:
        lrs = tuple(parse_list(args.lrs, float, "--lrs"))
    if args.wds:
        wds = tuple(parse_list(args.wds, float, "--wds"))
    protocol = MADProtocol(
        tasks=tuple(tasks),
        grid=args.grid,
        lrs=tuple(lrs),
        wds=tuple(wds),
        width=widths[0],
        **_model_options(args),
        num_train_examples=args.train_examples,
        num_test_examples=args.test_examples,
    )
    models = parse_models(args.models, args.size)
    device = resolve_device(args.device)
    with torch_threads(args.threads):
        result = run_mad(models, protocol, seed=args.seed, device=device, progress=not args.no_progress)
    for row in result.details["table"]:
        cells = " ".join(f"{t}={row[t]:.3f}" for t in protocol.tasks)
        print(f"mad {row['model']:>18} average {row['average']:.3f}  {cells}")
    return _finish(result, args)


def run_learnability_command(args: argparse.Namespace) -> int:
    from atlas_data.synthetic.learnability import LearnabilityConfig
    from atlas_experiments.devices import resolve_device
    from atlas_experiments.evaluation.learnability import (
        LearnabilityProtocol,
        parse_memories,
        parse_settings,
        plot_learnability,
        run_learnability,
    )
    from atlas_experiments.evaluation.synthetic_train import figure_path, parse_list, torch_threads

    protocol = LearnabilityProtocol(
        stream=LearnabilityConfig(
            dim=args.dim, seq_len=args.seq_len, rank=args.rank, window=args.window, generator=args.generator
        ),
        settings=parse_settings(parse_list(args.settings, str, "--settings")),
        memories=parse_memories(args.memories),
        optimizer=args.optimizer,
        lr=args.lr,
        repeats=args.repeats,
        bins=args.bins,
    )
    device = resolve_device(args.device)
    with torch_threads(args.threads):
        result = run_learnability(protocol, seed=args.seed, device=device, progress=not args.no_progress)
    figure = plot_learnability(result, figure_path(args.out))
    result.details["figures"] = [str(figure)]
    for mlabel, per_setting in result.details["curves"].items():
        cells = " ".join(f"{s}={c['final']:.3f}" for s, c in per_setting.items())
        print(f"learnability {mlabel}: final loss {cells}")
    return _finish(result, args, [figure])
