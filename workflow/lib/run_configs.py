"""The pretraining runs of a workflow config: each run's model arm (`atlas_experiments.arms.ModelArm`), its
resolved TrainConfig mapping, the MLflow parent of an ablation axis and what defines it, and every job for the
cost table.

A run is `pretrain/<model>` (a model of config `models`) or `ablation_<axis>/<cell>` (a row of an ablation table on
top of `ablations.base`). Plain Python, no snakemake: the rules call it through thin wrappers in common.smk and
tests/test_run_configs.py imports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ablation_tables import Cells

from atlas_experiments.arms import ModelArm
from atlas_experiments.tracking.store import CELL_TAG_PREFIX

PRETRAIN = "pretrain"
ABLATION_PREFIX = "ablation_"


@dataclass(frozen=True)
class RunConfigs:
    """`config`: the workflow config (validated by the schema); `results`: its results directory; `ablations`: axis
    -> the cells of its table (`ablation_tables.read_table`)."""

    config: Mapping[str, Any]
    results: str
    ablations: Mapping[str, Cells]

    def arm(self, study: str, run: str) -> ModelArm:
        """The model of a pretraining run: a model of `models`, or a cell of an ablation table on the base."""
        size = self.config["train"]["size"]
        if study == PRETRAIN:
            spec = self.config["models"][run]
            return ModelArm(spec["preset"], size, spec.get("overrides", {}))
        axis = study.removeprefix(ABLATION_PREFIX)
        base = self.config["ablations"]["base"]
        return ModelArm(base["preset"], size, base.get("overrides", {})).over(self.ablations[axis][run])

    def train_config(self, study: str, run: str) -> dict[str, Any]:
        """The resolved TrainConfig mapping of one run (the rule `train_config` writes it as the run's train.json).
        An ablation cell carries its table row as MLflow tags, so reports never parse settings back from names."""
        tracking: dict[str, Any] = {"enabled": True, "experiment": study, "run_name": run}  # store: the rule's URI
        if study.startswith(ABLATION_PREFIX):
            axis = study.removeprefix(ABLATION_PREFIX)
            tracking["parent"] = self.parent_record(axis)
            tracking["tags"] = {CELL_TAG_PREFIX + key: text for key, text in self.ablations[axis].values[run].items()}
        train = self.config["train"]
        data = {"path": f"{self.results}/data/{train['data']}"}
        return self.arm(study, run).train_config(train["defaults"], data=data, tracking=tracking)

    def parent_record(self, axis: str) -> str:
        """The MLflow parent run of one ablation axis (its cells are nested under it)."""
        return f"{self.results}/runs/{ABLATION_PREFIX}{axis}/parent.json"

    def parent_params(self, axis: str) -> dict[str, Any]:
        """What defines an ablation study besides its cells: a change here starts a new parent (and reruns every
        cell)."""
        cfg = self.config
        return {"axis": axis, "table": cfg["ablations"]["tables"][axis], "base": cfg["ablations"]["base"],
                "train": cfg["train"]}  # fmt: skip

    def run_dir(self, study: str, run: str) -> str:
        return f"{self.results}/runs/{study}/{run}"

    def final_checkpoint(self, study: str, run: str) -> str:
        """The file that marks a finished run (the train rule's output)."""
        return f"{self.run_dir(study, run)}/checkpoints/final/COMPLETE"

    def pretrain_targets(self) -> list[str]:
        return [self.final_checkpoint(PRETRAIN, model) for model in self.config["models"]]

    def ablation_cells(self, axis: str) -> list[str]:
        return [self.final_checkpoint(f"{ABLATION_PREFIX}{axis}", run) for run in self.ablations[axis]]

    def ablation_summary(self, axis: str) -> str:
        return f"{self.results}/runs/{ABLATION_PREFIX}{axis}/summary.json"

    def all_targets(self) -> list[str]:
        """Every pretraining run and every ablation axis's summary."""
        return self.pretrain_targets() + [self.ablation_summary(axis) for axis in self.ablations]

    def train_inputs(self, study: str, run: str) -> dict[str, str]:
        """What a train job reads: the prepared corpus, its config and, for an ablation cell, the axis's parent
        record (which the rule marks `ancient`, so a new cell never reruns its finished siblings)."""
        inputs = {
            "manifest": f"{self.results}/data/{self.config['train']['data']}/manifest.json",
            "config": f"{self.run_dir(study, run)}/train.json",
        }
        if study.startswith(ABLATION_PREFIX):
            inputs["parent"] = self.parent_record(study.removeprefix(ABLATION_PREFIX))
        return inputs

    def runs(self) -> list[tuple[str, str, str]]:
        """Every pretraining run as (study, run, where its definition lives, for error messages)."""
        out = [(PRETRAIN, name, f"config models.{name}") for name in self.config["models"]]
        for axis, cells in self.ablations.items():
            out += [(f"{ABLATION_PREFIX}{axis}", run, f"{cells.where[run]} (run {run})") for run in cells]
        return out

    def train_jobs(self) -> dict[str, dict[str, Any]]:
        """Every pretraining job of the config, "<study>/<run>" -> its resolved TrainConfig mapping."""
        return {f"{study}/{run}": self.train_config(study, run) for study, run, _ in self.runs()}
