"""What the LM evaluation protocols (`atlas eval ppl | lm-eval | niah | babilong`) share: the deviations every
small model has, the description of the evaluated corpus, haystack text, scoring options, sibling output files,
and the per-cell details and console table of the generation-scored tasks (S-NIAH, BABILong)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HAYSTACK_TOKENS = 2_000_000  # at most this much of a split is decoded for haystacks / offline tasks


def scale_deviations(loaded) -> list[str]:
    out = []
    if not loaded.trained:
        out.append(f"untrained model: {loaded.name} with random weights (seed), a pipeline check, not a result")
    n = loaded.info.get("parameters", 0)
    if n < 300e6:
        out.append(f"model has {n / 1e6:.2f}M parameters (paper: 340M / 760M / 1.3B)")
    return out


def corpus_description(data_dir: Path) -> str:
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


def haystack_texts(loaded, which: str, longest: int) -> tuple[list[str], str]:
    from atlas_data.synthetic.niah import embedded_texts, load_split_texts

    if which == "embedded":
        return embedded_texts(("kjv", "asv")), "embedded corpus (KJV + ASV chapters)"
    # enough text for varied haystacks without decoding a cluster-sized split
    texts = load_split_texts(loaded.data_dir, which, max_tokens=max(HAYSTACK_TOKENS, 16 * longest))
    return texts, f"{which} split of {corpus_description(loaded.data_dir)}"


def parse_scorings(text: str) -> list[str]:
    from atlas_experiments.evaluation.needle import SCORINGS

    scorings = [s.strip() for s in text.split(",") if s.strip()]
    if not scorings or any(s not in SCORINGS for s in scorings):
        raise ValueError(f"--scoring {text!r}: choose generate, rank or generate,rank")
    return scorings


def sibling(out: str, suffix: str) -> Path:
    path = Path(out)
    return path.with_name(path.stem + suffix)


def write_records(path: Path, samples, records) -> Path:
    with open(path, "w", encoding="utf-8") as fh:
        for s, r in zip(samples, records):
            fh.write(json.dumps({**s.to_dict(), **r}, ensure_ascii=False) + "\n")
    return path


def generation_details(loaded, figures, samples_file, samples, records, gen_seconds: float) -> dict[str, Any]:
    """The `details` of a generation-scored evaluation (S-NIAH, BABILong): model, figures, per-cell costs."""
    return {
        "model": loaded.describe(),
        "figures": figures,
        "samples_file": samples_file,
        "cells": cell_details(samples, records),
        "generation_seconds": gen_seconds,
        "scoring_seconds": sum(r["seconds"] for r in records),
    }


def cell_details(samples, records) -> dict[str, Any]:
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


def print_table(metrics: dict[str, float], prefix: str, tasks, lengths) -> None:
    print(f"{prefix:>16} " + " ".join(f"{n:>8}" for n in lengths) + "      all")
    for task in tasks:
        row = [metrics.get(f"{prefix}/{task}/len={n}") for n in lengths]
        cells = " ".join(f"{100 * v:8.1f}" if v is not None else f"{'-':>8}" for v in row)
        print(f"{task:>16} {cells} {100 * metrics.get(f'{prefix}/{task}', float('nan')):8.1f}")
