# Shared helpers: paths, the `atlas` command, run configs, ablation cells.
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
from ablation_tables import ModelFields, read_table


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


# the one merge rule of every config layer (mappings merge key by key, anything else replaces)
from atlas_experiments.configio import merge_settings as deep_merge
from atlas_experiments.tracking.store import CELL_TAG_PREFIX


# ---- ablations: per axis, run name -> the AtlasConfig overrides of one cell (workflow/lib/ablation_tables.py);
# a key that is no model setting fails here, at DAG build, naming the table, the row and the key
MODEL_FIELDS = ModelFields.from_classes()
ABLATIONS = {
    axis: read_table(ROOT / path, MODEL_FIELDS, shown=path) for axis, path in config["ablations"]["tables"].items()
}


def run_spec(study, run):
    """(preset, overrides) of a pretraining run: a model of `models`, or a cell of an ablation table."""
    if study == "pretrain":
        spec = config["models"][run]
        return spec["preset"], dict(spec.get("overrides", {}))
    axis = study.removeprefix("ablation_")
    base = config["ablations"]["base"]
    return base["preset"], deep_merge(base.get("overrides", {}), ABLATIONS[axis][run])


def train_config(study, run):
    """The resolved TrainConfig mapping of one run (passed to `atlas train` as JSON)."""
    preset, overrides = run_spec(study, run)
    tracking = {"enabled": True, "experiment": study, "run_name": run}  # the store: `--tracking-uri` of the rule
    if study.startswith("ablation_"):
        axis = study.removeprefix("ablation_")
        tracking["parent"] = parent_record(axis)
        tracking["tags"] = {CELL_TAG_PREFIX + key: text for key, text in ABLATIONS[axis].values[run].items()}
    cfg = deep_merge(
        config["train"]["defaults"],
        {
            "model": {"preset": preset, "size": config["train"]["size"], "overrides": overrides},
            "data": {"path": f"{RESULTS}/data/{config['train']['data']}"},
            "tracking": tracking,
        },
    )
    return cfg


def parent_record(axis):
    """The MLflow parent run of one ablation axis (its cells are nested under it)."""
    return f"{RESULTS}/runs/ablation_{axis}/parent.json"


def parent_params(axis):
    """What defines an ablation study besides its cells: a change here starts a new parent (and reruns every cell)."""
    base = config["ablations"]["base"]
    return {"axis": axis, "table": config["ablations"]["tables"][axis], "base": base, "train": config["train"]}


def train_inputs(wc):
    """An ablation cell needs its parent record; `ancient` so a new cell never reruns its finished siblings."""
    inputs = {
        "manifest": f"{RESULTS}/data/{config['train']['data']}/manifest.json",
        "config": f"{run_dir(wc.study, wc.run)}/train.json",
    }
    if wc.study.startswith("ablation_"):
        inputs["parent"] = ancient(parent_record(wc.study.removeprefix("ablation_")))
    return inputs


def run_dir(study, run):
    return f"{RESULTS}/runs/{study}/{run}"


def final_checkpoint(study, run):
    return f"{run_dir(study, run)}/checkpoints/final/COMPLETE"


def pretrain_targets():
    return [final_checkpoint("pretrain", m) for m in config["models"]]


def ablation_cells(axis):
    return [final_checkpoint(f"ablation_{axis}", run) for run in ABLATIONS[axis]]


def train_jobs():
    """Every pretraining job of the config, "<study>/<run>" -> its resolved TrainConfig mapping."""
    jobs = {f"pretrain/{model}": train_config("pretrain", model) for model in config["models"]}
    for axis, cells in ABLATIONS.items():
        jobs.update({f"ablation_{axis}/{run}": train_config(f"ablation_{axis}", run) for run in cells})
    return jobs


COST_TABLE = config["resources"]["train"]["cost"]["table"] or f"{RESULTS}/costs/train.json"


def train_runtime(wildcards):
    """Minutes a train job requests: the config's number, or with `runtime: cost` its projected GPU-hours on the
    job's GPUs times the margin, from the cost table (workflow/lib/train_costs.py, docs/costs.md)."""
    train = config["resources"]["train"]
    if train["runtime"] != "cost":
        return train["runtime"]
    from train_costs import requested_runtime

    cost = train["cost"]
    name = f"{wildcards.study}/{wildcards.run}"
    return requested_runtime(
        COST_TABLE,
        name,
        train_config(wildcards.study, wildcards.run),
        max(1, train["gpu"]),
        cost["margin"],
        cost["max_runtime"],
    )


def ablation_summary(axis):
    return f"{RESULTS}/runs/ablation_{axis}/summary.json"


def all_targets():
    return pretrain_targets() + [ablation_summary(axis) for axis in ABLATIONS]


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
STUDY_ROOT = f"{RESULTS}/study"
STUDY_ARGS = f"--claims {STUDY['claims']} --scale {STUDY['scale']} --root {STUDY_ROOT}"


def study_plan():
    from atlas_experiments.study.claims import load_claims
    from atlas_experiments.study.plan import plan_jobs

    registry = load_claims(ROOT / STUDY["claims"])
    return plan_jobs(registry, STUDY["scale"].split(","))


_PLAN = study_plan()
STUDY_JOBS = [job.name for job in _PLAN]
# language-model protocols train on a prepared corpus (`args.data`: a dataset of the `data` section)
LM_PROTOCOLS = {job.protocol.name: job.protocol.args["data"] for job in _PLAN if job.protocol.task == "lm"}
if len(set(LM_PROTOCOLS.values())) > 1:
    raise ValueError(f"study: the lm protocols use several corpora {sorted(set(LM_PROTOCOLS.values()))}; one at a time")
STUDY_DATA = next(iter(LM_PROTOCOLS.values()), None)
STUDY_MANIFEST = [f"{RESULTS}/data/{STUDY_DATA}/manifest.json"] if STUDY_DATA else []
STUDY_DATA_ARG = f"--data {RESULTS}/data/{STUDY_DATA}" if STUDY_DATA else ""


def study_job_inputs(wc):
    inputs = {"plan": f"{STUDY_ROOT}/plan.json", "parent": ancient(f"{STUDY_ROOT}/parent.json")}
    if wc.protocol in LM_PROTOCOLS:
        inputs["manifest"] = STUDY_MANIFEST[0]
    return inputs


# ---- DAG-build validation: the package checks every run, cell and option before any job starts (a typo fails
# `snakemake -n` naming the file, row and key); ~8 s, mostly importing atlas_model
def _validate_config():
    from atlas_experiments.evaluation.tasks import CHECKPOINT, PER_PRESET, STANDALONE
    from atlas_experiments.validate import check_presets, check_task_section, check_train_configs

    runs = [(f"config models.{name}", train_config("pretrain", name)) for name in config["models"]]
    for axis, cells in ABLATIONS.items():
        runs += [(f"{cells.where[run]} (run {run})", train_config(f"ablation_{axis}", run)) for run in cells]
    check_train_configs(runs)
    check_task_section(config["evaluation"], (CHECKPOINT,), "config evaluation")
    synthetic = config.get("synthetic", {})
    check_task_section(synthetic, (PER_PRESET, STANDALONE), "config synthetic", settings=("tasks", "models"))
    check_presets(synthetic.get("models", []), "config synthetic.models")


_validate_config()
