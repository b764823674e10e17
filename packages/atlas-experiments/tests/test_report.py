"""`atlas report`: tables and figures are a function of the tracked runs."""

from atlas_experiments.cli import main
from atlas_experiments.tracking import MlflowTracker


def _run(uri, experiment, name, params, metrics_by_step, tags=None):
    t = MlflowTracker(uri, experiment, name, tags or {}, flush_every_s=0.0)
    t.log_params(params)
    for step, metrics in metrics_by_step:
        t.log_metrics(metrics, step)
    t.end("FINISHED")


def test_report_tables_and_figures(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    for preset, loss in (("atlas", 3.0), ("transformer_pp", 3.5)):
        steps = [(s, {"loss": loss + 1 / s, "tokens": 1024 * s}) for s in range(1, 6)]
        steps[-1][1]["val_loss"] = loss + 0.1
        _run(uri, "pretrain", preset, {"model.preset": preset, "model.size": "tiny"}, steps)
    for c, vl in (("1", 3.4), ("4", 3.1)):
        _run(uri, "ablation_window", f"window~{c}", {"model.preset": "atlas"}, [(5, {"loss": vl, "val_loss": vl})])
    model = "results/x/runs/pretrain/atlas/checkpoints/final"
    tags = {"task": "niah", "model": model, "deviations": "tiny"}
    _run(uri, "eval", "niah:final", {}, [(0, {"acc/len=256/depth=0.5": 1.0})], tags=tags)

    out = tmp_path / "reports"
    assert main(["report", "--tracking-uri", uri, "--out", str(out)]) == 0
    pretrain = (out / "pretrain.md").read_text()
    assert "| atlas | atlas | tiny | 5120 |" in pretrain
    assert "18.9" in pretrain  # the paper's 760M Wiki ppl of Atlas beside ours
    ablations = (out / "ablations.md").read_text()
    assert "window=1" in ablations and "c = 1" in ablations and "21.98" in ablations
    evaluations = (out / "evaluations.md").read_text()
    assert "pretrain/atlas" in evaluations and "Table 3" in evaluations and "Protocol deviations: tiny" in evaluations
    assert (out / "figures" / "pretrain_loss.png").stat().st_size > 1000
    assert (out / "figures" / "ablation_window.png").stat().st_size > 1000
    assert "5 tracked runs" in (out / "README.md").read_text()
    first = pretrain
    assert main(["report", "--tracking-uri", uri, "--out", str(out)]) == 0
    assert (out / "pretrain.md").read_text() == first  # a pure function of the runs
