"""The long-context protocols of `atlas eval`: S-NIAH (RULER's niah_single_1/2/3: accuracy per length x depth and
a heatmap) and BABILong-style bAbI qa1-qa5 hidden in corpus text (accuracy per length). Each generates the samples
(`atlas_data.synthetic`), scores them on one loaded model and builds the `EvalResult`; the command writes and
tracks it."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from atlas_experiments.evaluation.protocol import (
    generation_details,
    haystack_texts,
    parse_scorings,
    print_table,
    scale_deviations,
    sibling,
    write_records,
)

if TYPE_CHECKING:
    from atlas_experiments.evaluation.results import EvalResult

PAPER_NIAH_LENGTHS = (2048, 4096, 8192, 16384)
DEFAULT_DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)
BABILONG_LENGTHS = (0, 1024, 2048, 4096, 8192, 16384)


@dataclass(frozen=True)
class LongContextRun:
    """The run settings S-NIAH and BABILong take alike: scorings ("generate", "rank"), the haystack source
    ("validation", "train" or "embedded"), tokens to generate (None: per task), the sample seed, the result path
    (figures and samples go next to it), whether to write every sample, and progress bars."""

    scorings: tuple[str, ...]
    haystack: str
    max_new_tokens: int | None
    seed: int
    out: str
    save_samples: bool = False
    progress: bool = True


def add_long_context_options(p, *, lengths: tuple[int, ...], samples: int, max_new: int | None) -> None:
    """The options S-NIAH and BABILong share (`atlas eval niah | babilong`), with each task's defaults."""
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


def long_context_run(args) -> LongContextRun:
    """The run settings from `add_long_context_options` and the output options, checked before the model loads."""
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


# ------------------------------------------------------------------------------------------------------ niah


def run_niah_protocol(
    loaded,
    specs,
    *,
    lengths: list[int],
    depths: list[float],
    samples_per_cell: int,
    run: LongContextRun,
) -> tuple[EvalResult, Path]:
    """S-NIAH on the tasks `specs` (`niah.NiahTask`); figures and samples go next to `run.out`. Prints the accuracy
    table; returns the result and the first figure (the run's artifact)."""
    from atlas_data.synthetic import niah
    from atlas_experiments.evaluation.needle import niah_metrics, plot_niah_heatmap

    tok = niah.TextTokenizer(loaded.tokenizer)
    texts, haystack_desc = (
        ([], "") if all(s.haystack == "repeat" for s in specs) else haystack_texts(loaded, run.haystack, max(lengths))
    )
    essay = niah.Haystack.from_texts(texts, tok) if texts else None

    samples, gen_seconds = _generate_all(
        niah.generate_niah,
        specs,
        tok,
        lengths=lengths,
        depths=depths,
        samples_per_cell=samples_per_cell,
        seed=run.seed,
        haystack=essay,
        tokens_to_generate=run.max_new_tokens,
    )

    deviations = scale_deviations(loaded)
    if essay is not None:
        deviations.append(f"essay haystack = sentences of the {haystack_desc}, not Paul Graham essays")
    deviations.append("needle keys from a built-in adjective-noun list (RULER: wonderwords)")
    if tuple(lengths) != PAPER_NIAH_LENGTHS:
        deviations.append(f"context lengths {lengths} (paper: 2K/4K/8K/16K; S-NIAH-W up to 8K)")
    deviations.append(
        f"fixed depth grid {depths} x {samples_per_cell} samples per cell "
        "(RULER: 500 samples per length at 40 random depths)"
    )
    ttg = {s.name: (run.max_new_tokens or s.tokens_to_generate) for s in specs}
    deviations.append(f"generates at most {ttg} new tokens and reserves them in the length budget (RULER: 128)")
    if "rank" in run.scorings:
        deviations.append("rank_acc: answer vs 9 same-type distractors by log-likelihood (not RULER's protocol)")
    if "generate" not in run.scorings:
        deviations.append("no generation: only rank scoring (the paper generates)")
    wrapped = sum(s.haystack_wrapped for s in samples if s.haystack == "essay")
    if wrapped:
        deviations.append(f"{wrapped} essay samples reuse haystack text (the haystack is shorter than the context)")
    if run.haystack == "train":
        deviations.append("haystack text from the training split (seen in training)")

    protocol = {
        "tasks": {s.name: s.paper_name for s in specs},
        "lengths": lengths,
        "depths": depths,
        "samples_per_cell": samples_per_cell,
        "scoring": list(run.scorings),
        "haystack": haystack_desc or "repeat filler only",
        "tokens_to_generate": ttg,
        "length_rule": "prompt tokens + tokens to generate <= length",
        "seed": run.seed,
    }
    task_names = [s.name for s in specs]

    def plot(metrics: dict[str, float], prefix: str, scoring: str) -> Path:
        title = f"S-NIAH accuracy (%), {scoring}, {loaded.short_name}"
        heatmap = sibling(run.out, f"_{prefix}_heatmap.png")
        return plot_niah_heatmap(metrics, task_names, lengths, depths, heatmap, prefix=prefix, title=title)

    return _score_and_report(
        loaded,
        samples,
        gen_seconds,
        task="niah",
        judge=lambda s, text: niah.string_match(text, s.answer),
        max_new_tokens=run.max_new_tokens,
        metrics_of=niah_metrics,
        plot=plot,
        protocol=protocol,
        deviations=deviations,
        table=(task_names, lengths),
        run=run,
        desc="S-NIAH",
    )


# -------------------------------------------------------------------------------------------------- babilong


def run_babilong_protocol(
    loaded,
    tasks: list[str],
    *,
    lengths: list[int],
    samples_per_length: int,
    n_facts: int | None,
    run: LongContextRun,
) -> tuple[EvalResult, Path]:
    """BABILong-style QA on the bAbI `tasks`; figures and samples go next to `run.out`. Prints the accuracy table;
    returns the result and the first figure (the run's artifact)."""
    from atlas_data.synthetic import babilong, niah
    from atlas_experiments.evaluation.babilong_eval import babilong_judge, babilong_metrics, plot_babilong

    tok = niah.TextTokenizer(loaded.tokenizer)
    background, haystack_desc = None, "none (facts only)"
    if any(n > 0 for n in lengths):
        texts, haystack_desc = haystack_texts(loaded, run.haystack, max(lengths))
        background = niah.Haystack.from_texts(texts, tok)
    ttg = run.max_new_tokens or 8

    samples, gen_seconds = _generate_all(
        babilong.generate_babilong,
        tasks,
        tok,
        lengths=lengths,
        samples=samples_per_length,
        seed=run.seed,
        haystack=background,
        n_facts=n_facts,
        tokens_to_generate=ttg,
    )

    deviations = scale_deviations(loaded)
    deviations += [
        "no fine-tuning on BABILong (the paper fine-tunes Atlas (MAC) following Kuratov et al. 2024)",
        "stories generated from bAbI-like templates (qa1-qa5), not the bAbI dataset",
        f"background text = sentences of the {haystack_desc}, not PG19 books",
        "plain prompt '<context>\\nQuestion: ...\\nAnswer:' without BABILong's instructions or few-shot examples",
        f"context lengths {lengths} (paper: up to 10M tokens)",
    ]
    if "rank" in run.scorings:
        deviations.append("rank_acc: the task's labels ranked by log-likelihood (not BABILong's protocol)")
    wrapped = sum(s.haystack_wrapped for s in samples)
    if wrapped:
        deviations.append(f"{wrapped} samples reuse background text (it is shorter than the context)")
    if run.haystack == "train":
        deviations.append("background text from the training split (seen in training)")
    protocol = {
        "tasks": tasks,
        "lengths": lengths,
        "samples": samples_per_length,
        "n_facts": n_facts or {t: babilong.DEFAULT_FACTS[t] for t in tasks},
        "scoring": list(run.scorings),
        "tokens_to_generate": ttg,
        "judge": "BABILong compare_answers on the first generated line",
        "haystack": haystack_desc,
        "seed": run.seed,
    }

    def plot(metrics: dict[str, float], prefix: str, scoring: str) -> Path:
        return plot_babilong(metrics, tasks, lengths, sibling(run.out, f"_{prefix}.png"), prefix, loaded.short_name)

    return _score_and_report(
        loaded,
        samples,
        gen_seconds,
        task="babilong",
        judge=babilong_judge,
        max_new_tokens=ttg,
        metrics_of=babilong_metrics,
        plot=plot,
        protocol=protocol,
        deviations=deviations,
        table=(tasks, lengths),
        run=run,
        desc="BABILong",
    )


# ---------------------------------------------------------------------------------------------------- shared


def _generate_all(generate: Callable[..., list], items: Sequence, tok, **kwargs) -> tuple[list, float]:
    """The samples `generate(item, tok, **kwargs)` makes for every item, in order, and the seconds they took."""
    t0 = time.perf_counter()
    samples = []
    for item in items:
        samples += generate(item, tok, **kwargs)
    return samples, time.perf_counter() - t0


def _score_and_report(
    loaded,
    samples: list,
    gen_seconds: float,
    *,
    task: str,
    judge: Callable[[Any, str], bool],
    max_new_tokens: int | None,
    metrics_of: Callable[[list, list, list[str]], dict[str, float]],
    plot: Callable[[dict[str, float], str, str], Path],
    protocol: dict[str, Any],
    deviations: list[str],
    table: tuple[list[str], list[int]],
    run: LongContextRun,
    desc: str,
) -> tuple[EvalResult, Path]:
    """Score the generated `samples` on the loaded model, draw one figure per scoring (`plot(metrics, prefix,
    scoring)`), write the samples file if asked and build the result; prints the accuracy table of `table`
    (tasks, lengths) and returns the result and the first figure (the run's artifact)."""
    from atlas_experiments.evaluation.needle import metric_prefix, score_samples
    from atlas_experiments.evaluation.results import EvalResult

    scorings, out = list(run.scorings), run.out
    records = score_samples(
        loaded.model,
        loaded.tokenizer,
        samples,
        scorings=scorings,
        device=loaded.device,
        judge=judge,
        max_new_tokens=max_new_tokens,
        progress=run.progress,
        desc=desc,
    )
    metrics = metrics_of(samples, records, scorings)
    figures = {scoring: str(plot(metrics, metric_prefix(scoring), scoring)) for scoring in scorings}
    samples_file = str(write_records(sibling(out, "_samples.jsonl"), samples, records)) if run.save_samples else None
    result = EvalResult(
        task=task,
        model=loaded.name,
        metrics=metrics,
        protocol=protocol,
        deviations=deviations,
        details=generation_details(loaded, figures, samples_file, samples, records, gen_seconds),
    )
    print_table(metrics, "acc" if "generate" in scorings else "rank_acc", *table)
    return result, Path(next(iter(figures.values())))
