"""The workflow's run configs, study jobs and DAG-build check (workflow/lib/run_configs.py, study_jobs.py,
config_checks.py): plain Python that common.smk wraps, tested without snakemake."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow" / "lib"))

from ablation_tables import ModelFields, read_table  # noqa: E402
from config_checks import validate_config  # noqa: E402
from run_configs import RunConfigs  # noqa: E402
from study_jobs import StudyJobs  # noqa: E402

from atlas_experiments.schema import ConfigError  # noqa: E402
from atlas_experiments.tracking.store import CELL_TAG_PREFIX  # noqa: E402

CONFIG = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())


@pytest.fixture(scope="module")
def runs() -> RunConfigs:
    fields = ModelFields.from_classes()
    tables = {axis: read_table(ROOT / path, fields, shown=path) for axis, path in CONFIG["ablations"]["tables"].items()}
    return RunConfigs(CONFIG, "res", tables)


def test_a_pretraining_run_is_its_model_on_the_train_defaults(runs):
    cfg = runs.train_config("pretrain", "atlas")
    spec = CONFIG["models"]["atlas"]
    assert cfg["model"] == {"preset": spec["preset"], "size": CONFIG["train"]["size"],
                            "overrides": spec.get("overrides", {})}  # fmt: skip
    assert cfg["data"]["path"] == f"res/data/{CONFIG['train']['data']}"
    assert cfg["tracking"] == {"enabled": True, "experiment": "pretrain", "run_name": "atlas"}
    for key, value in CONFIG["train"]["defaults"].items():
        if not isinstance(value, dict):
            assert cfg[key] == value


def test_an_ablation_cell_merges_its_row_over_the_base_and_carries_the_row_as_tags(runs):
    cfg = runs.train_config("ablation_window", "window~4__use_gamma_gate~false")
    base = CONFIG["ablations"]["base"]
    assert cfg["model"]["preset"] == base["preset"]
    assert cfg["model"]["overrides"]["memory"]["window"] == 4 and cfg["model"]["overrides"]["use_gamma_gate"] is False
    assert cfg["tracking"]["parent"] == "res/runs/ablation_window/parent.json"
    assert cfg["tracking"]["tags"] == {CELL_TAG_PREFIX + "window": "4", CELL_TAG_PREFIX + "use_gamma_gate": "false"}
    assert runs.parent_params("window")["table"] == CONFIG["ablations"]["tables"]["window"]


def test_every_run_is_a_job_named_by_study_and_run(runs):
    jobs = runs.train_jobs()
    assert len(jobs) == len(CONFIG["models"]) + sum(len(cells) for cells in runs.ablations.values())
    assert jobs["pretrain/atlas"] == runs.train_config("pretrain", "atlas")
    wheres = {where for _, _, where in runs.runs()}
    assert "config models.atlas" in wheres and any(w.startswith("config/ablations/window.tsv, row ") for w in wheres)


def test_the_config_check_names_the_bad_key(runs):
    validate_config(CONFIG, runs)
    bad = copy.deepcopy(CONFIG)
    bad["synthetic"]["models"] = ["atlas", "atlsa"]
    with pytest.raises(ConfigError, match=r"config synthetic\.models: 'atlsa' is not a preset"):
        validate_config(bad, runs)
    bad = copy.deepcopy(CONFIG)
    bad["models"]["atlas"]["overrides"] = {"memory": {"windw": 4}}
    with pytest.raises(ConfigError, match=r"config models\.atlas: .*windw"):
        validate_config(bad, RunConfigs(bad, "res", runs.ablations))


def test_the_study_jobs_are_the_registered_plan():
    settings = yaml.safe_load((ROOT / "config" / "study.yaml").read_text())["study"]
    study = StudyJobs.plan(settings, ROOT, "res")
    assert len(study.jobs) == 225 and "mqar_v2_fig7_cpu/atlas_w0/seed70" in study.jobs
    assert "mad_memorization_25_cpu/atlas/seed80" in study.jobs
    assert study.lm_protocols == {} and study.manifest == [] and study.data_arg == ""  # cpu: no lm protocol
    assert study.args == f"--claims {settings['claims']} --scale cpu --root res/study"
    assert study.job_inputs("mqar_v2_cpu") == {"plan": "res/study/plan.json", "parent": "res/study/parent.json"}
    assert study.results_files()[0] == f"res/study/{study.jobs[0]}.json"


def test_the_gpu_panel_trains_its_lm_protocols_on_one_corpus():
    settings = yaml.safe_load((ROOT / "config" / "study-gpu.yaml").read_text())["study"]
    study = StudyJobs.plan(settings, ROOT, "res")
    assert study.lm_protocols and len(set(study.lm_protocols.values())) == 1
    protocol = next(iter(study.lm_protocols))
    assert study.job_inputs(protocol)["manifest"] == f"res/data/{study.data}/manifest.json"
    assert study.data_arg == f"--data res/data/{study.data}"


def test_paths_targets_and_inputs_of_the_runs(runs):
    assert runs.final_checkpoint("pretrain", "atlas") == "res/runs/pretrain/atlas/checkpoints/final/COMPLETE"
    assert runs.pretrain_targets() == [runs.final_checkpoint("pretrain", m) for m in CONFIG["models"]]
    assert runs.all_targets()[-len(runs.ablations) :] == [f"res/runs/ablation_{a}/summary.json" for a in runs.ablations]
    assert runs.ablation_cells("window")[0].startswith("res/runs/ablation_window/window~")
    assert runs.train_inputs("pretrain", "atlas") == {
        "manifest": f"res/data/{CONFIG['train']['data']}/manifest.json",
        "config": "res/runs/pretrain/atlas/train.json",
    }
    assert runs.train_inputs("ablation_window", "window~1")["parent"] == "res/runs/ablation_window/parent.json"


def test_a_train_job_requests_the_configs_runtime_or_the_cost_tables():
    import train_costs

    cost = {"table": None, "margin": 1.5, "max_runtime": 2880}
    config = {"resources": {"train": {"runtime": 90, "gpu": 1, "cost": cost}}}
    assert train_costs.train_runtime(config, "res", "pretrain/atlas", {}) == 90
    assert train_costs.cost_table(config, "res") == "res/costs/train.json"
    config["resources"]["train"]["runtime"] = "cost"
    with pytest.raises(train_costs.CostTableError, match=r"res/costs/train\.json does not exist"):
        train_costs.train_runtime(config, "res", "pretrain/atlas", {})
    cost["table"] = "config/costs/elsewhere.json"
    assert train_costs.cost_table(config, "res") == "config/costs/elsewhere.json"
