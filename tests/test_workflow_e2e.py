"""End to end: the reduced `.test` config runs the whole DAG (corpus to report) for real; MLflow holds every run
with ablation cells nested under their parent; `snakemake --report` bundles it; touching one ablation's parameter
reruns only that ablation's jobs."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from . import mlflow_ui

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile")]
# CI sets this (.ci/run): a missing browser fails the MLflow UI test instead of skipping it
REQUIRE_BROWSER = os.environ.get("ATLAS_REQUIRE_BROWSER", "") not in ("", "0")


def _snakemake(work: Path, *args: str, timeout: int = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*SNAKEMAKE, "--directory", str(work), "--cores", "2", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        # never the user's shared tracking server: this run tracks into its own SQLite file
        env={k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"} | {"OMP_NUM_THREADS": "1"},
    )


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A copy of .test/config run to completion in a temporary working directory (about 2 minutes on 2 cores)."""
    work = tmp_path_factory.mktemp("e2e")
    # MLflow's default store (`./mlruns`) where a job or the workflow could fall back to it; one already in the
    # checkout (a user's own run) is allowed, but the run must neither create nor change one
    strays = [work / "mlruns", ROOT / "mlruns", ROOT / ".test" / "mlruns"]
    before = {p: _tree(p) for p in strays}
    (work / "config").mkdir()
    cfg = yaml.safe_load((ROOT / ".test" / "config" / "config.yaml").read_text())
    table = work / "config" / "window.tsv"
    shutil.copy(ROOT / ".test" / "config" / "window.tsv", table)
    cfg["ablations"]["tables"]["window"] = str(table)  # the rerun test edits this copy
    (work / "config" / "config.yaml").write_text(yaml.safe_dump(cfg))
    res = _snakemake(work, timeout=1200)
    logs = "".join(f"\n== {p}\n{p.read_text()[-1500:]}" for p in sorted((work / "results" / "logs").rglob("*.log")))
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:] + logs[-6000:]
    changed = [str(p) for p in strays if _tree(p) != before[p]]
    assert not changed, f"the run wrote MLflow's default ./mlruns store: {changed}"
    return work


def _tree(path: Path) -> list[str] | None:
    """The files under `path` (None: no such directory)."""
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.is_dir() else None


def _dry_run_jobs(work: Path) -> tuple[dict[str, int], str]:
    res = _snakemake(work, "-n")
    assert res.returncode == 0, res.stderr[-3000:]
    if "Nothing to be done" in res.stdout + res.stderr:
        return {}, res.stdout
    table = res.stdout.split("Job stats:", 1)[1].split("\n\n", 1)[0]
    jobs = {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M) if m[1] != "total"}
    return jobs, res.stdout


def test_the_whole_dag_produces_reports_and_tracked_runs(finished):
    from atlas_experiments import tracking

    reports = finished / "reports"
    for page in ("README.md", "pretrain.md", "ablations.md", "evaluations.md"):
        assert (reports / page).stat().st_size > 200, page
    for fig in ("pretrain_loss", "ablation_window", "ablation_gated_mlp", "niah", "mqar"):
        assert (reports / "figures" / f"{fig}.png").stat().st_size > 1000, fig
    index = (reports / "README.md").read_text()
    assert "(2 pretraining, 5 ablation cells, 5 evaluations)" in index
    ablations = (reports / "ablations.md").read_text()
    assert re.search(r"^\| memory=linear \|.*\| linear memory \| 21.03 \|", ablations, re.M)  # Table 6's row

    results = finished / "results"
    runs = tracking.load_runs(f"sqlite:///{results / 'mlflow.db'}")
    by_exp: dict[str, list[dict]] = {}
    for run in runs:
        assert run["status"] == "FINISHED", run
        by_exp.setdefault(run["experiment"], []).append(run)
    assert sorted(r["run_name"] for r in by_exp["pretrain"]) == ["atlas", "transformer_pp"]
    assert {"eval_ppl", "eval_niah", "eval_mqar"} <= set(by_exp)
    gated = {"memory~mlp", "memory~gated_mlp", "memory~linear"}
    for axis, cells in (("window", {"window~1", "window~2"}), ("gated_mlp", gated)):
        parent_id = json.loads((results / "runs" / f"ablation_{axis}" / "parent.json").read_text())["run_id"]
        members = by_exp[f"ablation_{axis}"]
        parent = next(r for r in members if r["run_id"] == parent_id)
        assert parent["tags"][tracking.ROLE_TAG] == "parent" and parent["run_name"] == axis
        children = {r["run_name"] for r in members if r["tags"].get(tracking.PARENT_TAG) == parent_id}
        assert children == cells
        summary = json.loads((results / "runs" / f"ablation_{axis}" / "summary.json").read_text())
        assert summary["best"] in cells and "best_val_loss" in parent["metrics"]


def test_a_finished_pipeline_has_nothing_to_do(finished):
    jobs, out = _dry_run_jobs(finished)
    assert jobs == {}, out[-3000:]


def test_touching_one_ablation_parameter_reruns_only_that_ablation(finished):
    table = finished / "config" / "window.tsv"
    before = table.read_text()
    table.write_text(before.replace("\n2\n", "\n3\n"))  # cell window~2 becomes window~3
    try:
        jobs, out = _dry_run_jobs(finished)
    finally:
        table.write_text(before)
    # the new cell's config file, its training, the axis summary and the report: nothing else
    assert jobs == {"train_config": 1, "train": 1, "ablation_summary": 1, "report": 1, "default": 1}, out[-3000:]
    assert re.findall(r"rule train:.*?wildcards: ([^\n]+)", out, re.S) == ["study=ablation_window, run=window~3"]
    assert re.findall(r"rule ablation_summary:.*?wildcards: ([^\n]+)", out, re.S) == ["axis=window"]


def test_snakemake_report_bundles_the_html(finished):
    res = _snakemake(finished, "--report", "atlas.html")
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    html = finished / "atlas.html"
    assert html.stat().st_size > 50_000


# where `ATLAS_UI_SCREENSHOTS=docs/img` puts the screenshots the README shows (scaled to this width)
DOC_WIDTH = 1100


NO_BROWSER = "no chromium on PATH (Debian: apt-get install chromium)"


@pytest.mark.skipif(mlflow_ui.chromium() is None and not REQUIRE_BROWSER, reason=NO_BROWSER)
def test_the_mlflow_ui_shows_experiments_nested_cells_loss_curves_and_artifacts(finished, tmp_path):
    if mlflow_ui.chromium() is None:
        pytest.fail(f"ATLAS_REQUIRE_BROWSER is set: {NO_BROWSER}")
    from mlflow.tracking import MlflowClient
    from PIL import Image

    results = finished / "results"
    store = f"sqlite:///{results / 'mlflow.db'}"
    client = MlflowClient(store)
    exps = {e.name: e.experiment_id for e in client.search_experiments()}
    atlas_id = {r.info.run_name: r.info.run_id for r in client.search_runs([exps["pretrain"]])}["atlas"]
    atlas = f"#/experiments/{exps['pretrain']}/runs/{atlas_id}"
    window = exps["ablation_window"]
    parent = json.loads((results / "runs" / "ablation_window" / "parent.json").read_text())["run_id"]
    ml = "?workflowType=machine_learning"  # the UI's training view (its default is the GenAI one)
    pages = {  # screenshot name: (page, text it must show)
        "mlflow-experiments": (f"#/experiments{ml}", ["pretrain", "ablation_window", "ablation_gated_mlp", "eval_ppl"]),
        # the parent run on top, its cells nested under it (collapsed)
        "mlflow-ablation-runs": (f"#/experiments/{window}/runs{ml}", ["Runs", "window", "3 matching runs"]),
        "mlflow-ablation-parent": (
            f"#/experiments/{window}/runs/{parent}{ml}",
            ["Child runs", "window~1", "window~2", "best_val_loss"],
        ),
        "mlflow-loss-curve": (f"{atlas}/model-metrics{ml}", ["Model metrics", "atlas (loss)"]),
        "mlflow-artifacts": (f"{atlas}/artifacts/loss_curve.png{ml}", ["config.json", "loss_curve.png", "Artifacts"]),
    }
    docs = os.environ.get("ATLAS_UI_SCREENSHOTS")
    with mlflow_ui.MlflowUi(store, tmp_path / "ui.log") as ui:
        for name, (page, expected) in pages.items():
            text, png = mlflow_ui.render(f"{ui.url}/{page}", tmp_path / f"{name}.png", expected)
            missing = [t for t in expected if t not in text]
            assert not missing, f"{page}: {missing} not shown; the page says: {text[:3000]}"
            with Image.open(png) as img:
                assert img.size == mlflow_ui.SIZE
                # a page that rendered, not a blank or single-colour one
                assert len(img.convert("RGB").getcolors(maxcolors=1 << 16) or range(1 << 16)) > 50, name
                if docs:
                    mlflow_ui.save_for_docs(img, Path(docs) / f"{name}.png", DOC_WIDTH)
