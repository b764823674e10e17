"""Slurm runtimes of the training jobs from the cost table (docs/costs.md).

With `resources.train.runtime: cost` every train job requests the runtime its projected GPU-hours give on the
job's GPUs, times the margin, from the table `resources.train.cost.table` (written by `snakemake cost_table`). A
missing table, a job not in it, or a row whose key no longer matches the job's model, context and token budget is
an error that names the job and the command that rewrites the table: a stale runtime is never requested.

Plain Python, no snakemake: the workflow imports it at DAG build and the tests import it directly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


class CostTableError(ValueError):
    """The cost table cannot give a job's runtime; the message says which job and how to fix it."""


HINT = "rewrite it with `snakemake cost_table` (with the same --configfile options as this run)"


def requested_runtime(
    table: str | Path,
    name: str,
    train_config: dict[str, Any],
    gpus: int,
    margin: float,
    max_minutes: int | None = None,
) -> int:
    """Minutes to request for job `name` (its resolved TrainConfig mapping) on `gpus` GPUs, at most
    `max_minutes` (a partition's time limit: a job cut there resumes from its last checkpoint when Snakemake
    retries it or runs again, since the train rule passes `--resume auto`)."""
    from atlas_experiments.cost import JobSpec, read_table, runtime_minutes

    table = Path(table)
    hint = HINT
    if not table.is_file():
        raise CostTableError(f"resources.train.runtime is 'cost' but {table} does not exist: {hint}")
    rows = read_table(table)
    if name not in rows:
        raise CostTableError(f"{table}: no row for job {name!r}: {hint}")
    key = JobSpec.from_train_config(name, train_config).key()
    if rows[name]["key"] != key:
        raise CostTableError(
            f"{table}: the row of job {name!r} is stale (its model, context or token budget changed): {hint}"
        )
    minutes = runtime_minutes(rows[name]["gpu_hours"], gpus, margin)
    return minutes if max_minutes is None else min(minutes, max_minutes)


def train_runtime(config: dict[str, Any], results: str, name: str, train_config: dict[str, Any]) -> int:
    """Minutes train job `name` requests: `resources.train.runtime`, or with `runtime: cost` its projected GPU-hours
    on the job's GPUs times the margin, from the cost table (`cost_table`)."""
    train = config["resources"]["train"]
    if train["runtime"] != "cost":
        return train["runtime"]
    cost = train["cost"]
    table = cost_table(config, results)
    return requested_runtime(table, name, train_config, max(1, train["gpu"]), cost["margin"], cost["max_runtime"])


def cost_table(config: dict[str, Any], results: str) -> str:
    """The cost table a config's runtimes come from (`snakemake cost_table` writes it)."""
    return config["resources"]["train"]["cost"]["table"] or f"{results}/costs/train.json"
