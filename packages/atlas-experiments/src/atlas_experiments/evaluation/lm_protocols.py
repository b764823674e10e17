"""The language-modelling protocols of `atlas eval`: perplexity at the training context and beyond (`ppl`) and
lm-eval-harness zero-shot tasks (`lm-eval`). Each builds the `EvalResult` (metrics, protocol, deviations from the
paper's, details) of one loaded model; the command writes and tracks it."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from atlas_experiments.evaluation.protocol import HAYSTACK_TOKENS, corpus_description, scale_deviations

log = logging.getLogger("atlas.eval")


# ------------------------------------------------------------------------------------------------------- ppl


def ppl_lengths(lengths: str | None, train_seq_len: int | None) -> list[int]:
    """`--lengths`, else T, 2T, 4T of the training context."""
    from atlas_experiments.evaluation.model_io import parse_ints

    if lengths:
        return parse_ints(lengths, "--lengths")
    if train_seq_len:
        return [train_seq_len * k for k in (1, 2, 4)]
    raise ValueError("--lengths is needed: the training context is unknown (no run config; or give --train-len)")


def run_ppl_protocol(
    loaded, lengths: list[int], *, split: str, batch_size: int, max_tokens: int | None, progress: bool
):
    """Perplexity of `loaded` on `split` at every length; prints one line per length."""
    from atlas_experiments.evaluation.ppl import evaluate_ppl
    from atlas_experiments.evaluation.results import EvalResult

    t0 = time.perf_counter()
    results = evaluate_ppl(
        loaded.model,
        loaded.data_dir,
        lengths,
        split=split,
        batch_size=batch_size,
        max_tokens=max_tokens,
        train_len=loaded.train_seq_len,
        device=loaded.device,
        progress=progress,
    )
    metrics: dict[str, float] = {}
    for r in results:
        metrics.update(r.metrics())
    corpus = corpus_description(loaded.data_dir)
    deviations = scale_deviations(loaded)
    deviations.append(f"perplexity on the {split} split of {corpus}, not FineWeb(-Edu) held-out data")
    if loaded.train_seq_len and loaded.train_seq_len != 4096:
        deviations.append(f"training context {loaded.train_seq_len} tokens (paper: 4096)")
    if max_tokens:
        deviations.append(f"at most {max_tokens} tokens scored per length")
    if split != "validation":
        deviations.append(f"scored on the {split} split, which is not held out")
    result = EvalResult(
        task="ppl",
        model=loaded.name,
        metrics=metrics,
        protocol={
            "split": split,
            "lengths": lengths,
            "train_seq_len": loaded.train_seq_len,
            "batch_size": batch_size,
            "max_tokens": max_tokens,
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
    return result


# --------------------------------------------------------------------------------------------------- lm-eval


def run_lm_eval_protocol(
    loaded,
    tasks: list[str],
    *,
    task_dir: Path,
    seed: int,
    max_docs: int,
    batch_size: int,
    limit: float | None,
    max_length: int | None,
    bootstrap_iters: int,
):
    """lm-eval zero-shot on `tasks` (the offline stand-ins written to `task_dir` first); prints the summary."""
    from atlas_data.synthetic.niah import load_split_texts
    from atlas_experiments.evaluation import lm_eval_run
    from atlas_experiments.evaluation.lm_eval_tasks import (
        PAPER_TASKS,
        RECALL_MISSING,
        RECALL_TASKS,
        HubUnavailableError,
        is_offline_task,
        validate_tasks,
        write_offline_tasks,
    )
    from atlas_experiments.evaluation.results import EvalResult

    offline = [t for t in tasks if is_offline_task(t)]
    doc_counts: dict[str, int] = {}
    if offline:
        written = write_offline_tasks(
            task_dir,
            load_split_texts(loaded.data_dir, "validation", max_tokens=HAYSTACK_TOKENS),
            seed=seed,
            max_docs=max_docs,
        )
        doc_counts = validate_tasks(task_dir, offline)
        log.info("offline tasks in %s: %s", task_dir, written)
    max_length = max_length or loaded.train_seq_len
    if limit is not None and limit >= 1:
        limit = int(limit)
    t0 = time.perf_counter()
    try:
        raw = lm_eval_run.run_lm_eval(
            loaded,
            tasks,
            task_dir=task_dir if offline else None,
            batch_size=batch_size,
            limit=limit,
            max_length=max_length,
            seed=seed,
            bootstrap_iters=bootstrap_iters,
        )
    except ConnectionError as exc:  # a hub task outside HUB_DATASETS, offline or unreachable
        raise HubUnavailableError(f"lm-eval could not fetch a dataset: {exc}; run with hub access") from None
    seconds = time.perf_counter() - t0
    flat = lm_eval_run.flatten_results(raw)
    metrics = {**lm_eval_run.summarize(flat), **flat}

    deviations = scale_deviations(loaded)
    if offline:
        corpus = corpus_description(loaded.data_dir)
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
    if recall_asked and batch_size > 1:
        deviations.append(
            f"generative tasks batched ({batch_size}) with left padding: exact for memory models only when the "
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
            "batch_size": batch_size,
            "limit": limit,
            "max_length": max_length,
            "task_dir": str(task_dir) if offline else None,
            "metrics": "paper/*: Table 2 columns (acc x 100; hellaswag, arc_challenge acc_norm; wiki word ppl)",
        },
        deviations=deviations,
        details={
            "model": loaded.describe(),
            "offline_docs": doc_counts,
            "results": _plain(raw.get("results", {})),
            "n_samples": _plain(raw.get("n-samples", {})),
            "versions": _plain(raw.get("versions", {})),
            "lm_eval_version": _version("lm_eval"),
            "seconds": seconds,
        },
    )
    for key, value in sorted(lm_eval_run.summarize(flat).items()):
        print(f"{key}: {value:.4f}")
    return result


def _plain(value: Any) -> Any:
    """lm-eval's results as JSON types (numpy scalars and the like become strings)."""
    return json.loads(json.dumps(value, default=str))


def _version(pkg: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None
