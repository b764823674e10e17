"""`atlas eval mqar`: multi-query associative recall (Zoology's MQAR, the paper's Fig. 7): trains each model on
the task per (width, lr), scores accuracy per (length, kv pairs) setting and records each model's memory size
(protocol: `evaluation.mqar`, shared training: `evaluation.synthetic_train`); its report section is Fig. 7 as a
table and grouped bars."""

from __future__ import annotations

import argparse
import json
import re

from atlas_experiments.evaluation.tasks.spec import PER_PRESET, EvalTask, ReportContext, RunsByModel
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
    g.add_argument("--seq-lens", default="16,32", help="sequence lengths T (default 16,32)")
    g.add_argument("--kv-pairs", default="2,4", help="kv pairs P; settings are the valid (T, P) of the product")
    g.add_argument("--settings", help="explicit TxP settings, e.g. 64x4,128x8,256x16 (replaces --seq-lens/--kv-pairs)")
    g.add_argument(
        "--test-settings",
        help="TxP settings scored on held-out sequences only, never trained on (e.g. 256x8: extrapolation to 4x "
        "the longest trained length)",
    )
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
    add_resume_options(t)
    add_run_options(p, "results/eval/mqar.json")


def protocol_from_args(args: argparse.Namespace):
    """The `MQARProtocol` that `atlas eval mqar` runs for its parsed options (also the study's shared-run check)."""
    from atlas_experiments.evaluation.mqar import MQARProtocol
    from atlas_experiments.evaluation.synthetic_train import parse_list

    if args.settings:
        settings = parse_settings(args.settings, "--settings")
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
    return MQARProtocol(
        settings=tuple(settings),
        vocab_size=args.vocab_size,
        num_queries=args.num_queries,
        power_a=args.power_a,
        train_examples=args.train_examples,
        test_examples=args.test_examples,
        val_examples=args.val_examples,
        eval_every=args.eval_every,
        test_settings=parse_settings(args.test_settings, "--test-settings") if args.test_settings else (),
        widths=tuple(parse_list(args.width, int, "--width")),
        **model_options(args),
        lrs=tuple(parse_list(args.lrs, float, "--lrs")),
        weight_decay=args.weight_decay,
    )


def run(args: argparse.Namespace) -> int:
    from atlas_experiments.devices import resolve_device
    from atlas_experiments.evaluation.mqar import plot_mqar, plot_mqar_curves, run_mqar
    from atlas_experiments.evaluation.synthetic_train import figure_path, parse_models, torch_threads

    protocol = protocol_from_args(args)
    models = parse_models(args.models, args.size)
    device = resolve_device(args.device)
    resume = resume_dir(args)
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
    return finish_synthetic(result, args, figures)


def parse_settings(text: str, option: str) -> tuple[tuple[int, int], ...]:
    """'64x4,128x8' -> ((64, 4), (128, 8)); `option` names the flag in the error."""
    from atlas_experiments.evaluation.synthetic_train import parse_pairs

    return parse_pairs(text, option, "TxP items like 64x4")


MQAR_KEY = re.compile(r"(acc|acc_init)/([^/]+)/d_(\d+)(?:/len_(\d+)/pairs_(\d+))?")
MQAR_MEMORY_KEY = re.compile(r"memory_size/([^/]+)/d_(\d+)/len_(\d+)")


def mqar_rows(by_model: dict[str, dict[str, dict]]) -> dict[str, dict[str, float]]:
    """'<model> d=<width>' -> {'T<len> P<pairs>': acc, 'mean': acc, 'untrained': acc, 'memory': floats} from
    `acc/<m>/d_<w>[/len_<T>/pairs_<P>]` and `memory_size/<m>/d_<w>/len_<T>` (the memory at the longest T; one row
    per model width; the paper plots accuracy against memory size). A setting the run's protocol lists under
    `test_settings` (scored, never trained on; the tracked param `protocol.test_settings`) is the column
    'T<len> P<pairs> (test only)'."""
    rows: dict[str, dict[str, float]] = {}
    longest: dict[str, int] = {}
    for runs in by_model.values():
        run = runs.get("mqar", {})
        test_only = {tuple(s) for s in json.loads(run.get("params", {}).get("protocol.test_settings", "[]"))}
        for k, v in run.get("metrics", {}).items():
            mem = MQAR_MEMORY_KEY.fullmatch(k)
            if mem:
                name, t = f"{mem.group(1)} d={mem.group(2)}", int(mem.group(3))
                if t >= longest.get(name, 0):
                    longest[name] = t
                    rows.setdefault(name, {})["memory"] = v
                continue
            m = MQAR_KEY.fullmatch(k)
            if not m:
                continue
            kind, model, width, length, pairs = m.groups()
            row = rows.setdefault(f"{model} d={width}", {})
            if length is None:
                row["mean" if kind == "acc" else "untrained"] = v
            elif kind == "acc":
                marked = " (test only)" if (int(length), int(pairs)) in test_only else ""
                row[f"T{length} P{pairs}{marked}"] = v
    return rows


def mqar_section(by_model: dict[str, dict[str, dict]]) -> str:
    """Fig. 7 as a table: accuracy per (sequence length T, kv pairs P) setting, the mean, and the untrained model."""
    from atlas_experiments.reporting.eval_tables import drop_empty, numeric_suffix
    from atlas_experiments.reporting.markdown import table

    rows = mqar_rows(by_model)
    if not rows:
        return ""
    cols = sorted({c for r in rows.values() for c in r} - {"mean", "untrained", "memory"}, key=numeric_suffix)
    header = ["model", *cols, "mean", "untrained", "memory floats (longest T)"]
    body = [
        [name, *[r.get(c) for c in [*cols, "mean", "untrained"]], None if "memory" not in r else int(r["memory"])]
        for name, r in sorted(rows.items())
    ]
    header, body = drop_empty(header, body)
    out = "\n## MQAR (Fig. 7 layout, accuracy per setting T x kv pairs P)\n\n" + table(header, body)
    if any(c.endswith("(test only)") for c in cols):
        out += (
            "\n\nSettings marked (test only) were scored on held-out sequences and never trained on; the mean is "
            "over the trained settings.\n"
        )
    return out


def report(by_model: RunsByModel, ctx: ReportContext) -> str:
    from atlas_experiments.reporting.figures import grouped_bars

    out = mqar_section(by_model)
    bars = {
        n: {c: v for c, v in r.items() if c not in ("mean", "untrained", "memory")}
        for n, r in mqar_rows(by_model).items()
    }
    if grouped_bars("MQAR", "accuracy", bars, ctx.fig_dir / "mqar.png"):
        out += "\n![MQAR accuracy per setting](figures/mqar.png)\n"
    return out


TASK = EvalTask(
    name="mqar",
    command="mqar",
    kind=PER_PRESET,
    help="multi-query associative recall: train per model, accuracy per (len, pairs) and memory size",
    add_options=add_options,
    run=run,
    report=report,
)
