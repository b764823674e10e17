"""The options and the ending that the synthetic tasks share (MQAR and MAD train the same kind of small models
from presets; every synthetic run is named by its models)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from atlas_experiments.evaluation.results import EvalResult
    from atlas_experiments.evaluation.resume import ResumeDir

DEFAULT_MODELS = "atlas,gated_deltanet,transformer_pp"
# The deep memories of the presets (poly features of a 16-dim head, expansion 4) cost ~20 s and ~15 GB per step of
# 16 x 64 tokens on CPU with the PyTorch memory op; head dim 8 and expansion 2 bring that to ~1-2 s (docs).
CPU_MEMORY_HEAD_DIM = 8
CPU_MEMORY_EXPANSION = 2


def add_model_options(p: argparse.ArgumentParser, *, width: str) -> None:
    g = p.add_argument_group("models")
    g.add_argument(
        "--models",
        default=DEFAULT_MODELS,
        help=f"comma-separated presets and/or model config files (default {DEFAULT_MODELS})",
    )
    g.add_argument("--size", default="tiny", help="atlas_model size the presets start from (default tiny)")
    g.add_argument("--width", default=width, help=f"model width d (default {width}; MAD: 128, MQAR papers: 64-512)")
    g.add_argument("--layers", type=int, default=2, help="blocks (default 2, as MAD and MQAR)")
    g.add_argument("--heads", type=int, help="attention heads (default: the size's)")
    g.add_argument(
        "--memory-head-dim",
        type=int,
        default=CPU_MEMORY_HEAD_DIM,
        help=f"head dim of the deep memories (default {CPU_MEMORY_HEAD_DIM}, CPU-sized; 0 = the preset's)",
    )
    g.add_argument(
        "--memory-expansion",
        type=int,
        default=CPU_MEMORY_EXPANSION,
        help=f"inner-MLP expansion of the deep memories (default {CPU_MEMORY_EXPANSION}, CPU-sized; 0 = preset's 4)",
    )
    g.add_argument(
        "--match-memory",
        metavar="PRESET|FLOATS",
        help="size every arm's memory (memory heads, MLP expansion) to this preset's memory floats at the task's "
        "width, or to a float count; attention arms keep theirs (docs: eval-synthetic.md, Equal memory)",
    )


def add_resume_options(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--resume-dir",
        help="keep each run's snapshot and result here: a rerun skips finished runs and continues the unfinished "
        "one from its last snapshot (the numbers of an uninterrupted run)",
    )
    group.add_argument(
        "--snapshot-every", type=int, default=250, help="with --resume-dir: steps between snapshots (default 250)"
    )


def resume_dir(args: argparse.Namespace) -> ResumeDir | None:
    from atlas_experiments.evaluation.resume import ResumeDir

    return ResumeDir(args.resume_dir, args.snapshot_every) if args.resume_dir else None


def model_options(args: argparse.Namespace) -> dict[str, Any]:
    """The protocol fields `add_model_options` and the shared training options set (MQAR and MAD alike)."""
    return {
        "layers": args.layers,
        "heads": args.heads,
        "memory_head_dim": args.memory_head_dim or None,  # 0: the preset's
        "memory_expansion": args.memory_expansion or None,
        "match_memory": args.match_memory,
        "steps": args.steps,
        "batch_size": args.batch_size,
    }


def finish_synthetic(result: EvalResult, args: argparse.Namespace, figures: Sequence[Path] = ()) -> int:
    from atlas_experiments.evaluation.results import finish

    # a synthetic run is named by its models verbatim (they are presets or config names, not checkpoint paths)
    return finish(result, args, figures=figures, run_name=f"{result.task}:{result.model}")
