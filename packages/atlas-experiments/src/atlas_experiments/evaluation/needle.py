"""Scoring long-context prompts (S-NIAH, BABILong) with a causal LM, and the S-NIAH evaluation.

Two ways to score a sample, both from one prefill of the prompt with the model's recurrent cache:

* ``generate`` (default; RULER's protocol): greedy decoding of `tokens_to_generate` tokens (stopping at EOS),
  feeding one token at a time through the cache; S-NIAH counts a hit when the needle's value occurs in the
  decoded text (RULER's string match), BABILong when the answer is the only task label in it.
* ``rank``: the log-likelihood of each candidate answer (`" " + candidate`) after the prompt; a hit when the
  true answer scores highest. S-NIAH's candidates are the value and 9 random values of the same kind that do
  not occur in the prompt, BABILong's the task's label set. Chance is 1 / #candidates instead of ~0, which gives
  a signal for small models that cannot yet copy a 7-digit number; it is not the paper's protocol.

The cache is copied per candidate batch (`batch_repeat_interleave`) so a candidate costs its own tokens only.
Samples run one at a time (prompts differ in length; left padding would shift the memory's chunk grid).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from atlas_experiments.plotting import pyplot, save_figure_atomic

SCORINGS = ("generate", "rank")


def _cache_of(out: Any) -> Any:
    cache = getattr(out, "cache", None)
    return cache if cache is not None else getattr(out, "past_key_values", None)


@torch.no_grad()
def score_prompt(
    model: torch.nn.Module,
    prompt_ids: Sequence[int],
    *,
    device: torch.device | str,
    max_new_tokens: int | None = None,
    eos_id: int | None = None,
    candidates: Sequence[Sequence[int]] | None = None,
) -> dict[str, Any]:
    """Prefill once; then greedy-decode up to `max_new_tokens` and/or score `candidates` (token id lists).

    Returns {"generated": [ids] (if decoding), "candidate_logprobs": [float] (if candidates)}.
    """
    x = torch.tensor([list(prompt_ids)], dtype=torch.long, device=device)
    out = model(x, use_cache=True, logits_to_keep=1)
    last = out.logits[0, -1].double()
    cache = _cache_of(out)
    result: dict[str, Any] = {}
    if candidates:
        first = torch.log_softmax(last, dim=-1)
        scores = [first[c[0]].item() for c in candidates]
        longest = max(len(c) for c in candidates)
        if longest > 1:
            rank_cache = copy.deepcopy(cache) if max_new_tokens else cache
            n = len(candidates)
            rank_cache.batch_repeat_interleave(n)
            inp = torch.zeros((n, longest - 1), dtype=torch.long, device=device)
            mask = torch.zeros((n, len(prompt_ids) + longest - 1), dtype=torch.long, device=device)
            mask[:, : len(prompt_ids)] = 1
            for i, c in enumerate(candidates):
                if len(c) > 1:
                    inp[i, : len(c) - 1] = torch.tensor(c[:-1], device=device)
                    mask[i, len(prompt_ids) : len(prompt_ids) + len(c) - 1] = 1
            logp = torch.log_softmax(
                model(inp, attention_mask=mask, past_key_values=rank_cache, use_cache=True).logits.double(), dim=-1
            )
            for i, c in enumerate(candidates):
                scores[i] += sum(logp[i, k - 1, c[k]].item() for k in range(1, len(c)))
        result["candidate_logprobs"] = scores
    if max_new_tokens:
        generated: list[int] = []
        nxt = int(last.argmax())
        for step in range(max_new_tokens):
            generated.append(nxt)
            if eos_id is not None and nxt == eos_id or step == max_new_tokens - 1:
                break
            out = model(torch.tensor([[nxt]], device=device), past_key_values=cache, use_cache=True)
            cache = _cache_of(out)
            nxt = int(out.logits[0, -1].argmax())
        result["generated"] = generated
    return result


def score_samples(
    model: torch.nn.Module,
    tokenizer: Any,
    samples: Sequence[Any],
    *,
    scorings: Sequence[str],
    device: torch.device | str,
    judge: Callable[[Any, str], bool],
    max_new_tokens: int | None = None,
    progress: bool = True,
    desc: str = "samples",
) -> list[dict[str, Any]]:
    """One record per sample: prompt length, and per scoring the hit (`generate_correct`, `rank_correct`)."""
    from tqdm.auto import tqdm

    bad = [s for s in scorings if s not in SCORINGS]
    if bad or not scorings:
        raise ValueError(f"--scoring {','.join(scorings)}: choose from {', '.join(SCORINGS)}")
    eos = getattr(tokenizer, "eos_token_id", None)
    records = []
    model.eval()
    for sample in tqdm(samples, desc=desc, unit="sample", disable=not progress):
        ids = tokenizer(sample.prompt, add_special_tokens=False)["input_ids"]
        cands = None
        if "rank" in scorings:
            cands = [tokenizer(" " + c, add_special_tokens=False)["input_ids"] for c in sample.candidates]
        n_new = (max_new_tokens or sample.tokens_to_generate) if "generate" in scorings else None
        t0 = time.perf_counter()
        res = score_prompt(model, ids, device=device, max_new_tokens=n_new, eos_id=eos, candidates=cands)
        rec: dict[str, Any] = {
            "index": sample.index,
            "length": sample.length,
            "prompt_tokens": len(ids),
            "seconds": time.perf_counter() - t0,
        }
        if "generated" in res:
            text = tokenizer.decode(res["generated"], skip_special_tokens=True)
            rec["prediction"] = text
            rec["generate_correct"] = bool(judge(sample, text))
        if "candidate_logprobs" in res:
            rec["rank_correct"], rec["answer_rank"] = rank_verdict(
                res["candidate_logprobs"], sample.candidates.index(sample.answer)
            )
        records.append(rec)
    return records


def rank_verdict(logprobs: Sequence[float], answer_i: int) -> tuple[bool, int]:
    """(hit, rank) of candidate `answer_i`: a hit when it scores highest, a tie going to the earlier candidate;
    its rank is 1 + the number of candidates scoring strictly higher."""
    best = max(range(len(logprobs)), key=lambda i: (logprobs[i], -i))
    return best == answer_i, 1 + sum(v > logprobs[answer_i] for v in logprobs)


def mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values)) if values else float("nan")


def metric_prefix(scoring: str) -> str:
    """Where a scoring's accuracies go: `acc/...` for generation (the paper's), `rank_acc/...` for ranking."""
    return "acc" if scoring == "generate" else "rank_acc"


# how a sample field reads in a metric name: acc/<task>/len=<length>/depth=<depth>
_FIELD_NAMES: dict[str, Callable[[Any], str]] = {
    "task": str,
    "length": lambda n: f"len={n}",
    "depth": lambda d: f"depth={d:g}",
}


@dataclass(frozen=True)
class Rollup:
    """A level of the accuracy table above its cells: the cells grouped by `fields` (a subset of the cell's).
    Pooled: a group's accuracy is the mean over all its hits; else the mean of its cells' (each cell once)."""

    fields: tuple[str, ...]
    pooled: bool = True


def accuracy_metrics(
    samples: Sequence[Any],
    records: Sequence[dict[str, Any]],
    scorings: Sequence[str],
    *,
    cell: tuple[str, ...],
    rollups: Sequence[Rollup],
) -> dict[str, float]:
    """Per scoring (under its `metric_prefix`): the accuracy of every cell (samples grouped by the `cell` fields,
    sorted), then of every rollup's groups (in order, each sorted), then over all samples. Values in [0, 1]."""

    def name(fields: Sequence[str], values: tuple) -> str:
        return "/".join(_FIELD_NAMES[f](v) for f, v in zip(fields, values))

    metrics: dict[str, float] = {}
    for scoring in scorings:
        prefix = metric_prefix(scoring)
        key = f"{scoring}_correct"
        cells: dict[tuple, list[float]] = {}
        for s, r in zip(samples, records):
            cells.setdefault(tuple(getattr(s, f) for f in cell), []).append(float(r[key]))
        cells = dict(sorted(cells.items()))
        for c, hits in cells.items():
            metrics[f"{prefix}/{name(cell, c)}"] = mean(hits)
        for rollup in rollups:
            groups: dict[tuple, list[float]] = {}
            for c, hits in cells.items():
                g = tuple(v for f, v in zip(cell, c) if f in rollup.fields)
                groups.setdefault(g, []).extend(hits if rollup.pooled else [mean(hits)])
            for g, values in sorted(groups.items()):
                metrics[f"{prefix}/{name(rollup.fields, g)}"] = mean(values)
        metrics[prefix] = mean([float(r[key]) for r in records])
    return metrics


# ------------------------------------------------------------------------------------------------------ S-NIAH


def niah_metrics(samples: Sequence[Any], records: Sequence[dict[str, Any]], scorings: Sequence[str]) -> dict:
    """`acc/<task>/len=L/depth=d` cells, their means per length and per task, and `acc` overall (generate);
    the same under `rank_acc/...` for rank scoring. Values in [0, 1]."""
    by_length, by_task = Rollup(("task", "length")), Rollup(("task",))
    return accuracy_metrics(samples, records, scorings, cell=("task", "length", "depth"), rollups=(by_length, by_task))


def draw_percent_grid(
    ax: Any, metrics: dict[str, float], rows: Sequence[Any], cols: Sequence[Any], key: Callable[[Any, Any], str]
) -> Any:
    """A heatmap of the accuracies `metrics[key(row, col)]` in % (0-100, red to green), each cell's value written
    in it; a cell without a metric stays blank. Returns the image (for a colorbar)."""
    import numpy as np

    grid = np.full((len(rows), len(cols)), np.nan)
    for i, row in enumerate(rows):
        for j, col in enumerate(cols):
            v = metrics.get(key(row, col))
            if v is not None:
                grid[i, j] = 100.0 * v
    image = ax.imshow(grid, cmap="RdYlGn", vmin=0, vmax=100, aspect="auto")
    for i in range(len(rows)):
        for j in range(len(cols)):
            if not np.isnan(grid[i, j]):
                ax.text(j, i, f"{grid[i, j]:.0f}", ha="center", va="center", fontsize=8)
    return image


def plot_niah_heatmap(
    metrics: dict[str, float],
    tasks: Sequence[str],
    lengths: Sequence[int],
    depths: Sequence[float],
    path: Path,
    prefix: str = "acc",
    title: str = "S-NIAH accuracy (%)",
) -> Path:
    """One panel per task: depth (rows) x context length (columns), cells = accuracy in %."""
    plt = pyplot()

    fig, axes = plt.subplots(
        1, len(tasks), figsize=(1.2 + 1.1 * len(lengths) * len(tasks), 1.2 + 0.5 * len(depths)), squeeze=False
    )
    image = None
    for k, (ax, task) in enumerate(zip(axes[0], tasks)):

        def key(d: float, length: int, task: str = task) -> str:
            return f"{prefix}/{task}/len={length}/depth={d:g}"

        image = draw_percent_grid(ax, metrics, depths, lengths, key)
        ax.set_xticks(range(len(lengths)), [str(x) for x in lengths], fontsize=8)
        ax.set_yticks(range(len(depths)), [f"{d:g}" for d in depths], fontsize=8)
        ax.set_xlabel("context length (tokens)", fontsize=8)
        if k == 0:
            ax.set_ylabel("needle depth (0 = start)", fontsize=8)
        else:
            ax.tick_params(labelleft=False)
        ax.set_title(task, fontsize=9)
    if image is not None:
        fig.colorbar(image, ax=axes[0].tolist(), shrink=0.8)
    fig.suptitle(title, fontsize=10)
    return save_figure_atomic(fig, path, bbox_inches="tight")
