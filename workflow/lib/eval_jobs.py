"""The workflow's evaluation jobs, read from the package's task registry (`atlas_experiments.evaluation.tasks`):
which file each task writes for which model, the `atlas eval` command and options of a job, and the wildcard
patterns of the rules. A task added to the registry needs no change here nor in the rules (docs: eval-tasks.md).
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping
from typing import Any

from atlas_experiments.commands.options import option_argv
from atlas_experiments.evaluation.tasks import CHECKPOINT, PER_PRESET, STANDALONE, get_task, task_names


def command(task: str) -> str:
    """The `atlas eval` subcommand of a task's config key (`lm_eval` -> `lm-eval`)."""
    return get_task(task).command


def wildcard(kind: str) -> str:
    """The rule wildcard's pattern for the tasks of one kind; one that no file matches when there is none."""
    return "|".join(task_names(kind)) or "NONE"


def option_args(options: Mapping[str, Any]) -> str:
    """A task's config options as shell arguments ('--lengths 64,128 --samples 4 ...')."""
    return shlex.join(option_argv(options))


def checkpoint_results(results: str, tasks: Iterable[str], models: Iterable[str]) -> list[str]:
    """One result per (evaluation task, pretrained model) of the config."""
    models = list(models)
    return [f"{results}/eval/{task}/{model}.json" for task in tasks for model in models]


def standalone_result(results: str, task: str) -> str:
    return f"{results}/synthetic/{task}/result.json"


def synthetic_results(results: str, tasks: Iterable[str], presets: Iterable[str]) -> list[str]:
    """One result per (task, preset) for the tasks that train their own models; one per task for the tasks that
    train no model."""
    tasks, presets = list(tasks), list(presets)
    per_preset = [f"{results}/synthetic/{t}/{p}.json" for t in tasks if get_task(t).kind == PER_PRESET for p in presets]
    return per_preset + [standalone_result(results, t) for t in tasks if get_task(t).kind == STANDALONE]


__all__ = [
    "CHECKPOINT",
    "PER_PRESET",
    "STANDALONE",
    "checkpoint_results",
    "command",
    "option_args",
    "standalone_result",
    "synthetic_results",
    "wildcard",
]
