"""`atlas eval ppl | lm-eval | niah | babilong`: evaluations of a pretrained checkpoint (or an untrained preset).

Every command takes the model as `--checkpoint <dir> [--data <prepared dir>]` or `--preset <name> --size <size>
--data <prepared dir>`, writes a results JSON (`--out`) that lists its deviations from the paper's protocol, and
logs the metrics to MLflow (`--no-track` to skip). See packages/atlas-experiments/docs/eval-lm.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path
from typing import Any

log = logging.getLogger("atlas.eval")

PAPER_NIAH_LENGTHS = (2048, 4096, 8192, 16384)
DEFAULT_DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)
BABILONG_LENGTHS = (0, 1024, 2048, 4096, 8192, 16384)
HAYSTACK_TOKENS = 2_000_000  # at most this much of a split is decoded for haystacks / offline tasks


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


# --------------------------------------------------------------------------------------------------- shared bits


def _scale_deviations(loaded) -> list[str]:
    out = []
    if not loaded.trained:
        out.append(f"untrained model: {loaded.name} with random weights (seed), a pipeline check, not a result")
    n = loaded.info.get("parameters", 0)
    if n < 300e6:
        out.append(f"model has {n / 1e6:.2f}M parameters (paper: 340M / 760M / 1.3B)")
    return out


def _corpus_description(data_dir: Path) -> str:
    try:
        config = json.loads((data_dir / "manifest.json").read_text())["config"]["source"]
    except (OSError, KeyError, json.JSONDecodeError):
        return str(data_dir)
    kind = config.get("kind")
    if kind == "embedded":
        return f"embedded public-domain bible text ({'+'.join(config.get('versions', []))})"
    if kind == "hf":
        return f"hub dataset {config.get('path')}"
    return f"local corpus {config.get('paths')}"


def _haystack_texts(loaded, which: str, longest: int) -> tuple[list[str], str]:
    from atlas_data.synthetic.niah import embedded_texts, load_split_texts

    if which == "embedded":
        return embedded_texts(("kjv", "asv")), "embedded corpus (KJV + ASV chapters)"
    # enough text for varied haystacks without decoding a cluster-sized split
    texts = load_split_texts(loaded.data_dir, which, max_tokens=max(HAYSTACK_TOKENS, 16 * longest))
    return texts, f"{which} split of {_corpus_description(loaded.data_dir)}"


def _parse_scorings(text: str) -> list[str]:
    from atlas_experiments.evaluation.needle import SCORINGS

    scorings = [s.strip() for s in text.split(",") if s.strip()]
    if not scorings or any(s not in SCORINGS for s in scorings):
        raise ValueError(f"--scoring {text!r}: choose generate, rank or generate,rank")
    return scorings


def _sibling(out: str, suffix: str) -> Path:
    path = Path(out)
    return path.with_name(path.stem + suffix)


def _write_records(path: Path, samples, records) -> Path:
    with open(path, "w", encoding="utf-8") as fh:
        for s, r in zip(samples, records):
            fh.write(json.dumps({**s.to_dict(), **r}, ensure_ascii=False) + "\n")
    return path


# ------------------------------------------------------------------------------------------------------- ppl


def run_ppl(args: argparse.Namespace) -> int:
    from atlas_experiments.evaluation.model_io import finish, model_from_args, parse_ints
    from atlas_experiments.evaluation.ppl import evaluate_ppl
    from atlas_experiments.evaluation.results import EvalResult

    loaded = model_from_args(args)
    if args.lengths:
        lengths = parse_ints(args.lengths, "--lengths")
    elif loaded.train_seq_len:
        lengths = [loaded.train_seq_len * k for k in (1, 2, 4)]
    else:
        raise ValueError("--lengths is needed: the training context is unknown (no run config; or give --train-len)")
    t0 = time.perf_counter()
    results = evaluate_ppl(
        loaded.model,
        loaded.data_dir,
        lengths,
        split=args.split,
        batch_size=args.batch_size,
        max_tokens=args.max_tokens,
        train_len=loaded.train_seq_len,
        device=loaded.device,
        progress=not args.no_progress,
    )
    metrics: dict[str, float] = {}
    for r in results:
        metrics.update(r.metrics())
    corpus = _corpus_description(loaded.data_dir)
    deviations = _scale_deviations(loaded)
    deviations.append(f"perplexity on the {args.split} split of {corpus}, not FineWeb(-Edu) held-out data")
    if loaded.train_seq_len and loaded.train_seq_len != 4096:
        deviations.append(f"training context {loaded.train_seq_len} tokens (paper: 4096)")
    if args.max_tokens:
        deviations.append(f"at most {args.max_tokens} tokens scored per length")
    if args.split != "validation":
        deviations.append(f"scored on the {args.split} split, which is not held out")
    result = EvalResult(
        task="ppl",
        model=loaded.name,
        metrics=metrics,
        protocol={
            "split": args.split,
            "lengths": lengths,
            "train_seq_len": loaded.train_seq_len,
            "batch_size": args.batch_size,
            "max_tokens": args.max_tokens,
            "windows": "non-overlapping, stream order, each from an empty state",
            "corpus": corpus,
        },
        deviations=deviations,
        details={
            "model": loaded.describe(),
            "per_length": [r.__dict__ for r in results],
            "seconds": time.perf_counter() - t0,
        },
    )
    for r in results:
        extra = f", beyond {loaded.train_seq_len}: {r.ppl_beyond_train:.3f}" if r.ppl_beyond_train else ""
        print(f"L={r.length}: ppl {r.ppl:.3f} over {r.tokens} tokens{extra}")
    return finish(result, args)


# --------------------------------------------------------------------------------------------------- lm-eval


def run_lm_eval(args: argparse.Namespace) -> int:
    from atlas_data.synthetic.niah import load_split_texts
    from atlas_experiments.evaluation import lm_eval_run
    from atlas_experiments.evaluation.lm_eval_tasks import (
        PAPER_TASKS,
        RECALL_MISSING,
        RECALL_TASKS,
        HubUnavailableError,
        check_hub_access,
        is_offline_task,
        resolve_tasks,
        validate_tasks,
        write_offline_tasks,
    )
    from atlas_experiments.evaluation.model_io import finish, model_from_args
    from atlas_experiments.evaluation.results import EvalResult

    tasks = resolve_tasks(args.tasks)
    check_hub_access(tasks)  # before loading anything: offline, fail in a second, not after minutes of retries
    loaded = model_from_args(args)
    offline = [t for t in tasks if is_offline_task(t)]
    task_dir = Path(args.task_dir) if args.task_dir else _sibling(args.out, "_tasks")
    doc_counts: dict[str, int] = {}
    if offline:
        written = write_offline_tasks(
            task_dir,
            load_split_texts(loaded.data_dir, "validation", max_tokens=HAYSTACK_TOKENS),
            seed=args.seed,
            max_docs=args.max_docs,
        )
        doc_counts = validate_tasks(task_dir, offline)
        log.info("offline tasks in %s: %s", task_dir, written)
    max_length = args.max_length or loaded.train_seq_len
    limit: int | float | None = args.limit
    if limit is not None and limit >= 1:
        limit = int(limit)
    t0 = time.perf_counter()
    try:
        raw = lm_eval_run.run_lm_eval(
            loaded,
            tasks,
            task_dir=task_dir if offline else None,
            batch_size=args.batch_size,
            limit=limit,
            max_length=max_length,
            seed=args.seed,
            bootstrap_iters=args.bootstrap_iters,
        )
    except ConnectionError as exc:  # a hub task outside HUB_DATASETS, offline or unreachable
        raise HubUnavailableError(f"lm-eval could not fetch a dataset: {exc}; run with hub access") from None
    seconds = time.perf_counter() - t0
    flat = lm_eval_run.flatten_results(raw)
    metrics = {**lm_eval_run.summarize(flat), **flat}

    deviations = _scale_deviations(loaded)
    if offline:
        corpus = _corpus_description(loaded.data_dir)
        deviations.append(
            f"offline stand-in tasks ({', '.join(offline)}) built from the validation split of {corpus}: "
            "last-word prediction (LAMBADA-style), 4-way cloze with random distractor words, rolling perplexity; "
            "not the paper's benchmarks"
        )
    if limit is not None:
        deviations.append(f"lm-eval --limit {limit}: a subset of every task's documents")
    if max_length and max_length != 4096:
        deviations.append(f"lm-eval max_length {max_length} (paper models: 4096-token training context)")
    recall_asked = [col for col, (task, _) in RECALL_TASKS.items() if task in tasks]
    if recall_asked:
        deviations.append(
            "in-context recall: "
            + "; ".join(f"{col}: {why}" for col, why in RECALL_MISSING.items())
            + "; DROP is lm-eval's standard generative DROP scored by f1 (Based: cloze-style, contains)"
        )
    if recall_asked and args.batch_size > 1:
        deviations.append(
            f"generative tasks batched ({args.batch_size}) with left padding: exact for memory models only when the "
            "pad count is a multiple of the chunk size (use --batch-size 1 for exact results)"
        )
    missing_paper = [t for t in PAPER_TASKS if t in tasks and not any(k.startswith(f"lm_eval/{t}/") for k in flat)]
    if missing_paper:
        deviations.append(f"no result for {', '.join(missing_paper)}")
    result = EvalResult(
        task="lm-eval",
        model=loaded.name,
        metrics=metrics,
        protocol={
            "tasks": tasks,
            "num_fewshot": 0,
            "backend": "hf",
            "batch_size": args.batch_size,
            "limit": limit,
            "max_length": max_length,
            "task_dir": str(task_dir) if offline else None,
            "metrics": "paper/*: Table 2 columns (acc x 100; hellaswag, arc_challenge acc_norm; wiki word ppl)",
        },
        deviations=deviations,
        details={
            "model": loaded.describe(),
            "offline_docs": doc_counts,
            "results": json.loads(json.dumps(raw.get("results", {}), default=str)),
            "n_samples": json.loads(json.dumps(raw.get("n-samples", {}), default=str)),
            "versions": json.loads(json.dumps(raw.get("versions", {}), default=str)),
            "lm_eval_version": _version("lm_eval"),
            "seconds": seconds,
        },
    )
    for key, value in sorted(lm_eval_run.summarize(flat).items()):
        print(f"{key}: {value:.4f}")
    return finish(result, args)


def _version(pkg: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


# ------------------------------------------------------------------------------------------------------ niah


def run_niah(args: argparse.Namespace) -> int:
    from atlas_data.synthetic import niah
    from atlas_experiments.evaluation.model_io import finish, model_from_args, parse_floats, parse_ints
    from atlas_experiments.evaluation.needle import niah_metrics, plot_niah_heatmap, score_samples
    from atlas_experiments.evaluation.results import EvalResult

    specs = [niah.resolve_task(t.strip()) for t in args.tasks.split(",") if t.strip()]
    lengths = parse_ints(args.lengths, "--lengths")
    depths = parse_floats(args.depths, "--depths")
    if any(not 0 <= d <= 1 for d in depths):
        raise ValueError(f"--depths {args.depths!r}: depths are fractions in [0, 1]")
    if args.samples < 1:
        raise ValueError("--samples must be >= 1")
    scorings = _parse_scorings(args.scoring)
    loaded = model_from_args(args)
    tok = niah.TextTokenizer(loaded.tokenizer)
    texts, haystack_desc = (
        ([], "") if all(s.haystack == "repeat" for s in specs) else _haystack_texts(loaded, args.haystack, max(lengths))
    )
    essay = niah.Haystack.from_texts(texts, tok) if texts else None

    t0 = time.perf_counter()
    samples = []
    for spec in specs:
        samples += niah.generate_niah(
            spec,
            tok,
            lengths=lengths,
            depths=depths,
            samples_per_cell=args.samples,
            seed=args.seed,
            haystack=essay,
            tokens_to_generate=args.max_new_tokens,
        )
    gen_seconds = time.perf_counter() - t0
    records = score_samples(
        loaded.model,
        loaded.tokenizer,
        samples,
        scorings=scorings,
        device=loaded.device,
        judge=lambda s, text: niah.string_match(text, s.answer),
        max_new_tokens=args.max_new_tokens,
        progress=not args.no_progress,
        desc="S-NIAH",
    )
    metrics = niah_metrics(samples, records, scorings)
    task_names = [s.name for s in specs]
    figures = {}
    for scoring in scorings:
        prefix = "acc" if scoring == "generate" else "rank_acc"
        figures[scoring] = str(
            plot_niah_heatmap(
                metrics,
                task_names,
                lengths,
                depths,
                _sibling(args.out, f"_{prefix}_heatmap.png"),
                prefix=prefix,
                title=f"S-NIAH accuracy (%), {scoring}, {loaded.short_name}",
            )
        )
    samples_file = (
        str(_write_records(_sibling(args.out, "_samples.jsonl"), samples, records)) if args.save_samples else None
    )

    deviations = _scale_deviations(loaded)
    if essay is not None:
        deviations.append(f"essay haystack = sentences of the {haystack_desc}, not Paul Graham essays")
    deviations.append("needle keys from a built-in adjective-noun list (RULER: wonderwords)")
    if tuple(lengths) != PAPER_NIAH_LENGTHS:
        deviations.append(f"context lengths {lengths} (paper: 2K/4K/8K/16K; S-NIAH-W up to 8K)")
    deviations.append(
        f"fixed depth grid {depths} x {args.samples} samples per cell "
        "(RULER: 500 samples per length at 40 random depths)"
    )
    ttg = {s.name: (args.max_new_tokens or s.tokens_to_generate) for s in specs}
    deviations.append(f"generates at most {ttg} new tokens and reserves them in the length budget (RULER: 128)")
    if "rank" in scorings:
        deviations.append("rank_acc: answer vs 9 same-type distractors by log-likelihood (not RULER's protocol)")
    if "generate" not in scorings:
        deviations.append("no generation: only rank scoring (the paper generates)")
    wrapped = sum(s.haystack_wrapped for s in samples if s.haystack == "essay")
    if wrapped:
        deviations.append(f"{wrapped} essay samples reuse haystack text (the haystack is shorter than the context)")
    if args.haystack == "train":
        deviations.append("haystack text from the training split (seen in training)")

    result = EvalResult(
        task="niah",
        model=loaded.name,
        metrics=metrics,
        protocol={
            "tasks": {s.name: s.paper_name for s in specs},
            "lengths": lengths,
            "depths": depths,
            "samples_per_cell": args.samples,
            "scoring": scorings,
            "haystack": haystack_desc or "repeat filler only",
            "tokens_to_generate": ttg,
            "length_rule": "prompt tokens + tokens to generate <= length",
            "seed": args.seed,
        },
        deviations=deviations,
        details=_generation_details(loaded, figures, samples_file, samples, records, gen_seconds),
    )
    _print_table(metrics, "acc" if "generate" in scorings else "rank_acc", task_names, lengths)
    return finish(result, args, artifact=Path(next(iter(figures.values()))))


def _generation_details(loaded, figures, samples_file, samples, records, gen_seconds: float) -> dict[str, Any]:
    """The `details` of a generation-scored evaluation (S-NIAH, BABILong): model, figures, per-cell costs."""
    return {
        "model": loaded.describe(),
        "figures": figures,
        "samples_file": samples_file,
        "cells": _cell_details(samples, records),
        "generation_seconds": gen_seconds,
        "scoring_seconds": sum(r["seconds"] for r in records),
    }


def _cell_details(samples, records) -> dict[str, Any]:
    """Per (task, length): mean prompt tokens, mean |depth_actual - depth|, seconds per sample."""
    cells: dict[str, dict[str, list[float]]] = {}
    for s, r in zip(samples, records):
        c = cells.setdefault(f"{s.task}/len={s.length}", {"prompt_tokens": [], "depth_error": [], "seconds": []})
        c["prompt_tokens"].append(r["prompt_tokens"])
        c["seconds"].append(r["seconds"])
        if hasattr(s, "depth_actual"):
            c["depth_error"].append(abs(s.depth_actual - s.depth))
    return {
        k: {name: (sum(v) / len(v) if v else None) for name, v in c.items()} | {"n": len(c["seconds"])}
        for k, c in cells.items()
    }


def _print_table(metrics: dict[str, float], prefix: str, tasks, lengths) -> None:
    print(f"{prefix:>16} " + " ".join(f"{n:>8}" for n in lengths) + "      all")
    for task in tasks:
        row = [metrics.get(f"{prefix}/{task}/len={n}") for n in lengths]
        cells = " ".join(f"{100 * v:8.1f}" if v is not None else f"{'-':>8}" for v in row)
        print(f"{task:>16} {cells} {100 * metrics.get(f'{prefix}/{task}', float('nan')):8.1f}")


# -------------------------------------------------------------------------------------------------- babilong


def run_babilong(args: argparse.Namespace) -> int:
    from atlas_data.synthetic import babilong, niah
    from atlas_experiments.evaluation.babilong_eval import babilong_judge, babilong_metrics, plot_babilong
    from atlas_experiments.evaluation.model_io import finish, model_from_args, parse_ints
    from atlas_experiments.evaluation.needle import score_samples
    from atlas_experiments.evaluation.results import EvalResult

    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    for t in tasks:
        if t not in babilong.BABI_TASKS:
            raise ValueError(f"--tasks: unknown bAbI task {t!r}; choose from {', '.join(babilong.BABI_TASKS)}")
    lengths = parse_ints(args.lengths, "--lengths")
    if args.samples < 1:
        raise ValueError("--samples must be >= 1")
    scorings = _parse_scorings(args.scoring)
    loaded = model_from_args(args)
    tok = niah.TextTokenizer(loaded.tokenizer)
    haystack, haystack_desc = None, "none (facts only)"
    if any(n > 0 for n in lengths):
        texts, haystack_desc = _haystack_texts(loaded, args.haystack, max(lengths))
        haystack = niah.Haystack.from_texts(texts, tok)
    ttg = args.max_new_tokens or 8

    t0 = time.perf_counter()
    samples = []
    for task in tasks:
        samples += babilong.generate_babilong(
            task,
            tok,
            lengths=lengths,
            samples=args.samples,
            seed=args.seed,
            haystack=haystack,
            n_facts=args.n_facts,
            tokens_to_generate=ttg,
        )
    gen_seconds = time.perf_counter() - t0
    records = score_samples(
        loaded.model,
        loaded.tokenizer,
        samples,
        scorings=scorings,
        device=loaded.device,
        judge=babilong_judge,
        max_new_tokens=ttg,
        progress=not args.no_progress,
        desc="BABILong",
    )
    metrics = babilong_metrics(samples, records, scorings)
    figures = {}
    for scoring in scorings:
        prefix = "acc" if scoring == "generate" else "rank_acc"
        figures[scoring] = str(
            plot_babilong(metrics, tasks, lengths, _sibling(args.out, f"_{prefix}.png"), prefix, loaded.short_name)
        )
    samples_file = (
        str(_write_records(_sibling(args.out, "_samples.jsonl"), samples, records)) if args.save_samples else None
    )

    deviations = _scale_deviations(loaded)
    deviations += [
        "no fine-tuning on BABILong (the paper fine-tunes Atlas (MAC) following Kuratov et al. 2024)",
        "stories generated from bAbI-like templates (qa1-qa5), not the bAbI dataset",
        f"background text = sentences of the {haystack_desc}, not PG19 books",
        "plain prompt '<context>\\nQuestion: ...\\nAnswer:' without BABILong's instructions or few-shot examples",
        f"context lengths {lengths} (paper: up to 10M tokens)",
    ]
    if "rank" in scorings:
        deviations.append("rank_acc: the task's labels ranked by log-likelihood (not BABILong's protocol)")
    wrapped = sum(s.haystack_wrapped for s in samples)
    if wrapped:
        deviations.append(f"{wrapped} samples reuse background text (it is shorter than the context)")
    if args.haystack == "train":
        deviations.append("background text from the training split (seen in training)")
    result = EvalResult(
        task="babilong",
        model=loaded.name,
        metrics=metrics,
        protocol={
            "tasks": tasks,
            "lengths": lengths,
            "samples": args.samples,
            "n_facts": args.n_facts or {t: babilong.DEFAULT_FACTS[t] for t in tasks},
            "scoring": scorings,
            "tokens_to_generate": ttg,
            "judge": "BABILong compare_answers on the first generated line",
            "haystack": haystack_desc,
            "seed": args.seed,
        },
        deviations=deviations,
        details=_generation_details(loaded, figures, samples_file, samples, records, gen_seconds),
    )
    _print_table(metrics, "acc" if "generate" in scorings else "rank_acc", tasks, lengths)
    return finish(result, args, artifact=Path(next(iter(figures.values()))))
