"""What a training job costs: counted FLOPs and bytes per token of each model (on the `meta` device) and the
projected GPU-hours and Slurm runtimes of a set of jobs (docs/costs.md)."""

from atlas_experiments.cost.count import StepCount, Tally, count_step
from atlas_experiments.cost.projection import GpuAssumptions, JobCost, JobSpec, project, runtime_minutes
from atlas_experiments.cost.table import cost_jobs, markdown, read_table, write_costs

__all__ = [
    "GpuAssumptions",
    "JobCost",
    "JobSpec",
    "StepCount",
    "Tally",
    "cost_jobs",
    "count_step",
    "markdown",
    "project",
    "read_table",
    "runtime_minutes",
    "write_costs",
]
