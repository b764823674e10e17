"""The cost table of a set of training jobs: counted once per distinct model (a job's key), kept in one JSON file
that the workflow reads for Slurm runtimes, and shown as markdown (docs/costs.md)."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from atlas_experiments._io import write_json_atomic, write_text_atomic
from atlas_experiments.cost.projection import GpuAssumptions, JobCost, JobSpec, project

log = logging.getLogger(__name__)
# /2: rows carry the float64 GEMM FLOPs (Tally.gemm_flops_fp64), which /1 did not count
FORMAT = "atlas-cost-table/2"


class OldCostTable(ValueError):
    """A cost table of an earlier format: its counts lack what this version projects, so it is counted again."""


def read_table(path: str | Path) -> dict[str, dict[str, Any]]:
    """Rows by job name of a table written by `write_costs`; a foreign file or an older format is refused with its
    path."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not a cost table ({err})") from err
    found = data.get("format") if isinstance(data, dict) else None
    if isinstance(found, str) and found.startswith("atlas-cost-table/") and found != FORMAT:
        raise OldCostTable(
            f"{path}: a cost table of format {found!r}, this version writes {FORMAT!r}; count it again "
            "(`snakemake cost_table`, or `atlas cost --jobs ... --out` over it)"
        )
    if found != FORMAT or not isinstance(data.get("jobs"), list):
        raise ValueError(f"{path}: not a cost table (expected format {FORMAT!r})")
    return {row["name"]: row for row in data["jobs"]}


def cost_jobs(
    jobs: Iterable[JobSpec], assumptions: GpuAssumptions, out: str | Path, gpus: int, progress: bool = True
) -> list[JobCost]:
    """Count and project every job, reusing the rows of an existing `out` whose key still matches; `out` is
    rewritten (atomically) after each job, so an interrupted run keeps what it counted."""
    from tqdm import tqdm

    jobs = list(jobs)
    previous = {}
    if Path(out).exists():
        try:
            previous = {row["key"]: row for row in read_table(out).values()}
        except OldCostTable as err:
            log.warning("%s: every job is counted again", err)
    done: list[JobCost] = []
    counted: dict[str, JobCost] = {}
    for job in tqdm(jobs, desc="cost", unit="job", disable=not progress):
        key = job.key()
        if key in counted:
            cost = dataclasses.replace(counted[key], job=job)
        elif key in previous:
            cost = _from_row(previous[key], job, assumptions)
        else:
            log.info("counting %s (%s %s, T %d)", job.name, job.preset, job.size, job.seq_len)
            cost = project(job, assumptions)
        counted[key] = cost
        done.append(cost)
        write_costs(done, assumptions, gpus, out)
    return done


def _from_row(row: dict[str, Any], job: JobSpec, assumptions: GpuAssumptions) -> JobCost:
    """A stored row's counts, projected again under `assumptions` (counts do not depend on them)."""
    from atlas_experiments.cost.count import StepCount, Tally

    layer = Tally(**row["layer_per_token"])
    rest = Tally(**row["per_token"])
    rest.add(layer.scaled(-row["layers"]))
    step = StepCount(layer=layer, rest=rest, tokens=1)
    return project(job, assumptions, step=step)


def write_costs(costs: list[JobCost], assumptions: GpuAssumptions, gpus: int, out: str | Path) -> None:
    payload = {
        "format": FORMAT,
        "assumptions": {**assumptions.__dict__, "gpus": gpus},
        "jobs": [{**c.to_dict(), "runtime_minutes": c.runtime_minutes(gpus, assumptions)} for c in costs],
    }
    write_json_atomic(out, payload)


def _si(x: float) -> str:
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x:.3g}"


def markdown(costs: list[JobCost], assumptions: GpuAssumptions, gpus: int) -> str:
    """One row per job: counts per token, the model's share in GEMMs, and the projected hours."""
    head = (
        f"Projection: max(FLOPs at {assumptions.mfu:.0%} MFU of {assumptions.peak_tflops:g} TFLOP/s (float64 GEMMs "
        f"of {assumptions.fp64_tflops:g}), unfused bytes at {assumptions.hbm_tbps:g} TB/s); wall time on {gpus} GPUs; "
        f'runtime requested = wall x {assumptions.margin:g}. "fp64": the layer\'s GEMM FLOPs on float64 tensors.\n\n'
        "| job | preset | size | T | tokens | FLOPs / token (model) | layer FLOPs / token | GEMM share (layer) | fp64 "
        "| unfused bytes / token (layer) | kernels / token (layer) | GPU-hours | bound | wall hours "
        "| runtime before the cap (min) |\n"
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|\n"
    )
    rows = []
    for c in costs:
        layer = c.layer_per_token
        bound = "compute" if c.compute_hours >= c.bandwidth_hours else "bytes"
        rows.append(
            f"| {c.job.name} | {c.job.preset} | {c.job.size} | {c.job.seq_len} | {_si(c.job.tokens)} "
            f"| {_si(c.per_token.flops)} | {_si(layer.flops)} | {layer.gemm_share:.1%} "
            f"| {layer.fp64_share:.1%} | {_si(layer.bytes_unfused)}B "
            f"| {layer.kernels:.3g} | {c.gpu_hours:,.0f} | {bound} | {c.wall_hours(gpus):,.1f} "
            f"| {c.runtime_minutes(gpus, assumptions):,} |"
        )
    total = sum(c.gpu_hours for c in costs)
    return (
        head
        + "\n".join(rows)
        + f"\n\nAll jobs: {total:,.0f} GPU-hours ({total / gpus / 24:,.1f} days on {gpus} GPUs).\n"
    )


def write_markdown(costs: list[JobCost], assumptions: GpuAssumptions, gpus: int, out: str | Path) -> None:
    write_text_atomic(out, markdown(costs, assumptions, gpus))
