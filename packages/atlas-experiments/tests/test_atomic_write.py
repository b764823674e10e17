"""Atomic writes when two writers race on one file (two study workers starting jobs of one arm both write the
arm's model file): each writer renames its own temporary file, so neither fails and the file is always whole."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from atlas_experiments import _io

ROOT = Path(__file__).resolve().parents[3]


def _another_writer_renames_first(monkeypatch, other_write) -> list:
    """Make the first rename wait for `other_write` (another process writing the same file) to finish; returns the
    temporary names renamed, in order."""
    real_replace = os.replace
    calls = []

    def replace(src, dst):
        calls.append(src)
        if len(calls) == 1:
            other_write()
        real_replace(src, dst)

    monkeypatch.setattr(_io.os, "replace", replace)
    return calls


def test_a_second_writer_between_write_and_rename_does_not_break_the_first(tmp_path, monkeypatch):
    path = tmp_path / "arms" / "atlas.json"
    calls = _another_writer_renames_first(monkeypatch, lambda: _io.write_text_atomic(path, "second"))
    _io.write_text_atomic(path, "first")
    assert len(calls) == 2 and calls[0] != calls[1]
    assert path.read_text() == "first"  # the last rename wins, with a whole file
    assert sorted(p.name for p in path.parent.iterdir()) == ["atlas.json"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "result.json"
    _io.write_json_atomic(path, {"accuracy": 0.9})

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(_io.os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        _io.write_json_atomic(path, {"accuracy": 0.1})
    assert json.loads(path.read_text()) == {"accuracy": 0.9}
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]


def test_model_files_of_one_arm_written_twice_at_once(tmp_path, monkeypatch):
    from atlas_experiments.study.claims import load_claims
    from atlas_experiments.study.plan import plan_jobs, write_model_files

    registry = load_claims(ROOT / "config" / "study" / "claims.yaml")
    job = next(j for j in plan_jobs(registry, ["cpu"]) if j.arm is not None)
    calls = _another_writer_renames_first(monkeypatch, lambda: write_model_files([job], tmp_path))
    write_model_files([job], tmp_path)
    spec = json.loads(job.model_file(tmp_path).read_text())
    assert spec["name"] == job.arm.name and len(calls) == 2
    assert [p.name for p in job.model_file(tmp_path).parent.iterdir()] == [f"{job.arm.name}.json"]
