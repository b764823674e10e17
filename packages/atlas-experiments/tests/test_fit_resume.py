"""A synthetic-task run killed mid-training resumes from its snapshot with the numbers of an uninterrupted run
(`synthetic_train.FitSnapshot`, `evaluation.resume`, `atlas eval mqar --resume-dir`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch import nn

from atlas_data.synthetic.mqar import MQARConfig, generate_mqar
from atlas_experiments.evaluation.synthetic_train import FitSnapshot, TrainSettings, _BatchStream, fit

VOCAB = 16


def _module() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Embedding(VOCAB, 8), nn.Linear(8, VOCAB))


def _forward(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return module(x)


def _sets():
    # two settings of different sizes, one smaller than a batch: both stream kinds take turns
    return [
        generate_mqar(MQARConfig(VOCAB, 12, 2), 21, seed=1),
        generate_mqar(MQARConfig(VOCAB, 16, 3), 5, seed=2),
    ]


class _Killed(Exception):
    pass


def _run(snapshot: FitSnapshot | None, stop_at: int | None = None, steps: int = 13):
    module = _module()
    curve: list = snapshot.records.setdefault("curve", []) if snapshot else []

    def on_step(step: int, m: nn.Module) -> None:
        if step == stop_at:
            raise _Killed
        curve.append([step, float(m[1].weight.detach().sum())])

    settings = TrainSettings(steps=steps, batch_size=8, lr=3e-2)
    summary = fit(module, _sets(), settings, forward=_forward, seed=3, progress=False, every=2, on_step=on_step,
                  snapshot=snapshot)  # fmt: skip
    return module, summary, curve


def test_the_batch_stream_draws_what_the_epoch_generator_drew():
    import numpy as np

    def reference(n, batch_size, rng):
        while True:
            order = rng.permutation(n)
            if n <= batch_size:
                yield order
                continue
            for start in range(0, n - batch_size + 1, batch_size):
                yield order[start : start + batch_size]

    for n, b in ((21, 8), (5, 8), (16, 8), (7, 7)):
        ra, rb = np.random.default_rng(4), np.random.default_rng(4)
        ref, stream = reference(n, b, ra), _BatchStream(n, b)
        for _ in range(9):
            assert np.array_equal(next(ref), stream.next(rb))


def test_a_run_killed_between_snapshots_resumes_bit_for_bit(tmp_path: Path):
    whole, whole_summary, whole_curve = _run(None)
    snap = FitSnapshot(tmp_path / "run.pt", every=4, key="k", records={"curve": []})
    with pytest.raises(_Killed):
        _run(snap, stop_at=10)  # killed after the step-8 snapshot, two steps into the next stretch
    assert torch.load(snap.path, weights_only=True)["step"] == 8
    again = FitSnapshot(tmp_path / "run.pt", every=4, key="k", records={"curve": []})
    resumed, summary, curve = _run(again)
    for name, value in whole.state_dict().items():
        assert torch.equal(value, resumed.state_dict()[name]), name
    assert curve == whole_curve
    for key in ("steps", "loss_first", "loss_last", "nonfinite_steps"):
        assert summary[key] == whole_summary[key], key


def test_a_snapshot_of_another_run_is_refused_with_its_path(tmp_path: Path):
    snap = FitSnapshot(tmp_path / "run.pt", every=4, key="k", records={"curve": []})
    with pytest.raises(_Killed):
        _run(snap, stop_at=6)
    other = FitSnapshot(tmp_path / "run.pt", every=4, key="other", records={"curve": []})
    with pytest.raises(ValueError, match=r"run\.pt: written by another run"):
        _run(other)
    (tmp_path / "run.pt").write_bytes(b"truncated")
    with pytest.raises(ValueError, match=r"run\.pt: unreadable"):
        _run(FitSnapshot(tmp_path / "run.pt", every=4, key="k"))
    with pytest.raises(ValueError, match="every >= 1"):
        FitSnapshot(tmp_path / "x.pt", every=0, key="k")


def _mqar_argv(out: Path, resume: Path | None) -> list[str]:
    argv = [sys.executable, "-m", "atlas_experiments.cli", "eval", "mqar", "--models", "transformer_pp",
            "--settings", "12x2,16x3", "--vocab-size", "16", "--width", "16", "--layers", "1", "--steps", "120",
            "--batch-size", "8", "--lrs", "3e-3,1e-2", "--test-examples", "32", "--val-examples", "16",
            "--eval-every", "10", "--threads", "1", "--seed", "5", "--no-track", "--no-progress",
            "--out", str(out)]  # fmt: skip
    return argv + (["--resume-dir", str(resume), "--snapshot-every", "10"] if resume else [])


def test_atlas_eval_mqar_killed_with_sigkill_and_rerun_gives_the_uninterrupted_numbers(tmp_path: Path):
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    subprocess.run(_mqar_argv(tmp_path / "whole.json", None), check=True, env=env, capture_output=True)
    resume = tmp_path / "resume"
    argv = _mqar_argv(tmp_path / "killed.json", resume)
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    # kill once the first lr has finished and the second has left a snapshot: both resume paths are exercised
    while time.monotonic() < deadline and proc.poll() is None:
        if list(resume.glob("*.json")) and list(resume.glob("*lr0.01*.pt")):
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be killed mid-training"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (tmp_path / "killed.json").exists()
    rerun = subprocess.run(argv, check=True, env=env, capture_output=True, text=True)
    assert "finished in an earlier run" in rerun.stderr + rerun.stdout  # the first lr was not trained again
    whole = json.loads((tmp_path / "whole.json").read_text())
    killed = json.loads((tmp_path / "killed.json").read_text())
    assert killed["metrics"] == whole["metrics"]
    for a, b in zip(whole["details"]["runs"], killed["details"]["runs"], strict=True):
        assert a["curve"] == b["curve"]
        assert a["per_setting"] == b["per_setting"]
    assert not list(resume.glob("*.pt")), "a finished run keeps no snapshot"
