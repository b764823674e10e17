"""lm-eval task sets: the paper's zero-shot suite, the in-context-recall suite, and local offline tasks.

* ``paper``: Table 2 of the paper, lm-eval-harness zero-shot (the GLA / Gated DeltaNet / Titans setup). Needs
  the Hugging Face hub (or its datasets cached and HF_DATASETS_OFFLINE=1): a cluster job.
* ``recall``: the in-context-recall suite of Table 5 (Arora et al. 2024, "Based"/"JRT" setup) as far as lm-eval
  0.4.13 ships it: ``swde``, ``fda`` and ``squad_completion`` are the Based versions; ``drop`` is lm-eval's
  standard DROP (generative, em/f1). NQ and TriviaQA in their in-context (Based) form are not in lm-eval 0.4.13;
  ``nq_open`` and ``triviaqa`` (rc.nocontext) are closed-book tasks that test no in-context recall, so they are
  not substituted (`RECALL_MISSING`).
* ``offline``: three tasks written at run time from held-out corpus text (no hub):
  ``atlas_lastword`` (LAMBADA-style last-word prediction, loglikelihood: perplexity and greedy accuracy),
  ``atlas_cloze`` (the same passages as 4-way multiple choice against distractor words: acc, acc_norm) and
  ``atlas_rolling_ppl`` (whole held-out documents, loglikelihood_rolling: word/byte perplexity, bits per byte).
"""

from __future__ import annotations

import json
import os
import random
import re
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

PAPER_TASKS = (
    "wikitext",
    "lambada_openai",
    "piqa",
    "hellaswag",
    "winogrande",
    "arc_easy",
    "arc_challenge",
    "social_iqa",
    "boolq",
)
# Table 2 columns: (column, lm-eval task, metric). Accuracies x 100 as printed in the paper.
PAPER_COLUMNS = (
    ("wiki_ppl", "wikitext", "word_perplexity"),
    ("lmb_ppl", "lambada_openai", "perplexity"),
    ("lmb_acc", "lambada_openai", "acc"),
    ("piqa", "piqa", "acc"),
    ("hella", "hellaswag", "acc_norm"),
    ("wino", "winogrande", "acc"),
    ("arc_e", "arc_easy", "acc"),
    ("arc_c", "arc_challenge", "acc_norm"),
    ("siqa", "social_iqa", "acc"),
    ("boolq", "boolq", "acc"),
)
PAPER_ACCURACY_COLUMNS = ("lmb_acc", "piqa", "hella", "wino", "arc_e", "arc_c", "siqa", "boolq")

# Table 5 column -> lm-eval 0.4.13 task and metric.
RECALL_TASKS = {
    "SWDE": ("swde", "contains"),
    "FDA": ("fda", "contains"),
    "SQuAD": ("squad_completion", "contains"),
    "DROP": ("drop", "f1"),
}
RECALL_MISSING = {
    "NQ": "no in-context (Based) NQ task in lm-eval 0.4.13; nq_open is closed-book",
    "TQA": "no in-context (Based) TriviaQA task in lm-eval 0.4.13; triviaqa is rc.nocontext (closed-book)",
}

# Hub datasets of the hub task sets (from the installed task YAMLs / task classes; checked by a test).
HUB_DATASETS: dict[str, tuple[str, str | None]] = {
    "wikitext": ("EleutherAI/wikitext_document_level", "wikitext-2-raw-v1"),
    "lambada_openai": ("EleutherAI/lambada_openai", "default"),
    "piqa": ("baber/piqa", None),
    "hellaswag": ("Rowan/hellaswag", None),
    "winogrande": ("allenai/winogrande", "winogrande_xl"),
    "arc_easy": ("allenai/ai2_arc", "ARC-Easy"),
    "arc_challenge": ("allenai/ai2_arc", "ARC-Challenge"),
    "social_iqa": ("lighteval/siqa", None),
    "boolq": ("aps/super_glue", "boolq"),
    "swde": ("hazyresearch/based-swde-v2", "default"),
    "fda": ("hazyresearch/based-fda", "default"),
    "squad_completion": ("hazyresearch/based-squad", "default"),
    "drop": ("EleutherAI/drop", None),
}

OFFLINE_TASKS = ("atlas_lastword", "atlas_cloze", "atlas_rolling_ppl")
TASK_SETS: dict[str, tuple[str, ...]] = {
    "paper": PAPER_TASKS,
    "recall": tuple(t for t, _ in RECALL_TASKS.values()),
    "offline": OFFLINE_TASKS,
}


class HubUnavailableError(ValueError):
    """A hub task set was asked for where its datasets cannot be reached."""


def resolve_tasks(spec: str) -> list[str]:
    """`paper`, `recall`, `offline`, or a comma-separated mix of set names and lm-eval task names."""
    out: list[str] = []
    for part in [p.strip() for p in spec.split(",") if p.strip()]:
        for name in TASK_SETS.get(part, (part,)):
            if name not in out:
                out.append(name)
    if not out:
        raise ValueError(f"--tasks {spec!r}: no task named")
    return out


def is_offline_task(name: str) -> bool:
    return name in OFFLINE_TASKS


# ---------------------------------------------------------------------------------------------------- hub access


def _env_offline() -> bool:
    return any(os.environ.get(v, "").lower() in ("1", "true", "yes") for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))


def check_hub_access(tasks: Sequence[str], timeout: float = 5.0) -> None:
    """Fail fast, with a message that says what to do, when hub tasks cannot get their data.

    Offline mode (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE): every dataset must already be in the datasets cache
    (checked with `datasets.load_dataset_builder`, about a second each). Online: the hub endpoint must answer a
    TCP connection within `timeout` seconds (instead of lm-eval retrying for minutes).
    """
    hub = [t for t in tasks if not is_offline_task(t)]
    if not hub:
        return
    if _env_offline():
        import datasets

        missing = []
        for task in hub:
            if task not in HUB_DATASETS:
                continue
            path, name = HUB_DATASETS[task]
            try:
                datasets.load_dataset_builder(path, name)
            except Exception as exc:  # ConnectionError, DatasetNotFoundError, FileNotFoundError ...
                missing.append(f"{task} ({path}: {type(exc).__name__})")
        if missing:
            raise HubUnavailableError(
                "lm-eval hub tasks need their datasets, and this process runs offline (HF_HUB_OFFLINE/"
                f"HF_DATASETS_OFFLINE set) without them cached: {', '.join(missing)}. Run on a machine with hub "
                "access (or pre-download the datasets into HF_HOME there), or use --tasks offline."
            )
        return
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    url = urlparse(endpoint)
    host, port = url.hostname or "huggingface.co", url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as exc:
        raise HubUnavailableError(
            f"lm-eval hub tasks ({', '.join(hub)}) need the Hugging Face hub, and {host}:{port} is unreachable "
            f"({exc}). Run on a machine with hub access, or use --tasks offline."
        ) from None


# ---------------------------------------------------------------------------------------------- offline tasks

_TARGET_WORD = re.compile(r"([A-Za-z]{3,})[.!?]['\")\]]*")
_WORD = re.compile(r"[A-Za-z]{3,}")


@dataclass
class Passage:
    context: str
    target: str


def lastword_passages(texts: Iterable[str], min_words: int = 20, max_words: int = 150) -> list[Passage]:
    """LAMBADA-like passages: consecutive words ending with a sentence, the sentence's last word removed.

    The target is that word without its punctuation (at least 3 letters); the context is every word before it.
    """
    out: list[Passage] = []
    for text in texts:
        words = text.split()
        start = 0
        j = start + min_words
        while j < len(words):
            if j - start > max_words:
                start = j - min_words
            m = _TARGET_WORD.fullmatch(words[j])
            if m and j - start >= min_words:
                out.append(Passage(" ".join(words[start:j]), m[1]))
                start = j + 1
                j = start + min_words
                continue
            j += 1
    return out


def _distractors(target: str, vocab: Sequence[str], rng: random.Random, k: int) -> list[str]:
    pool = [w for w in vocab if w.lower() != target.lower()]
    if len(pool) < k:
        raise ValueError(f"cloze task: the held-out text has only {len(pool) + 1} distinct words; need {k + 1}")
    picks = rng.sample(pool, k)
    if target[0].isupper():
        picks = [w.capitalize() for w in picks]
    return picks


def _write_task(task_dir: Path, cache_dir: Path, config: dict[str, Any], docs: list[dict[str, Any]]) -> None:
    import yaml

    data = task_dir / f"{config['task']}.jsonl"
    data.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs), encoding="utf-8")
    full = {
        "task": config["task"],
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(data.resolve())}, "cache_dir": str(cache_dir.resolve())},
        "test_split": "test",
        **{k: v for k, v in config.items() if k != "task"},
        "metadata": {"version": 1.0},
    }
    (task_dir / f"{config['task']}.yaml").write_text(yaml.safe_dump(full, sort_keys=False), encoding="utf-8")


# The three offline tasks' lm-eval configs (without the name and data files, which `_write_task` adds).
_MEAN_ACC = {"aggregation": "mean", "higher_is_better": True}
OFFLINE_TASKS: dict[str, dict[str, Any]] = {
    "atlas_lastword": {
        "output_type": "loglikelihood",
        "doc_to_text": "{{context}}",
        "doc_to_target": "{{' ' + target}}",
        "metric_list": [
            {"metric": "perplexity", "aggregation": "perplexity", "higher_is_better": False},
            {"metric": "acc", **_MEAN_ACC},
        ],
    },
    "atlas_cloze": {
        "output_type": "multiple_choice",
        "doc_to_text": "{{context}}",
        "doc_to_choice": "{{choices}}",
        "doc_to_target": "{{answer}}",
        "metric_list": [{"metric": "acc", **_MEAN_ACC}, {"metric": "acc_norm", **_MEAN_ACC}],
    },
    "atlas_rolling_ppl": {
        "output_type": "loglikelihood_rolling",
        "doc_to_text": "",
        "doc_to_target": "{{text}}",
        "metric_list": [{"metric": "word_perplexity"}, {"metric": "byte_perplexity"}, {"metric": "bits_per_byte"}],
    },
}


def write_offline_tasks(
    task_dir: str | Path,
    texts: Sequence[str],
    *,
    seed: int = 0,
    max_docs: int | None = 500,
    n_choices: int = 4,
    min_words: int = 20,
    max_doc_words: int | None = 2000,
) -> dict[str, int]:
    """Write the three offline tasks (YAML + JSONL) into `task_dir`; returns the number of docs per task.

    `max_docs` caps each task (passages are drawn in corpus order, then a seeded sample of `max_docs`);
    `max_doc_words` truncates the documents of the rolling-perplexity task.
    """
    task_dir = Path(task_dir)
    task_dir.mkdir(parents=True, exist_ok=True)
    cache_dir = task_dir / "hf_datasets_cache"
    rng = random.Random(f"{seed}/offline-tasks")
    passages = lastword_passages(texts, min_words=min_words)
    if not passages:
        raise ValueError(f"offline tasks: no passage of >= {min_words} words ending a sentence in the held-out text")
    if max_docs is not None and len(passages) > max_docs:
        keep = sorted(rng.sample(range(len(passages)), max_docs))
        passages = [passages[i] for i in keep]
    vocab = sorted({w for t in texts for w in _WORD.findall(t.lower())})

    lastword = [{"context": p.context, "target": p.target} for p in passages]
    cloze = []
    for p in passages:
        choices = [p.target, *_distractors(p.target, vocab, rng, n_choices - 1)]
        rng.shuffle(choices)
        cloze.append({"context": p.context, "choices": choices, "answer": choices.index(p.target)})
    docs = [t.strip() for t in texts if t.strip()]
    if max_doc_words is not None:
        docs = [" ".join(t.split()[:max_doc_words]) if len(t.split()) > max_doc_words else t for t in docs]
    if max_docs is not None and len(docs) > max_docs:
        docs = [docs[i] for i in sorted(rng.sample(range(len(docs)), max_docs))]
    rolling = [{"text": t} for t in docs]

    task_docs = {"atlas_lastword": lastword, "atlas_cloze": cloze, "atlas_rolling_ppl": rolling}
    for name, docs_of_task in task_docs.items():
        _write_task(task_dir, cache_dir, {"task": name, **OFFLINE_TASKS[name]}, docs_of_task)
    return {name: len(d) for name, d in task_docs.items()}


def validate_tasks(task_dir: str | Path | None, names: Sequence[str], include_defaults: bool = False) -> dict[str, int]:
    """What `lm_eval validate` checks (the tasks exist), and more: every task builds, loads its documents and
    renders its first document (text, target, choices). Returns the number of evaluation docs per task."""
    from lm_eval.tasks import TaskManager

    manager = TaskManager(include_path=str(task_dir) if task_dir else None, include_defaults=include_defaults)
    found = manager.match_tasks(list(names))
    missing = [n for n in names if n not in found]
    if missing:
        raise ValueError(f"lm-eval does not know the task(s) {', '.join(missing)}")
    tasks = manager.load(list(names))["tasks"]
    counts: dict[str, int] = {}
    for name in names:
        task = tasks[name]
        docs = list(task.eval_docs)
        if not docs:
            raise ValueError(f"lm-eval task {name}: no documents")
        doc = docs[0]
        text, target = task.doc_to_text(doc), task.doc_to_target(doc)
        if task.OUTPUT_TYPE == "multiple_choice":
            choices = task.doc_to_choice(doc)
            if not isinstance(target, int) or not 0 <= target < len(choices):
                raise ValueError(f"lm-eval task {name}: target {target!r} is not an index into {choices!r}")
        elif task.OUTPUT_TYPE == "loglikelihood_rolling":
            if not isinstance(target, str) or not target.strip():
                raise ValueError(f"lm-eval task {name}: empty rolling-loglikelihood document")
        elif not isinstance(text, str) or not text or not str(target).strip():
            raise ValueError(f"lm-eval task {name}: empty context or target ({text!r} -> {target!r})")
        counts[name] = len(docs)
    return counts
