"""`atlas report`: tables and figures are a function of the tracked runs."""

import json
import re

from atlas_experiments import tracking
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
        _run(uri, "ablation_window", f"window~{c}", {"model.preset": "atlas"}, [(5, {"loss": vl, "val_loss": vl})],
             tags={tracking.CELL_TAG_PREFIX + "window": c})  # fmt: skip
    _run(uri, "ablation_window", "window", {"axis": "window"}, [(0, {"best_val_loss": 3.1})],
         tags={tracking.ROLE_TAG: "parent"})  # fmt: skip
    model = "results/x/runs/pretrain/atlas/checkpoints/final"
    evals = {
        "niah": {"acc": 0.5, "acc/niah_single_1/len=256": 1.0, "acc/niah_single_1/len=256/depth=0.5": 1.0,
                 "acc/niah_single_2/len=256": 0.0, "acc/niah_single_2/len=256/depth=0.5": 0.0},
        "ppl": {"ppl/len_64": 40.0, "ppl/len_128": 42.5},
        "lm_eval": {"offline/cloze_acc": 0.54, "offline/word_ppl": 123.0, "lm_eval/atlas_cloze/acc": 0.54},
        "babilong": {"acc": 0.25, "acc/len=0": 0.5, "acc/len=256": 0.0, "acc/qa1": 0.25},
    }  # fmt: skip
    for task, metrics in evals.items():
        tag = task.replace("_", "-")  # `atlas eval lm-eval` tags its runs with the command's name
        _run(uri, f"eval_{task}", f"{task}:pretrain/atlas", {}, [(0, metrics)], tags={"task": tag, "model": model,
                                                                             "deviations": "tiny"})  # fmt: skip
    mqar = {"acc/atlas/d=64": 0.3, "acc/atlas/d=64/len=64/pairs=8": 0.2, "acc/atlas/d=64/len=32/pairs=4": 0.4,
            "acc_init/atlas/d=64": 0.01, "acc_init/atlas/d=64/len=32/pairs=4": 0.01}  # fmt: skip
    _run(uri, "eval_mqar", "mqar:atlas", {}, [(0, mqar)], tags={"task": "mqar", "model": "atlas"})
    mad = {"acc/atlas/compression": 0.3, "acc/atlas/memorization": 0.9, "acc/atlas/in_context_recall": 0.6,
           "acc/atlas/average": 0.6}  # fmt: skip
    _run(uri, "eval_mad", "mad:atlas", {}, [(0, mad)], tags={"task": "mad", "model": "atlas"})

    out = tmp_path / "reports"
    assert main(["report", "--tracking-uri", uri, "--out", str(out)]) == 0
    pretrain = (out / "pretrain.md").read_text()
    assert "| atlas | atlas | tiny | 5120 |" in pretrain
    assert "18.9" in pretrain  # the paper's 760M Wiki ppl of Atlas beside ours
    ablations = (out / "ablations.md").read_text()
    assert "window=1" in ablations and "c = 1" in ablations and "21.98" in ablations
    assert "window=" not in ablations.split("## window")[1].split("|")[0]  # the parent run is not a cell
    assert ablations.count("| window=") == 2
    evaluations = (out / "evaluations.md").read_text()
    assert "**niah**: tiny" in evaluations
    lm = evaluations.split("## Language modeling")[1].split("\n## ")[0]
    assert "| model | cloze acc | word ppl | ppl@64 | ppl@128 | paper 760M wiki ppl |" in lm
    assert "| pretrain/atlas | 0.54 | 123 | 40 | 42.5 | 18.92 |" in lm
    niah = evaluations.split("## S-NIAH")[1].split("\n## ")[0]
    assert "| model | PK-256 | N-256 | mean |" in niah and "| pretrain/atlas | 100 | 0 | 50 |" in niah
    assert "| atlas | 100 | 99.2 |" in niah  # the paper's Table 3 row
    assert "| pretrain/atlas | 50 | 0 | 25 | 25 |" in evaluations  # BABILong: len 0, len 256, qa1, mean
    mqar_table = evaluations.split("## MQAR")[1]
    assert "| model | T32 P4 | T64 P8 | mean | untrained |" in mqar_table  # settings in numeric order
    assert "| atlas d=64 | 0.4 | 0.2 | 0.3 | 0.01 |" in mqar_table
    mad = evaluations.split("## MAD")[1]
    assert "| model | compression | icr | memorization | avg all |" in mad and "| atlas | 30 | 60 | 90 | 60 |" in mad
    assert "| atlas | 51.6 | 100 |" in mad  # the paper's Table 4 row
    for fig in ("pretrain_loss", "ablation_window", "niah", "mqar"):
        assert (out / "figures" / f"{fig}.png").stat().st_size > 1000, fig
    assert "(2 pretraining, 2 ablation cells, 6 evaluations)" in (out / "README.md").read_text()
    first = pretrain
    assert main(["report", "--tracking-uri", uri, "--out", str(out)]) == 0
    assert (out / "pretrain.md").read_text() == first  # a pure function of the runs


def test_ablation_rows_follow_the_current_tables_in_numeric_order(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    names = {
        "window": ["window~1", "window~16", "window~2", "window~4__use_gamma_gate~false", "window~4", "window~3"],
        "poly_degree": ["poly_degree~1", "poly_degree~2", "feature_map~identity"],
        "gated_mlp": ["memory~mlp", "memory~gated_mlp", "memory~linear"],
    }

    def values(name):  # what the workflow's table reader gives for a row (the names spell it here for brevity)
        return dict(part.split("~") for part in name.split("__"))

    cells = {axis: {n: values(n) for n in listed} for axis, listed in names.items()}
    tracked = [(axis, name) for axis, listed in names.items() for name in listed if name != "window~3"]
    tracked.append(("window", "window~8"))  # a row since deleted from the table
    for i, (axis, name) in enumerate(tracked):
        tags = {tracking.CELL_TAG_PREFIX + k: v for k, v in values(name).items()}
        _run(uri, f"ablation_{axis}", name, {}, [(1, {"loss": 4.0, "val_loss": 3.0 + i / 100})], tags=tags)
    _run(uri, "ablation_window", "window~32", {}, [(1, {"loss": 4.0, "val_loss": 3.5})])  # tracked without tags
    current = json.dumps(cells)
    out = tmp_path / "reports"
    assert main(["report", "--tracking-uri", uri, "--out", str(out), "--ablation-cells", current]) == 0
    ablations = (out / "ablations.md").read_text()

    window = ablations.split("## window")[1]
    shown = re.findall(r"^\| (window=[^|]+?) \|", window, re.M)
    assert shown == ["window=1", "window=2", "window=3", "window=4", "window=4, use_gamma_gate=false", "window=16"]
    assert "| window=3 | – | – | – | – |" in window  # in the table, not run yet
    assert "window=8" not in ablations  # deleted from the table: gone from the report

    poly = ablations.split("## poly_degree")[1].split("\n## ")[0]
    assert "| feature_map=identity | 3.0" in poly and "| w/o polynomial map | 22.14 | 50.57 |" in poly
    assert re.search(r"^\| poly_degree=1 \|.*\| – \| – \| – \|$", poly, re.M)  # degree 1 is not the paper's row
    gated = ablations.split("## gated_mlp")[1].split("\n## ")[0]
    assert re.search(r"^\| memory=linear \|.*\| linear memory \| 21.03 \| 49.74 \|$", gated, re.M)
    assert "(0 pretraining, 11 ablation cells, 0 evaluations)" in (out / "README.md").read_text()
    assert "window~32" not in ablations  # not a row of today's table

    assert main(["report", "--tracking-uri", uri, "--out", str(out)]) == 0  # no tables named: every tracked cell
    every = (out / "ablations.md").read_text().split("## window")[1]
    assert "| window=8 |" in every and "| use_gamma_gate=false, window=4 |" in every  # settings from the tags
    assert "| window~32 |" in every  # no tags: shown by its name, never parsed back from it


def test_bad_ablation_cells_option_is_an_error(tmp_path, capsys):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    args = ["report", "--tracking-uri", uri, "--out", str(tmp_path / "r"), "--ablation-cells", '{"window": ["x"]}']
    assert main(args) != 0
    assert "--ablation-cells: expected" in capsys.readouterr().err


def test_learnability_section_puts_our_ordering_beside_the_papers(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    names = ("low_rank", "mlp", "attention_mlp", "attention_inputs_mlp", "swa_mlp")
    final = {"layers=2/exp=1": (0.1, 0.5, 0.7, 0.3, 0.9), "layers=2/exp=4": (0.2, 0.4, 0.95, 0.6, 0.8)}
    metrics = {}
    for memory, losses in final.items():
        for i, (name, loss) in enumerate(zip(names, losses), start=1):
            metrics[f"final_loss/{memory}/{i}_{name}"] = loss
            metrics[f"mean_loss/{memory}/{i}_{name}"] = loss + 0.05
    tags = {"task": "learnability", "model": "memory-mlp"}
    _run(uri, "eval_learnability", "learnability:memory-mlp", {}, [(0, metrics)], tags=tags)
    out = tmp_path / "reports"
    assert main(["report", "--tracking-uri", uri, "--out", str(out)]) == 0
    section = (out / "evaluations.md").read_text().split("## Learnability")[1].split("\n## ")[0]
    assert (
        "| memory | 1 low_rank | 2 mlp | 3 attention_mlp | 4 attention_inputs_mlp | 5 swa_mlp | our order |" in section
    )
    # the paper's order exactly: every pair as the paper, every statement holds
    assert (
        "| layers=2/exp=1 | 0.1 | 0.5 | 0.7 | 0.3 | 0.9 | 1 < 4 < 2 < 3 < 5 | 10/10 | yes | yes | yes | yes | yes |"
        in section
    )
    # 3 ends above 5 and 4 above 2: two pairs out of the paper's order
    assert (
        "| layers=2/exp=4 | 0.2 | 0.4 | 0.95 | 0.6 | 0.8 | 1 < 2 < 4 < 5 < 3 | 8/10 | yes | yes | no | yes | no |"
        in section
    )
    assert "| paper (Fig. 6) | – | – | – | – | – | 1 < 4 < 2 < 3 < 5 |" in section
    assert (out / "figures" / "learnability.png").stat().st_size > 1000
