"""Evaluation results in the paper's table layouts, ours beside theirs.

Input: the latest tracked evaluation runs (dicts from `tracking.load_runs`), grouped by their `task` tag. Metric
names are MLflow-sanitised (`acc/niah_single_1/len_256/depth_0.25`). Every table drops the columns no run has,
so a reduced protocol (the embedded default) gives a compact table instead of a wall of dashes.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from atlas_experiments.evaluation.results import model_label
from atlas_experiments.reporting import paper_tables as paper
from atlas_experiments.reporting.markdown import table

NIAH_SHORT = {"niah_single_1": "PK", "niah_single_2": "N", "niah_single_3": "W"}
LM_OURS = (  # (column, metric); accuracies already x 100 in lm-eval's `paper/` summaries
    ("wiki ppl", "paper/wiki_ppl"),
    ("lmb ppl", "paper/lmb_ppl"),
    ("lmb acc", "paper/lmb_acc"),
    ("piqa", "paper/piqa"),
    ("hella", "paper/hella"),
    ("wino", "paper/wino"),
    ("arc-e", "paper/arc_e"),
    ("arc-c", "paper/arc_c"),
    ("siqa", "paper/siqa"),
    ("boolq", "paper/boolq"),
    ("avg", "paper/avg"),
    ("last-word acc", "offline/lastword_acc"),
    ("last-word ppl", "offline/lastword_ppl"),
    ("cloze acc", "offline/cloze_acc"),
    ("word ppl", "offline/word_ppl"),
)


def model_name(run: dict) -> str:
    """`<study>/<run>` for a pretrained checkpoint; a synthetic task's model is its preset."""
    return model_label(run["tags"].get("model", run["run_name"]))


def _numeric_suffix(key: str) -> tuple:
    """Sort 'len_64' < 'len_128' and 'T16 P2' < 'T64 P8': numbers compare as numbers."""
    return tuple(
        (0, float(x), "") if x.replace(".", "", 1).isdigit() else (1, 0.0, x) for x in re.split(r"[_= TP]+", key)
    )


def _drop_empty(header: list[str], rows: list[list[Any]], keep: int = 1) -> tuple[list[str], list[list[Any]]]:
    cols = [i for i in range(len(header)) if i < keep or any(r[i] is not None for r in rows)]
    return [header[i] for i in cols], [[r[i] for i in cols] for r in rows]


def lm_section(by_model: dict[str, dict[str, dict]], preset_of: Callable[[str], str | None]) -> str:
    """Table 2 layout: lm-eval columns (paper tasks, or the offline stand-ins), perplexity at each evaluated
    length, and the paper's 760M row of the same preset."""
    lengths = sorted(
        {k.split("/", 1)[1] for runs in by_model.values() for k in runs.get("ppl", {}).get("metrics", {})
         if k.startswith("ppl/len_")}, key=_numeric_suffix,
    )  # fmt: skip
    header = ["model", *[c for c, _ in LM_OURS], *[f"ppl@{n.removeprefix('len_')}" for n in lengths]]
    header += ["paper 760M wiki ppl", "paper 760M lmb ppl", "paper 760M avg"]
    rows = []
    for name, runs in sorted(by_model.items()):
        lm = runs.get("lm_eval", {}).get("metrics", {})
        ppl = runs.get("ppl", {}).get("metrics", {})
        if not lm and not ppl:
            continue
        ref = paper.TABLE2_760M.get(preset_of(name) or "")
        rows.append(
            [name, *[lm.get(k) for _, k in LM_OURS], *[ppl.get(f"ppl/{n}") for n in lengths]]
            + ([ref[0], ref[1], ref[-1]] if ref else [None] * 3)
        )
    if not rows:
        return ""
    header, rows = _drop_empty(header, rows)
    return "\n## Language modeling and common-sense reasoning (Table 2 layout)\n\n" + table(header, rows)


def niah_section(by_model: dict[str, dict[str, dict]]) -> str:
    """Table 3 layout: accuracy (x 100) per needle type and context length; the paper's table below."""
    cells = sorted(
        {(m.group(1), int(m.group(2))) for runs in by_model.values()
         for k in runs.get("niah", {}).get("metrics", {}) if (m := re.fullmatch(r"acc/(\w+)/len_(\d+)", k))},
    )  # fmt: skip
    if not cells:
        return ""
    header = ["model", *[f"{NIAH_SHORT.get(t, t)}-{n}" for t, n in cells], "mean"]
    rows = []
    for name, runs in sorted(by_model.items()):
        m = runs.get("niah", {}).get("metrics")
        if m:
            vals = [m.get(f"acc/{t}/len_{n}") for t, n in cells]
            rows.append([name, *[None if v is None else 100 * v for v in vals], 100 * m["acc"] if "acc" in m else None])
    out = "\n## S-NIAH (Table 3 layout, accuracy %)\n\n" + table(header, rows)
    out += "\nPaper (Table 3, S-NIAH accuracy %, contexts 2K-16K):\n\n"
    out += table(["model", *paper.NIAH_COLUMNS], [[k, *v] for k, v in paper.TABLE3_NIAH.items()])
    return out


def babilong_section(by_model: dict[str, dict[str, dict]]) -> str:
    """Accuracy (x 100) by context length and by task; the paper gives BABILong only as a figure (Fig. 6)."""
    keys = sorted(
        {k for runs in by_model.values() for k in runs.get("babilong", {}).get("metrics", {})
         if re.fullmatch(r"acc/(len_\d+|qa\d+)", k)}, key=_numeric_suffix,
    )  # fmt: skip
    if not keys:
        return ""
    header = ["model", *[k.removeprefix("acc/").replace("len_", "len ") for k in keys], "mean"]
    rows = []
    for name, runs in sorted(by_model.items()):
        m = runs.get("babilong", {}).get("metrics")
        if m:
            rows.append([name, *[None if m.get(k) is None else 100 * m[k] for k in keys], 100 * m.get("acc", 0.0)])
    return "\n## BABILong-style QA (accuracy %; the paper reports Fig. 6 only)\n\n" + table(header, rows)


MQAR_KEY = re.compile(r"(acc|acc_init)/([^/]+)/d_(\d+)(?:/len_(\d+)/pairs_(\d+))?")
MQAR_MEMORY_KEY = re.compile(r"memory_size/([^/]+)/d_(\d+)/len_(\d+)")


def mqar_rows(by_model: dict[str, dict[str, dict]]) -> dict[str, dict[str, float]]:
    """'<model> d=<width>' -> {'T<len> P<pairs>': acc, 'mean': acc, 'untrained': acc, 'memory': floats} from
    `acc/<m>/d_<w>[/len_<T>/pairs_<P>]` and `memory_size/<m>/d_<w>/len_<T>` (the memory at the longest T; one row
    per model width; the paper plots accuracy against memory size)."""
    rows: dict[str, dict[str, float]] = {}
    longest: dict[str, int] = {}
    for runs in by_model.values():
        for k, v in runs.get("mqar", {}).get("metrics", {}).items():
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
                row[f"T{length} P{pairs}"] = v
    return rows


def mqar_section(by_model: dict[str, dict[str, dict]]) -> str:
    """Fig. 7 as a table: accuracy per (sequence length T, kv pairs P) setting, the mean, and the untrained model."""
    rows = mqar_rows(by_model)
    if not rows:
        return ""
    cols = sorted({c for r in rows.values() for c in r} - {"mean", "untrained", "memory"}, key=_numeric_suffix)
    header = ["model", *cols, "mean", "untrained", "memory floats (longest T)"]
    body = [
        [name, *[r.get(c) for c in [*cols, "mean", "untrained"]], None if "memory" not in r else int(r["memory"])]
        for name, r in sorted(rows.items())
    ]
    header, body = _drop_empty(header, body)
    return "\n## MQAR (Fig. 7 layout, accuracy per setting T x kv pairs P)\n\n" + table(header, body)


MAD_OURS = {  # our task names -> the paper's Table 4 columns (noisy ICR is MAD's, not in the paper's table)
    "compression": "compression",
    "in_context_recall": "icr",
    "fuzzy_in_context_recall": "fuzzy_icr",
    "selective_copying": "selective_copying",
    "memorization": "memorization",
    "noisy_in_context_recall": "noisy_icr",
}


def mad_section(by_model: dict[str, dict[str, dict]]) -> str:
    """Table 4 layout: accuracy (x 100) per MAD task; `avg` over the paper's five tasks (when all ran), `avg all`
    over every task we ran; the paper's rows below."""
    paper_tasks = paper.MAD_COLUMNS[:-1]
    rows = []
    for name, runs in sorted(by_model.items()):
        m = runs.get("mad", {}).get("metrics")
        if not m:
            continue
        acc = {MAD_OURS.get(k.split("/")[-1], k.split("/")[-1]): 100 * v for k, v in m.items()
               if k.startswith("acc/") and k.count("/") == 2 and not k.endswith("/average")}  # fmt: skip
        five = [acc[c] for c in paper_tasks if c in acc]
        avg = sum(five) / len(five) if len(five) == len(paper_tasks) else None
        # the memory an arm holds (floats after the recall baseline's T tokens): accuracies compare fairly only
        # beside it
        memory = next(
            (v for k, v in m.items() if k.startswith("memory_size/") and k.endswith("/in_context_recall")), None
        )
        rows.append([name, *[acc.get(c) for c in paper_tasks], avg, acc.get("noisy_icr"),
                     sum(acc.values()) / len(acc) if acc else None,
                     int(memory) if memory is not None else None])  # fmt: skip
    if not rows:
        return ""
    header, rows = _drop_empty(["model", *paper.MAD_COLUMNS, "noisy_icr", "avg all", "memory floats (recall)"], rows)
    out = "\n## MAD (Table 4 layout, accuracy %)\n\n" + table(header, rows)
    out += "\nPaper (Table 4, MAD accuracy %):\n\n"
    out += table(["model", *paper.MAD_COLUMNS], [[k, *v] for k, v in paper.TABLE4_MAD.items()])
    return out


def group_by_model(evals: list[dict]) -> dict[str, dict[str, dict]]:
    """model name -> task -> run (the latest per (experiment, run name) was picked upstream)."""
    out: dict[str, dict[str, dict]] = {}
    for run in evals:
        out.setdefault(model_name(run), {})[task_key(run)] = run
    return out


def task_key(run: dict) -> str:
    """The `task` tag as a key: `lm-eval` (the command's name) -> `lm_eval`."""
    return run["tags"]["task"].replace("-", "_")


def deviations(evals: list[dict]) -> str:
    """Each task's protocol deviations, every distinct item once (runs of one task share most of them)."""
    by_task: dict[str, dict[str, None]] = {}
    for run in evals:
        items = by_task.setdefault(task_key(run), {})
        for item in run["tags"].get("deviations", "").split("; "):
            if item.strip() and item.strip() != "none":
                items[item.strip()] = None
    lines = [f"\n- **{task}**: " + "; ".join(items) for task, items in sorted(by_task.items()) if items]
    return "\n## Protocol deviations\n" + "\n".join(lines) + "\n" if lines else ""
