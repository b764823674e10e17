"""The DAG-build check of a workflow config, through the package's own validation: every run's TrainConfig builds,
every evaluation task and option exists, every synthetic preset is a preset. A typo fails `snakemake -n` naming the
file, row and key, before any job holds a GPU (`atlas_experiments.validate`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from run_configs import RunConfigs


def validate_config(config: Mapping[str, Any], runs: RunConfigs) -> None:
    from atlas_experiments.evaluation.tasks import CHECKPOINT, PER_PRESET, STANDALONE
    from atlas_experiments.validate import check_presets, check_task_section, check_train_configs

    check_train_configs((where, runs.train_config(study, run)) for study, run, where in runs.runs())
    check_task_section(config["evaluation"], (CHECKPOINT,), "config evaluation")
    synthetic = config.get("synthetic", {})
    check_task_section(synthetic, (PER_PRESET, STANDALONE), "config synthetic", settings=("tasks", "models"))
    check_presets(synthetic.get("models", []), "config synthetic.models")
