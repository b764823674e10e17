"""The registry of evaluation tasks: every `atlas eval` command, in report order (docs/eval-tasks.md).

The CLI builds its `atlas eval` subcommands from `TASKS`, the workflow its rules' commands, wildcards and config
checks, the report its sections of `evaluations.md`. A new task is one module here (options, run, report
section, `TASK`), one line below, and its tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from atlas_experiments.evaluation.tasks import babilong, learnability, lm_eval, mad, mqar, niah, ppl
from atlas_experiments.evaluation.tasks.spec import (
    CHECKPOINT,
    KINDS,
    PER_PRESET,
    STANDALONE,
    EvalTask,
    ReportContext,
    RunsByModel,
)

TASKS: Mapping[str, EvalTask] = MappingProxyType(
    {
        task.name: task
        for task in (
            ppl.TASK,
            lm_eval.TASK,
            niah.TASK,
            babilong.TASK,
            mqar.TASK,
            mad.TASK,
            learnability.TASK,
        )
    }
)


def get_task(name: str) -> EvalTask:
    """The task of a config key (`lm_eval`) or command (`lm-eval`); an unknown name lists the tasks there are."""
    tasks = TASKS  # looked up at each call, so a registry extended at run time (tests) is the one asked
    task = tasks.get(name.replace("-", "_"))
    if task is None:
        raise ValueError(f"no evaluation task {name!r} (tasks: {', '.join(tasks)})")
    return task


def task_names(kind: str) -> tuple[str, ...]:
    """The names of the tasks of one kind (spec.KINDS), in registry order."""
    if kind not in KINDS:
        raise ValueError(f"no task kind {kind!r} (kinds: {', '.join(KINDS)})")
    return tuple(name for name, task in TASKS.items() if task.kind == kind)


__all__ = [
    "CHECKPOINT",
    "KINDS",
    "PER_PRESET",
    "STANDALONE",
    "TASKS",
    "EvalTask",
    "ReportContext",
    "RunsByModel",
    "get_task",
    "task_names",
]
