"""Atomic checkpoints: a complete directory appears under its final name or not at all.

Layout of `<out>/checkpoints/step_000123/`: the Hugging Face model (`save_pretrained`, safetensors, with the
loader module that lets it load without importing atlas_model first: `atlas_model.portable`), the tokenizer the
model was trained with (`tokenizer.json`, `tokenizer_config.json`: lm-eval's `pretrained=<dir>` needs nothing else),
`trainer.pt` (optimizer, RNG states, loader state, counters) and `COMPLETE` (written last, inside the temp dir,
before the rename). A crash mid-save leaves only `.tmp-*` directories, which loading ignores and the next save
removes. `keep_last` newest step checkpoints are kept; `final/` is never pruned.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

_STEP_DIR = re.compile(r"^step_(\d{9})$")


def rng_state() -> dict[str, Any]:
    # the legacy global numpy RNG is what third-party code draws from, so it is what must be restored
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}  # noqa: NPY002
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])  # noqa: NPY002
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(
    root: Path,
    name: str,
    model_to_save: Any,
    trainer_state: dict[str, Any],
    keep_last: int | None = None,
    model_state: dict[str, torch.Tensor] | None = None,
    tokenizer: Any = None,
) -> Path:
    """Write `root/name` atomically; prune old `step_*` checkpoints down to `keep_last`.

    `model_state` (full tensors) replaces the module's own state dict, e.g. gathered from FSDP shards.
    `tokenizer` (a `transformers` tokenizer) is saved beside the model.
    """
    root.mkdir(parents=True, exist_ok=True)
    for stale in root.glob(".tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{name}-", dir=root))
    model_to_save.save_pretrained(tmp, safe_serialization=True, state_dict=model_state)
    if tokenizer is not None:
        tokenizer.save_pretrained(tmp)
    torch.save(trainer_state, tmp / "trainer.pt")
    (tmp / "COMPLETE").write_text(f"{trainer_state.get('step', '')}\n")
    _fsync_dir(tmp)
    final = root / name
    if final.exists():  # e.g. `final` rewritten after a resumed run: swap, then delete the old copy
        old = root / f".tmp-old-{name}"
        os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, final)
    _fsync_dir(root)
    if keep_last is not None:
        steps = step_checkpoints(root)
        for stale in steps[:-keep_last] if keep_last > 0 else steps:
            shutil.rmtree(stale, ignore_errors=True)
    return final


def step_name(step: int) -> str:
    return f"step_{step:09d}"


def step_checkpoints(root: Path) -> list[Path]:
    """Complete step checkpoints, oldest first."""
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if _STEP_DIR.match(p.name) and (p / "COMPLETE").is_file()]
    return sorted(found, key=lambda p: p.name)


def latest_checkpoint(root: Path) -> Path | None:
    steps = step_checkpoints(root)
    return steps[-1] if steps else None


def load_model_state(path: Path) -> dict[str, torch.Tensor]:
    """The model tensors of a checkpoint directory (single or sharded safetensors)."""
    from safetensors.torch import load_file

    single = path / "model.safetensors"
    if single.is_file():
        return load_file(single)
    index = path / "model.safetensors.index.json"
    if not index.is_file():
        raise FileNotFoundError(f"checkpoint {path} has no model.safetensors(.index.json)")
    import json

    files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    state: dict[str, torch.Tensor] = {}
    for f in files:
        state.update(load_file(path / f))
    return state


def load_trainer_state(path: Path) -> dict[str, Any]:
    if not (path / "COMPLETE").is_file():
        raise FileNotFoundError(f"checkpoint {path} is incomplete (no COMPLETE marker)")
    return torch.load(path / "trainer.pt", map_location="cpu", weights_only=False)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
