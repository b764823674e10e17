"""`atlas eval <task>`: one subcommand per task of the registry (`evaluation.tasks.TASKS`)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any


def _add_tasks(inner: argparse._SubParsersAction) -> None:
    from atlas_experiments.evaluation.tasks import TASKS

    for task in TASKS.values():
        # the config key works too (`atlas eval lm_eval`): the workflow's rules name a task by it
        aliases = [task.name] if task.name != task.command else []
        p = inner.add_parser(task.command, aliases=aliases, help=task.help, description=task.help)
        task.add_options(p)
        p.set_defaults(handler=task.run)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="evaluate a checkpoint or a model config (results JSON + MLflow)")
    _add_tasks(p.add_subparsers(dest="eval_task", metavar="<task>", required=True))


def task_parser(task: str) -> argparse.ArgumentParser:
    """The parser of `atlas eval <task>` alone (the same options and defaults as the command line's); `task` is a
    command (`lm-eval`) or a config key (`lm_eval`)."""
    from atlas_experiments.evaluation.tasks import get_task

    try:
        command = get_task(task).command
    except ValueError as err:
        raise ValueError(f"atlas eval: {err}") from err
    inner = argparse.ArgumentParser(prog="atlas eval").add_subparsers(dest="eval_task")
    _add_tasks(inner)
    return inner.choices[command]


def run_task(task: str, options: Mapping[str, Any], *, where: str) -> int:
    """Run `atlas eval <task>` in this process from a mapping of its options (commands.options: keys checked and
    typed by the task's parser; `where` names the mapping in errors). Errors propagate as exceptions."""
    from atlas_experiments.commands.options import options_namespace

    args = options_namespace(task_parser(task), options, where=where)
    return int(args.handler(args) or 0)
