"""The skeleton MQAR and MAD share: train a fresh model per point of a hyper-parameter sweep, keep the best.

A comparison of models trained from scratch (`evaluation.mqar`, `evaluation.mad`) walks cells, each an arm under
one condition (a width, a task's difficulty setting); in every cell it trains one model per sweep point (lr, weight
decay), scores it and keeps the best point by a selection metric. `run_sweep` is that inner loop, written once:
with a `ResumeDir` every point's run keeps snapshots while it trains and its result once done, so a killed job
reruns only what it had not finished (the numbers of an uninterrupted run). What a cell does around it (build the
arm, measure its memory, turn the best run into metrics) stays with the task.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from atlas_experiments.evaluation.resume import ResumeDir
from atlas_experiments.evaluation.synthetic_models import ModelChoice
from atlas_experiments.evaluation.synthetic_train import FitSnapshot, best_run

log = logging.getLogger("atlas.eval")

# What `train` gets besides its point: a function that makes the run's snapshot from the caller's growing records
# (a learning curve), or None without a resume folder.
Snapshots = Callable[[dict[str, list[Any]]], FitSnapshot] | None


@dataclass(frozen=True)
class SweepPoint:
    """One training run of a cell's sweep. `identity`: what determines its numbers besides the arm, seed and
    protocol (the hyper-parameters `train` reads; it names the run's resume files); `label`: a short
    file-name-safe name for logs and those files."""

    label: str
    identity: Mapping[str, Any]


def run_sweep(
    points: Sequence[SweepPoint],
    train: Callable[[SweepPoint, Snapshots], dict[str, Any]],
    *,
    select: str,
    choice: ModelChoice,
    seed: int,
    protocol: Any,
    resume: ResumeDir | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every point's run (`train(point, snapshots)`, or its result from an earlier invocation in `resume`) in
    order, and the best of them by the metric `select` (`best_run`: the earlier point on a tie, NaN never wins)."""
    runs: list[dict[str, Any]] = []
    for point in points:
        key = resume.key(choice, seed, protocol, point.label, point.identity) if resume else ""
        finished = resume.finished(key) if resume else None
        if finished is not None:
            log.info("%s %s: finished in an earlier run (%s)", choice.name, point.label, resume.folder)
            runs.append(finished)
            continue
        snapshots = (lambda records, key=key: resume.snapshot(key, records)) if resume else None
        run = train(point, snapshots)
        if resume:
            resume.finish(key, run)
        runs.append(run)
    return runs, best_run(runs, select)


def arm_config_kwargs(protocol: Any, *, width: int, vocab_size: int) -> dict[str, Any]:
    """`synthetic_models.model_config`'s keyword arguments for an arm of a from-scratch protocol (MQAR, MAD)."""
    return {
        "vocab_size": vocab_size,
        "width": width,
        "layers": protocol.layers,
        "heads": protocol.heads,
        "memory_head_dim": protocol.memory_head_dim,
        "memory_expansion": protocol.memory_expansion,
    }
