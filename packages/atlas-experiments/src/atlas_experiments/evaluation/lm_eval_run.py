"""Running lm-eval-harness (`hf` backend) on an `atlas_model` checkpoint or preset, and flattening its output.

A checkpoint goes through lm-eval's own loading (`model="hf"`, `pretrained=<dir>,tokenizer=<data dir>`), exactly
as a cluster user would run it; an untrained preset is handed over as a ready `HFLM(pretrained=<model>)`.
`import atlas_model` (done by `model_io`) registers the model type, so no remote code is involved.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from atlas_experiments.evaluation.lm_eval_tasks import (
    PAPER_ACCURACY_COLUMNS,
    PAPER_COLUMNS,
    RECALL_TASKS,
    is_offline_task,
)
from atlas_experiments.evaluation.model_io import LoadedModel

log = logging.getLogger("atlas.eval")


def run_lm_eval(
    loaded: LoadedModel,
    tasks: Sequence[str],
    *,
    task_dir: Path | None = None,
    batch_size: int = 8,
    limit: int | float | None = None,
    max_length: int | None = None,
    seed: int = 0,
    bootstrap_iters: int = 1000,
) -> dict[str, Any]:
    """`lm_eval.simple_evaluate` zero-shot on `tasks`; local task YAMLs are read from `task_dir`."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    include_defaults = any(not is_offline_task(t) for t in tasks)
    manager = TaskManager(include_path=str(task_dir) if task_dir else None, include_defaults=include_defaults)
    device = str(loaded.device)
    if loaded.checkpoint is not None:
        args = [f"pretrained={loaded.checkpoint}", f"tokenizer={loaded.data_dir}", f"dtype={loaded.dtype}"]
        if max_length:
            args.append(f"max_length={max_length}")
        model: Any = "hf"
        model_args: str | None = ",".join(args)
        loaded.model.to("cpu")  # lm-eval loads its own copy; free the accelerator
    else:
        from lm_eval.models.huggingface import HFLM

        model = HFLM(pretrained=loaded.model, tokenizer=loaded.tokenizer, batch_size=batch_size, max_length=max_length)
        model_args = None
    kwargs: dict[str, Any] = {}
    if model_args is not None:
        kwargs["model_args"] = model_args
    return lm_eval.simple_evaluate(
        model=model,
        tasks=list(tasks),
        num_fewshot=0,
        batch_size=batch_size,
        device=device,
        limit=limit,
        task_manager=manager,
        bootstrap_iters=bootstrap_iters,
        random_seed=seed,
        numpy_random_seed=seed,
        torch_random_seed=seed,
        fewshot_random_seed=seed,
        log_samples=False,
        **kwargs,
    )


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(float(value)) else None


def flatten_results(results: dict[str, Any]) -> dict[str, float]:
    """`results["results"][task]["acc,none"]` -> `lm_eval/<task>/acc` (filter suffix kept when not `none`)."""
    out: dict[str, float] = {}
    for task, metrics in results.get("results", {}).items():
        for key, value in metrics.items():
            number = _number(value)
            if key == "alias" or number is None:
                continue
            metric, _, filt = key.partition(",")
            name = metric if filt in ("", "none") else f"{metric}_{filt}"
            out[f"lm_eval/{task}/{name}"] = number
    return out


def summarize(flat: dict[str, float]) -> dict[str, float]:
    """Paper-style columns: Table 2 (`paper/<col>`, accuracies x 100, `paper/avg` over the 8 accuracies when all
    are there), Table 5 (`recall/<col>` x 100 and their mean), and the offline tasks (`offline/...`)."""
    out: dict[str, float] = {}
    for col, task, metric in PAPER_COLUMNS:
        value = flat.get(f"lm_eval/{task}/{metric}")
        if value is not None:
            out[f"paper/{col}"] = value if col.endswith("_ppl") else 100.0 * value
    accs = [out[f"paper/{c}"] for c in PAPER_ACCURACY_COLUMNS if f"paper/{c}" in out]
    if len(accs) == len(PAPER_ACCURACY_COLUMNS):
        out["paper/avg"] = sum(accs) / len(accs)
    recall = []
    for col, (task, metric) in RECALL_TASKS.items():
        value = flat.get(f"lm_eval/{task}/{metric}")
        if value is not None:
            out[f"recall/{col}"] = 100.0 * value
            recall.append(100.0 * value)
    if recall:
        out["recall/avg_available"] = sum(recall) / len(recall)
    offline = {
        "offline/lastword_acc": "lm_eval/atlas_lastword/acc",
        "offline/lastword_ppl": "lm_eval/atlas_lastword/perplexity",
        "offline/cloze_acc": "lm_eval/atlas_cloze/acc",
        "offline/cloze_acc_norm": "lm_eval/atlas_cloze/acc_norm",
        "offline/word_ppl": "lm_eval/atlas_rolling_ppl/word_perplexity",
        "offline/bits_per_byte": "lm_eval/atlas_rolling_ppl/bits_per_byte",
    }
    for name, key in offline.items():
        if key in flat:
            out[name] = flat[key]
    return out
