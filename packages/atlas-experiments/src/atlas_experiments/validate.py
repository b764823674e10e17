"""Checks the workflow runs when it builds its DAG, through the package's own validation, so that a typo fails
`snakemake -n` (naming the file, row and key) instead of a job that already holds its GPUs.

Plain mappings in, `ConfigError` out; nothing here imports snakemake (the workflow calls these functions).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from atlas_experiments.schema import ConfigError


def check_train_configs(runs: Iterable[tuple[str, dict]]) -> None:
    """Every (where, TrainConfig mapping) builds: known keys, typed values, a model spec whose preset, size and
    overrides pass `atlas_model`'s validation, a recipe whose size agrees. `where` prefixes the error."""
    from atlas_experiments.train.config import TrainConfig

    for where, data in runs:
        try:
            TrainConfig.from_dict(data)
        except ConfigError as err:
            raise ConfigError(f"{where}: {err}") from err


def check_command_options(command: Sequence[str], options: Mapping[str, Any], where: str) -> None:
    """`atlas <command...>` takes `options` (a config section's mapping): every key is one of the command's
    options and its value has the option's type and choices (commands.options, the rule the in-process runs use;
    required arguments that the rule adds itself, such as --out, are not asked for)."""
    from atlas_experiments.cli import build_parser
    from atlas_experiments.commands.options import options_namespace

    parser = build_parser()
    for name in command:
        parser = _subparser(parser, name)
    for action in parser._actions:
        action.required = False
    try:
        options_namespace(parser, options, where=f"{where}: atlas {' '.join(command)}")
    except ValueError as err:
        raise ConfigError(str(err)) from err


def check_task_section(
    section: Mapping[str, Any], kinds: Sequence[str], where: str, settings: Sequence[str] = ("tasks",)
) -> None:
    """A config section of evaluation tasks (`tasks`: the names that run; `settings`: the section's own keys; every
    other key: one task's options): each name is a task of the registry of one of `kinds`, and each task's options
    are options of its command."""
    from atlas_experiments.evaluation.tasks import TASKS

    allowed = {name: task for name, task in TASKS.items() if task.kind in kinds}
    for key in [*section.get("tasks", []), *(k for k in section if k not in settings)]:
        if key.replace("-", "_") not in allowed:
            raise ConfigError(f"{where}: {key!r} is not a task of this section (its tasks: {', '.join(allowed)})")
    for key, options in section.items():
        if key not in settings:
            check_command_options(["eval", allowed[key.replace("-", "_")].command], options, f"{where}.{key}")


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and name in action.choices:
            return action.choices[name]
    raise ConfigError(f"atlas: no command {name!r}")


def check_presets(names: Iterable[str], where: str) -> None:
    """Every name is an `atlas_model` preset."""
    import atlas_model

    for name in names:
        if name not in atlas_model.PRESETS:
            raise ConfigError(f"{where}: {name!r} is not a preset (known: {', '.join(atlas_model.PRESETS)})")
