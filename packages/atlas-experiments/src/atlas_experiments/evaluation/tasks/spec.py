"""What an evaluation task is to the rest of the project (docs: packages/atlas-experiments/docs/eval-tasks.md).

One `EvalTask` per `atlas eval` command: its names, what it evaluates (the workflow's kind), its command-line
options, its run, and its section of `reports/evaluations.md`. The CLI, the workflow (rules, wildcards, config
checks) and the report read these records from `evaluation.tasks.TASKS` and nowhere else.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# What a task evaluates, which decides the workflow rule that runs it:
CHECKPOINT = "checkpoint"  # every pretrained model of config `models` (rule `evaluate`, config `evaluation`)
PER_PRESET = "per_preset"  # trains its own small models, one job per preset (rule `synthetic`, config `synthetic`)
STANDALONE = "standalone"  # trains no language model at all: one job (its own rule, config `synthetic`)
KINDS = (CHECKPOINT, PER_PRESET, STANDALONE)

# model name -> task key -> the latest tracked run of that task on that model (dicts of `tracking.load_runs`)
RunsByModel = Mapping[str, Mapping[str, Mapping[str, Any]]]


@dataclass(frozen=True)
class ReportContext:
    """What a task's report section may use beyond its own runs."""

    fig_dir: Path  # figures go here; the section links them as `figures/<name>.png`
    preset_of: Callable[[str], str | None]  # a pretrained model's name -> its preset (None: not a pretrained run)


@dataclass(frozen=True)
class EvalTask:
    """An evaluation task: `name` keys its config section, results, wildcards and report; `command` is the
    `atlas eval` subcommand (they differ only where a dash reads better on a command line: lm_eval / lm-eval)."""

    name: str
    command: str
    kind: str
    help: str
    add_options: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    report: Callable[[RunsByModel, ReportContext], str] | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"evaluation task {self.name!r}: kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if self.command.replace("-", "_") != self.name:
            raise ValueError(f"evaluation task {self.name!r}: command {self.command!r} must spell the same name")
