"""Reports as a pure function of the tracked runs: markdown tables beside the paper's numbers, and figures.

`build_reports(uri, out)` reads MLflow (through `atlas_experiments.tracking`) and writes:
- `pretrain.md`: every pretraining run (final train / validation loss and perplexity, evaluation metrics when
  present) beside the paper's Table 2 (760M) row of the same model; `figures/pretrain_loss.png`.
- `ablations.md`: one table per ablation axis (validation loss per cell) beside the Table 6 row it speaks to;
  `figures/ablation_<axis>.png`.
- `evaluations.md`: every `atlas eval` result grouped by task, with its protocol deviations; S-NIAH and MAD beside
  Tables 3 and 4.
- `README.md`: an index, the scale of our runs vs the paper's, and when the report was built.
Each file is written atomically; the same runs give the same tables.
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

from atlas_experiments import tracking
from atlas_experiments.reporting import paper_tables as paper


def _fmt(x: Any, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    if isinstance(x, float):
        return f"{x:.{digits}g}" if abs(x) < 1e4 else f"{x:,.0f}"
    return str(x)


def _table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_fmt(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _latest_per_name(runs: list[dict]) -> list[dict]:
    """A rerun of the same (experiment, run name) replaces the older record; finished runs win over failed."""
    best: dict[tuple[str, str], dict] = {}
    for run in sorted(runs, key=lambda r: (r["status"] == "FINISHED", r["start_time"] or 0)):
        best[(run["experiment"], run["run_name"])] = run
    return sorted(best.values(), key=lambda r: (r["experiment"], r["run_name"]))


def _ppl(loss: float | None) -> float | None:
    return math.exp(loss) if loss is not None and loss < 50 else None


def _run_row(run: dict) -> list[Any]:
    m, p = run["metrics"], run["params"]
    return [
        run["run_name"],
        p.get("model.preset", "?"),
        p.get("model.size", "?"),
        int(m["tokens"]) if "tokens" in m else None,
        m.get("loss"),
        m.get("val_loss"),
        _ppl(m.get("val_loss")),
        run["status"],
    ]


def pretrain_report(runs: list[dict], uri: str, figures: Path) -> str:
    runs = [r for r in runs if r["experiment"] == "pretrain"]
    out = ["# Pretraining\n"]
    if not runs:
        return out[0] + "\nNo pretraining runs are tracked yet.\n"
    header = ["run", "preset", "size", "tokens", "train loss", "val loss", "val ppl", "status"]
    header += ["paper 760M Wiki ppl", "paper 760M LMB ppl", "paper 760M avg acc"]
    rows = []
    for run in runs:
        ref = paper.TABLE2_760M.get(run["params"].get("model.preset", ""))
        rows.append(_run_row(run) + ([ref[0], ref[1], ref[-1]] if ref else [None] * 3))
    out.append(_table(header, rows))
    out.append(
        "\nOur validation perplexity is measured on held-out shards of our corpus and tokenizer; the paper's columns "
        "are Wikitext / LAMBADA perplexity and the mean of 8 zero-shot accuracies of 760M models trained on 30B "
        "FineWeb tokens. Compare orderings, not values.\n"
    )
    if _loss_figure(runs, uri, figures / "pretrain_loss.png"):
        out.append("\n![training loss](figures/pretrain_loss.png)\n")
    return "".join(out)


def ablation_report(runs: list[dict], figures: Path) -> str:
    out = ["# Ablations (Table 6 / Fig. 5)\n"]
    by_axis = defaultdict(list)
    for run in runs:
        if run["experiment"].startswith("ablation_"):
            by_axis[run["experiment"].removeprefix("ablation_")].append(run)
    if not by_axis:
        return out[0] + "\nNo ablation runs are tracked yet.\n"
    for axis, cells in sorted(by_axis.items()):
        out.append(f"\n## {axis}\n\n")
        rows = []
        for run in cells:
            cell = dict(part.split("~", 1) for part in run["run_name"].split("__") if "~" in part)
            row_name = next((paper.ABLATION_ROWS.get(axis, {}).get(v) for v in cell.values()), None)
            ref = paper.TABLE6_ABLATIONS.get(row_name) if row_name else None
            m = run["metrics"]
            rows.append(
                [", ".join(f"{k}={v}" for k, v in cell.items()), m.get("val_loss"), _ppl(m.get("val_loss")),
                 m.get("loss"), row_name or "–", ref[0] if ref else None, ref[1] if ref else None]
            )  # fmt: skip
        header = ["cell", "val loss", "val ppl", "train loss", "paper row", "paper LM ppl", "paper acc"]
        out.append(_table(header, rows))
        if _bar_figure(axis, rows, figures / f"ablation_{axis}.png"):
            out.append(f"\n![{axis}](figures/ablation_{axis}.png)\n")
    return "".join(out)


def evaluation_report(runs: list[dict]) -> str:
    out = ["# Evaluations\n"]
    evals = [r for r in runs if "task" in r["tags"]]
    if not evals:
        return out[0] + "\nNo evaluation results are tracked yet.\n"
    by_task = defaultdict(list)
    for run in evals:
        by_task[run["tags"]["task"]].append(run)
    for task, items in sorted(by_task.items()):
        out.append(f"\n## {task}\n\n")
        keys = sorted({k for r in items for k in r["metrics"]})[:24]
        rows = [[_model_name(r)] + [r["metrics"].get(k) for k in keys] for r in items]
        out.append(_table(["model", *keys], rows))
        deviations = sorted({r["tags"].get("deviations", "") for r in items} - {"", "none"})
        if deviations:
            out.append("\nProtocol deviations: " + " | ".join(deviations) + "\n")
        if task == "niah":
            out.append("\nPaper (Table 3, S-NIAH accuracy):\n\n")
            out.append(_table(["model", *paper.NIAH_COLUMNS], [[k, *v] for k, v in paper.TABLE3_NIAH.items()]))
        if task == "mad":
            out.append("\nPaper (Table 4, MAD accuracy):\n\n")
            out.append(_table(["model", *paper.MAD_COLUMNS], [[k, *v] for k, v in paper.TABLE4_MAD.items()]))
    return "".join(out)


def _model_name(run: dict) -> str:
    model = run["tags"].get("model", run["run_name"])
    parts = Path(model).parts
    if "runs" in parts:  # .../runs/<study>/<run>/checkpoints/final
        i = parts.index("runs")
        return "/".join(parts[i + 1 : i + 3])
    return model


def _loss_figure(runs: list[dict], uri: str, path: Path) -> bool:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    drawn = 0
    for run in runs:
        hist = tracking.metric_history(uri, run["run_id"], "loss")
        if hist:
            ax.plot(*zip(*hist), label=run["run_name"], lw=1.2)
            drawn += 1
    if not drawn:
        plt.close(fig)
        return False
    ax.set_xlabel("step")
    ax.set_ylabel("train loss")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.stem + ".tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    os.replace(tmp, path)
    return True


def _bar_figure(axis: str, rows: list[list[Any]], path: Path) -> bool:
    values = [(r[0], r[1]) for r in rows if r[1] is not None]
    if not values:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.bar([v[0] for v in values], [v[1] for v in values], color="#4c72b0")
    ax.set_ylabel("validation loss")
    ax.set_title(f"ablation: {axis}")
    ax.tick_params(axis="x", labelrotation=30, labelsize=7)
    lo = min(v[1] for v in values)
    ax.set_ylim(lo * 0.98, max(v[1] for v in values) * 1.01)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.stem + ".tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    os.replace(tmp, path)
    return True


def build_reports(uri: str, out_dir: str | Path, title: str = "ATLAS reproduction") -> list[Path]:
    out = Path(out_dir)
    runs = _latest_per_name(tracking.load_runs(uri))
    figures = out / "figures"
    pages = {
        "pretrain.md": pretrain_report(runs, uri, figures),
        "ablations.md": ablation_report(runs, figures),
        "evaluations.md": evaluation_report(runs),
    }
    n_pre = sum(r["experiment"] == "pretrain" for r in runs)
    n_abl = sum(r["experiment"].startswith("ablation_") for r in runs)
    n_eval = sum("task" in r["tags"] for r in runs)
    index = [
        f"# {title}\n\n",
        f"Built from {len(runs)} tracked runs ({n_pre} pretraining, {n_abl} ablation cells, {n_eval} evaluations) "
        f"in `{uri}`.\n\n",
        "- [Pretraining](pretrain.md)\n- [Ablations](ablations.md)\n- [Evaluations](evaluations.md)\n\n",
        "Scale: the paper trains 340M-1.3B models on 15-100B FineWeb tokens at 4K context; a run's size, token "
        "count and data are in its row. The embedded default (tiny models, a Bible corpus, CPU, minutes) checks "
        "that the pipeline runs end to end; its numbers say nothing about the paper's claims.\n",
    ]
    written = []
    for name, text in {**pages, "README.md": "".join(index)}.items():
        _write(out / name, text)
        written.append(out / name)
    return written
