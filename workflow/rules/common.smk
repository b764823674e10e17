# Shared helpers: paths, the `atlas` command, and thin wrappers over workflow/lib (plain Python, tested there):
# run configs (run_configs.py), ablation tables (ablation_tables.py), evaluation jobs (eval_jobs.py), the claims
# study's jobs (study_jobs.py), Slurm runtimes (train_costs.py) and the DAG-build config check (config_checks.py).
import json
import os
import shutil
import sys
from pathlib import Path

import yaml

RESULTS = config["results"]
# Inputs the repository ships (data configs, ablation tables) resolve against its root; outputs against the
# working directory (`snakemake --directory .test` keeps everything it writes under .test/).
ROOT = Path(workflow.current_basedir).resolve().parents[1]  # this file is workflow/rules/common.smk

sys.path.insert(0, str(ROOT / "workflow" / "lib"))
import eval_jobs
import train_costs
from ablation_tables import ModelFields, read_table
from config_checks import validate_config
from run_configs import RunConfigs
from study_jobs import StudyJobs


def atlas_cli():
    """The `atlas` console script next to the running Python (a venv need not be activated), else PATH; a path
    relative to the working directory, so a moved checkout (venv and results with it) changes no rule parameter."""
    candidate = Path(sys.executable).parent / "atlas"
    return os.path.relpath(candidate) if candidate.exists() else (shutil.which("atlas") or "atlas")


ATLAS = atlas_cli()


def tracking_uri():
    """The `--tracking-uri` of every job: config tracking.uri, else $MLFLOW_TRACKING_URI (the cluster's shared
    server), else SQLite under results; the rule of `atlas_experiments.tracking`, not a copy of it. A SQLite path
    stays relative (each job resolves it in its working directory), so moving the checkout changes no rule
    parameter and reruns nothing."""
    from atlas_experiments.tracking import resolve_tracking_uri

    return resolve_tracking_uri(config["tracking"].get("uri"), RESULTS, absolute=False)


# ---- pretraining runs: a model of `models` or a cell of an ablation table; a table key that is no model setting
# fails here, at DAG build, naming the table, the row and the key
ABLATIONS = {
    axis: read_table(ROOT / path, ModelFields.from_classes(), shown=path)
    for axis, path in config["ablations"]["tables"].items()
}
RUNS = RunConfigs(config, RESULTS, ABLATIONS)
train_config, train_jobs = RUNS.train_config, RUNS.train_jobs
parent_record, parent_params = RUNS.parent_record, RUNS.parent_params


run_dir, final_checkpoint, all_targets = RUNS.run_dir, RUNS.final_checkpoint, RUNS.all_targets
pretrain_targets, ablation_cells, ablation_summary = RUNS.pretrain_targets, RUNS.ablation_cells, RUNS.ablation_summary


def train_inputs(wc):
    inputs = RUNS.train_inputs(wc.study, wc.run)
    if "parent" in inputs:
        inputs["parent"] = ancient(inputs["parent"])  # a new cell never reruns its finished siblings
    return inputs


COST_TABLE = train_costs.cost_table(config, RESULTS)


def train_runtime(wc):
    """Minutes a train job requests (workflow/lib/train_costs.py, docs/costs.md)."""
    return train_costs.train_runtime(config, RESULTS, f"{wc.study}/{wc.run}", train_config(wc.study, wc.run))


# ---- evaluation: the package's task registry decides commands, wildcards and targets (workflow/lib/eval_jobs.py)
def eval_args(task, section="evaluation"):
    return eval_jobs.option_args(config[section].get(task, {}))


def eval_targets():
    return eval_jobs.checkpoint_results(RESULTS, config["evaluation"]["tasks"], config["models"])


def synthetic_targets():
    spec = config.get("synthetic", {})
    return eval_jobs.synthetic_results(RESULTS, spec.get("tasks", []), spec.get("models", []))


wildcard_constraints:
    study=r"pretrain|ablation_[a-z_]+",
    axis="|".join(ABLATIONS) or "NONE",
    run=r"[A-Za-z0-9_.~\-]+",
    task=eval_jobs.wildcard(eval_jobs.CHECKPOINT),
    synthetic=eval_jobs.wildcard(eval_jobs.PER_PRESET),
    standalone=eval_jobs.wildcard(eval_jobs.STANDALONE),
    preset=r"[a-z0-9_]+",
    dataset=r"[A-Za-z0-9_\-]+",


# ---- the claims study (rules in study.smk): its settings, jobs and the corpus of its language-model protocols
STUDY = config.get("study") or yaml.safe_load((ROOT / "config" / "study.yaml").read_text())["study"]
STUDY_PLAN = StudyJobs.plan(STUDY, ROOT, RESULTS)
STUDY_ROOT, STUDY_ARGS = STUDY_PLAN.root, STUDY_PLAN.args
STUDY_MANIFEST, STUDY_DATA_ARG, LM_PROTOCOLS = STUDY_PLAN.manifest, STUDY_PLAN.data_arg, STUDY_PLAN.lm_protocols


def study_job_inputs(wc):
    inputs = STUDY_PLAN.job_inputs(wc.protocol)
    inputs["parent"] = ancient(inputs["parent"])  # a new parent record never reruns finished jobs
    return inputs


# ---- DAG-build validation (~8 s, mostly importing atlas_model)
validate_config(config, RUNS)
