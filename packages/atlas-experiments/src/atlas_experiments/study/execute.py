"""Running one study job: `atlas eval mqar | mad | learnability` for the synthetic protocols (in this process, from the
job's options: commands.eval.run_task), `atlas train` for the language-model protocol (validation loss at a fixed
token budget on a prepared corpus). Every job leaves a results
JSON at `Job.result(root)` whose `metrics` hold the claim's metric under `study.plan.metric_key`.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from atlas_experiments._io import write_json_atomic
from atlas_experiments.study._fields import thaw
from atlas_experiments.study.plan import Job, write_model_files

# tasks whose runs keep snapshots (`--resume-dir`): a job killed mid-run continues from its last one
RESUMABLE_TASKS = ("mqar", "mad")


def resume_folder(job: Job, root: str | Path) -> Path:
    """Where a resumable job keeps its snapshots until its result is final (`<seed>.resume/` beside it)."""
    return job.result(root).with_suffix(".resume")


# protocol args of an lm job that are TrainConfig keys as they are (the rest: data and seq_len)
_TRAIN_KEYS = ("global_batch_tokens", "micro_batch", "steps", "optim", "eval_batches", "precision", "device")


def lm_train_config(job: Job, data_dir: str | Path, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The TrainConfig mapping of an lm job: the arm's preset at the protocol's size with the protocol's model
    overrides, then the arm's own; validation on the protocol's batches once, at the end (the metric)."""
    args = {**thaw(job.protocol.args), **(overrides or {})}
    unknown = sorted(set(args) - {*_TRAIN_KEYS, "data", "seq_len"})
    if unknown:
        raise ValueError(f"protocols.{job.protocol.name}.args: not a key of an lm job: {', '.join(unknown)}")
    arm = job.arm.model_arm(job.protocol.size or "tiny", job.protocol.model_overrides)
    return arm.train_config(
        {key: args[key] for key in _TRAIN_KEYS if key in args},
        data={"path": str(data_dir), "seq_len": int(args["seq_len"])},
        tracking={"enabled": False},
        seed=job.seed,
        eval_interval=int(args["steps"]),
        checkpoint_interval=0,
        keep_checkpoints=1,
    )


def run_job(
    job: Job,
    root: str | Path,
    *,
    overrides: Mapping[str, Any] | None = None,
    data_dir: str | Path | None = None,
) -> Path:
    """Run `job` (untracked; the caller tracks the result) and return its results JSON, complete with its
    provenance (`study.results`: written to a partial file first, moved into place at the end). `overrides` replace
    protocol options (the pilot's short runs)."""
    from atlas_experiments.commands.eval import run_task
    from atlas_experiments.study.results import finalize, partial_path

    root = Path(root)
    start = time.perf_counter()
    partial = partial_path(job, root)
    if job.protocol.task != "lm":
        write_model_files([job], root)
        options = {**job.options(root, overrides=overrides, out=partial), "no_track": True, "no_progress": True}
        resume = resume_folder(job, root) if job.protocol.task in RESUMABLE_TASKS else None
        if resume is not None:
            options["resume_dir"] = str(resume)
        code = run_task(job.protocol.task, options, where=f"protocols.{job.protocol.name}.args (job {job.name})")
        if code:
            raise RuntimeError(f"study job {job.name}: `atlas eval {job.protocol.task}` exited with {code}")
        out = finalize(job, root, time.perf_counter() - start)
        if resume is not None:
            shutil.rmtree(resume, ignore_errors=True)
        return out
    if data_dir is None:
        raise ValueError(f"study job {job.name}: an lm job needs the prepared corpus (--data)")
    from atlas_experiments.train.config import TrainConfig
    from atlas_experiments.train.loop import train

    data = lm_train_config(job, data_dir, overrides)
    run_dir = job.result(root).with_suffix("")
    result = train(TrainConfig.from_dict(data), run_dir, resume="never", config_dict=data)
    from atlas_data.stats import unigram_cross_entropy

    metrics = {
        "val_loss/" + job.arm.name: result.final_val_loss,
        "loss/" + job.arm.name: result.final_loss,
        # the unigram gate's baseline (study/gates.py): the validation loss of a model that ignores its context
        "baseline/unigram_loss": unigram_cross_entropy(data_dir, evaluate=data["data"].get("val_split", "validation")),
    }
    out = {
        "task": "lm",
        "model": job.arm.name,
        "metrics": {k: float(v) for k, v in metrics.items() if v is not None},
        "protocol": {"study": job.protocol.name, "seed": job.seed, "train_config": data},
        "deviations": [f"study protocol {job.protocol.name}: {job.protocol.note}"],
        "details": {"steps": result.steps, "tokens": result.tokens, "skipped_steps": result.skipped_steps,
                    "run_dir": str(run_dir)},
    }  # fmt: skip
    write_json_atomic(partial, out)
    return finalize(job, root, time.perf_counter() - start)


def read_result(path: str | Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text())
