"""Checkpoint files without a training run: atomic save, pruning to keep_last, the `final` swap, which directories
count as checkpoints, sharded model files, and the RNG round trip.

The training tests reach these paths only through slow runs (keep_checkpoints only in the SIGKILL test); these pin
them in milliseconds, so that `make mutants` can afford them per mutant (docs/testing.md).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from atlas_experiments.train import checkpoint as ckpt


class TinyModel:
    """The one method `save_checkpoint` calls, writing what a Hugging Face model would (single safetensors file)."""

    def __init__(self, value: float) -> None:
        self.state = {"w": torch.full((2, 2), value)}

    def save_pretrained(self, path: Path, safe_serialization: bool, state_dict=None) -> None:
        assert safe_serialization
        save_file(state_dict if state_dict is not None else self.state, Path(path) / "model.safetensors")


def _save(root: Path, name: str, step: int, keep_last=None, value: float = 0.0, **kw) -> Path:
    return ckpt.save_checkpoint(root, name, TinyModel(value), {"step": step}, keep_last, **kw)


def _names(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir())


def test_save_writes_a_complete_directory_and_nothing_else(tmp_path):
    root = tmp_path / "run" / "checkpoints"  # created by the save, parents included
    path = _save(root, ckpt.step_name(7), 7, value=3.0)
    assert path == root / "step_000000007"
    assert _names(root) == ["step_000000007"]
    assert sorted(p.name for p in path.iterdir()) == ["COMPLETE", "model.safetensors", "trainer.pt"]
    assert (path / "COMPLETE").read_text() == "7\n"
    assert ckpt.load_trainer_state(path) == {"step": 7}
    assert torch.equal(ckpt.load_model_state(path)["w"], torch.full((2, 2), 3.0))


def test_the_complete_marker_holds_the_step_or_nothing(tmp_path):
    path = ckpt.save_checkpoint(tmp_path, "final", TinyModel(0.0), {"tokens": 3})
    assert (path / "COMPLETE").read_text() == "\n"


def test_an_explicit_model_state_replaces_the_modules_own(tmp_path):
    path = _save(tmp_path, "final", 1, value=1.0, model_state={"w": torch.zeros(3)})
    assert torch.equal(ckpt.load_model_state(path)["w"], torch.zeros(3))


@pytest.mark.parametrize(("keep_last", "kept"), [(None, [1, 2, 3, 4]), (2, [3, 4]), (1, [4]), (0, [])])
def test_keep_last_prunes_the_oldest_step_checkpoints_never_final(tmp_path, keep_last, kept):
    _save(tmp_path, "final", 0)
    for step in (1, 2, 3, 4):
        _save(tmp_path, ckpt.step_name(step), step, keep_last)
    assert [p.name for p in ckpt.step_checkpoints(tmp_path)] == [ckpt.step_name(s) for s in kept]
    assert (tmp_path / "final" / "COMPLETE").is_file()


def test_rewriting_final_swaps_it_whole(tmp_path):
    _save(tmp_path, "final", 3, value=1.0)
    _save(tmp_path, "final", 5, value=2.0)
    assert _names(tmp_path) == ["final"]  # no temp or old copy left behind
    assert ckpt.load_trainer_state(tmp_path / "final") == {"step": 5}
    assert torch.equal(ckpt.load_model_state(tmp_path / "final")["w"], torch.full((2, 2), 2.0))


def test_a_save_removes_the_leftovers_of_a_crashed_one(tmp_path):
    (tmp_path / ".tmp-step_000000002-abc").mkdir()
    (tmp_path / ".tmp-step_000000002-abc" / "model.safetensors").write_text("half written")
    _save(tmp_path, ckpt.step_name(4), 4)
    assert _names(tmp_path) == [ckpt.step_name(4)]


def test_only_complete_step_directories_count(tmp_path):
    assert ckpt.step_checkpoints(tmp_path / "missing") == [] and ckpt.latest_checkpoint(tmp_path) is None
    for step in (10, 2, 33):
        _save(tmp_path, ckpt.step_name(step), step)
    incomplete = tmp_path / ckpt.step_name(50)
    incomplete.mkdir()
    for other in ("step_12", "step_0000000099", "final", ".tmp-step_000000060-x"):
        (tmp_path / other).mkdir()
        (tmp_path / other / "COMPLETE").write_text("")
    (tmp_path / ckpt.step_name(70)).write_text("a file, not a checkpoint")
    assert [p.name for p in ckpt.step_checkpoints(tmp_path)] == [ckpt.step_name(s) for s in (2, 10, 33)]
    assert ckpt.latest_checkpoint(tmp_path) == tmp_path / ckpt.step_name(33)
    with pytest.raises(FileNotFoundError, match="incomplete"):
        ckpt.load_trainer_state(incomplete)


def test_sharded_model_files_are_merged(tmp_path):
    save_file({"a": torch.ones(2)}, tmp_path / "model-00001-of-00002.safetensors")
    save_file({"b": torch.zeros(3)}, tmp_path / "model-00002-of-00002.safetensors")
    weight_map = {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    state = ckpt.load_model_state(tmp_path)
    assert sorted(state) == ["a", "b"]
    assert torch.equal(state["a"], torch.ones(2)) and torch.equal(state["b"], torch.zeros(3))
    with pytest.raises(FileNotFoundError, match="no model.safetensors"):
        ckpt.load_model_state(tmp_path / "missing")


def test_rng_state_round_trip_restores_every_stream():
    saved_outer = ckpt.rng_state()
    try:
        state = ckpt.rng_state()
        first = (random.random(), np.random.random(), torch.rand(1).item())  # noqa: NPY002
        random.seed(123)
        np.random.seed(123)  # noqa: NPY002
        torch.manual_seed(123)
        ckpt.set_rng_state(state)
        assert (random.random(), np.random.random(), torch.rand(1).item()) == first  # noqa: NPY002
    finally:
        ckpt.set_rng_state(saved_outer)


def test_cuda_rng_streams_are_saved_and_restored_only_where_there_is_cuda(monkeypatch):
    # CPU-only hosts never take the CUDA branch; fake the device so that a GPU run's checkpoint format is pinned here
    calls = []
    monkeypatch.setattr(ckpt.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(ckpt.torch.cuda, "get_rng_state_all", lambda: ["gpu0-state"])
    monkeypatch.setattr(ckpt.torch.cuda, "set_rng_state_all", calls.append)
    state = ckpt.rng_state()
    assert state["cuda"] == ["gpu0-state"]
    ckpt.set_rng_state(state)
    assert calls == [["gpu0-state"]]
    ckpt.set_rng_state({k: v for k, v in state.items() if k != "cuda"})  # a CPU run's checkpoint on a GPU host
    assert calls == [["gpu0-state"]]
    monkeypatch.setattr(ckpt.torch.cuda, "is_available", lambda: False)
    ckpt.set_rng_state(state)  # a GPU run's checkpoint resumed on a CPU host
    assert calls == [["gpu0-state"]] and "cuda" not in ckpt.rng_state()


def test_a_crash_mid_save_leaves_only_a_temp_dir_that_the_next_save_removes(tmp_path, monkeypatch):
    _save(tmp_path, ckpt.step_name(2), 2)
    real = ckpt.torch.save

    def disk_full(*args, **kwargs):
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(ckpt.torch, "save", disk_full)
    with pytest.raises(OSError, match="disk full"):
        _save(tmp_path, ckpt.step_name(4), 4)
    left = [n for n in _names(tmp_path) if n != ckpt.step_name(2)]
    assert len(left) == 1 and left[0].startswith(f".tmp-{ckpt.step_name(4)}-")  # in the root, named for cleanup
    assert ckpt.latest_checkpoint(tmp_path) == tmp_path / ckpt.step_name(2)
    monkeypatch.setattr(ckpt.torch, "save", real)
    _save(tmp_path, ckpt.step_name(6), 6)
    assert _names(tmp_path) == [ckpt.step_name(2), ckpt.step_name(6)]


def test_a_crash_while_swapping_final_is_cleaned_up_by_the_next_save(tmp_path, monkeypatch):
    _save(tmp_path, "final", 3)
    real = ckpt.os.replace
    calls = []

    def second_replace_dies(src, dst):
        calls.append(dst)
        if len(calls) == 2:  # the old final has moved aside, the new one is not in place yet
            raise OSError("killed (simulated)")
        return real(src, dst)

    monkeypatch.setattr(ckpt.os, "replace", second_replace_dies)
    with pytest.raises(OSError, match="killed"):
        _save(tmp_path, "final", 5)
    assert all(n.startswith(".tmp-") for n in _names(tmp_path))  # both copies are temp dirs, none loads as final
    monkeypatch.setattr(ckpt.os, "replace", real)
    _save(tmp_path, "final", 7)
    assert _names(tmp_path) == ["final"] and ckpt.load_trainer_state(tmp_path / "final") == {"step": 7}


def test_cleanup_is_best_effort(tmp_path, monkeypatch):
    # a directory that cannot be deleted (a busy file on a network filesystem) must not fail the save
    real = ckpt.shutil.rmtree

    def refuse(path, ignore_errors=False):
        if not ignore_errors:
            raise OSError(f"cannot remove {path} (simulated)")

    _save(tmp_path, "final", 1)
    for step in (1, 2):
        _save(tmp_path, ckpt.step_name(step), step)
    (tmp_path / ".tmp-stale").mkdir()
    monkeypatch.setattr(ckpt.shutil, "rmtree", refuse)
    _save(tmp_path, "final", 3, value=1.0)  # the old final cannot be removed
    _save(tmp_path, ckpt.step_name(3), 3, keep_last=1)  # nor the pruned steps
    monkeypatch.setattr(ckpt.shutil, "rmtree", real)
    assert ckpt.load_trainer_state(tmp_path / "final") == {"step": 3}
    assert ckpt.latest_checkpoint(tmp_path) == tmp_path / ckpt.step_name(3)


class TinyTokenizer:
    """The one method `save_checkpoint` calls on a tokenizer."""

    def save_pretrained(self, path: Path) -> None:
        (Path(path) / "tokenizer.json").write_text('{"model": "tiny"}')


def test_the_tokenizer_is_saved_inside_the_atomic_directory(tmp_path):
    path = _save(tmp_path, "final", 1, tokenizer=TinyTokenizer())
    assert sorted(p.name for p in path.iterdir()) == ["COMPLETE", "model.safetensors", "tokenizer.json", "trainer.pt"]
    assert json.loads((path / "tokenizer.json").read_text()) == {"model": "tiny"}
