"""Reports as a pure function of the tracked runs: markdown tables beside the paper's numbers, and figures.

`build_reports(uri, out)` reads MLflow (through `atlas_experiments.tracking`) and writes:
- `pretrain.md`: every pretraining run (final train / validation loss and perplexity, evaluation metrics when
  present) beside the paper's Table 2 (760M) row of the same model; `figures/pretrain_loss.png`.
- `ablations.md`: one table per ablation axis (validation loss per cell, the rows of the current tables when the
  workflow names them) beside the Table 6 row it speaks to; `figures/ablation_<axis>.png` (`ablations.py`).
- `evaluations.md`: every `atlas eval` result grouped by task, one section per task of the registry
  (`evaluation.tasks`: Table 2, S-NIAH and MAD beside Tables 3 and 4, MQAR as Fig. 7, learnability beside the
  paper's ordering of Fig. 6), then every task's protocol deviations.
- `README.md`: an index, the scale of our runs vs the paper's, and when the report was built.
Each file is written atomically; the same runs give the same tables.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from atlas_experiments import tracking
from atlas_experiments._io import write_text_atomic as _write
from atlas_experiments.evaluation import tasks as eval_tasks
from atlas_experiments.reporting import eval_tables, figures
from atlas_experiments.reporting import paper_tables as paper
from atlas_experiments.reporting.ablations import TableCells, ablation_report, current_cells
from atlas_experiments.reporting.markdown import ppl as _ppl
from atlas_experiments.reporting.markdown import table as _table


def _latest_per_name(runs: list[dict]) -> list[dict]:
    """A rerun of the same (experiment, run name, evaluated model) replaces the older record; finished runs win
    over failed ones."""
    best: dict[tuple[str, str, str], dict] = {}
    for run in sorted(runs, key=lambda r: (r["status"] == "FINISHED", r["start_time"] or 0)):
        best[(run["experiment"], run["run_name"], run["tags"].get("model", ""))] = run
    return sorted(best.values(), key=lambda r: (r["experiment"], r["run_name"]))


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


def pretrain_report(runs: list[dict], uri: str, fig_dir: Path) -> str:
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
    if figures.loss_curves(runs, uri, fig_dir / "pretrain_loss.png"):
        out.append("\n![training loss](figures/pretrain_loss.png)\n")
    return "".join(out)


def evaluation_report(runs: list[dict], fig_dir: Path) -> str:
    """The paper's evaluation tables (2, 3, 4; Figs. 6 and 7 as tables), ours first and theirs below, plus figures."""
    evals = [r for r in runs if "task" in r["tags"]]
    if not evals:
        return "# Evaluations\n\nNo evaluation results are tracked yet.\n"
    by_model = eval_tables.group_by_model(evals)
    presets = {f"pretrain/{r['run_name']}": r["params"].get("model.preset") for r in runs
               if r["experiment"] == "pretrain"}  # fmt: skip
    out = [
        "# Evaluations\n\nRows are our models (`<study>/<run>` for pretrained checkpoints, a preset name for "
        "synthetic tasks, which train their own small models); the paper's numbers follow each table.\n"
    ]
    context = eval_tasks.ReportContext(fig_dir=fig_dir, preset_of=presets.get)
    out += [task.report(by_model, context) for task in eval_tasks.TASKS.values() if task.report is not None]
    out.append(eval_tables.deviations(evals))
    return "".join(out)


def _shown(uri: str) -> str:
    """A SQLite store under the working directory by its relative path: committed reports name no machine."""
    prefix = f"sqlite:///{Path.cwd()}/"
    return "sqlite:///" + uri[len(prefix) :] if uri.startswith(prefix) else uri


def build_reports(
    uri: str, out_dir: str | Path, title: str = "ATLAS reproduction", ablation_cells: TableCells | None = None
) -> list[Path]:
    """`ablation_cells`: axis -> run name -> settings, the rows of its current table (None: every tracked cell)."""
    out = Path(out_dir)
    runs = _latest_per_name(tracking.load_runs(uri))
    fig_dir = out / "figures"
    fig_dir.mkdir(parents=True, exist_ok=True)  # declared as an output even when no figure can be drawn yet
    pages = {
        "pretrain.md": pretrain_report(runs, uri, fig_dir),
        "ablations.md": ablation_report(runs, fig_dir, ablation_cells),
        "evaluations.md": evaluation_report(runs, fig_dir),
    }
    n_pre = sum(r["experiment"] == "pretrain" for r in runs)
    n_abl = sum(c.run is not None for cells in current_cells(runs, ablation_cells).values() for c in cells)
    n_eval = sum("task" in r["tags"] for r in runs)
    index = [
        f"# {title}\n\n",
        f"Built from {len(runs)} tracked runs ({n_pre} pretraining, {n_abl} ablation cells, {n_eval} evaluations) "
        f"in `{_shown(uri)}`.\n\n",
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
