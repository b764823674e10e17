"""`atlas eval <task>`: every evaluation subcommand; the task groups live in their own modules."""

from __future__ import annotations

import argparse
import importlib

# Modules that add `atlas eval` subcommands through `register_subcommands(subparsers)`.
TASK_MODULES = ("atlas_experiments.commands.eval_lm", "atlas_experiments.commands.eval_synthetic")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="evaluate a checkpoint or a model config (results JSON + MLflow)")
    inner = p.add_subparsers(dest="eval_task", metavar="<task>", required=True)
    for name in TASK_MODULES:
        importlib.import_module(name).register_subcommands(inner)
