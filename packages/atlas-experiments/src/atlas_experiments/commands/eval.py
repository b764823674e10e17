"""`atlas eval <task>`: every evaluation subcommand; the task groups live in their own modules."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Mapping
from typing import Any

# Modules that add `atlas eval` subcommands through `register_subcommands(subparsers)`.
TASK_MODULES = ("atlas_experiments.commands.eval_lm", "atlas_experiments.commands.eval_synthetic")


def _add_tasks(inner: argparse._SubParsersAction) -> None:
    for name in TASK_MODULES:
        importlib.import_module(name).register_subcommands(inner)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="evaluate a checkpoint or a model config (results JSON + MLflow)")
    _add_tasks(p.add_subparsers(dest="eval_task", metavar="<task>", required=True))


def task_parser(task: str) -> argparse.ArgumentParser:
    """The parser of `atlas eval <task>` alone (the same options and defaults as the command line's)."""
    inner = argparse.ArgumentParser(prog="atlas eval").add_subparsers(dest="eval_task")
    _add_tasks(inner)
    if task not in inner.choices:
        raise ValueError(f"atlas eval: no task {task!r} (tasks: {', '.join(sorted(inner.choices))})")
    return inner.choices[task]


def run_task(task: str, options: Mapping[str, Any], *, where: str) -> int:
    """Run `atlas eval <task>` in this process from a mapping of its options (commands.options: keys checked and
    typed by the task's parser; `where` names the mapping in errors). Errors propagate as exceptions."""
    from atlas_experiments.commands.options import options_namespace

    args = options_namespace(task_parser(task), options, where=where)
    return int(args.handler(args) or 0)
