"""`atlas train`: exact resume after SIGKILL, DDP (2 gloo ranks) == 1 rank, NaN skipping, atomic checkpoints,
tracking status (golden losses: test_golden.py)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from atlas_experiments.train import TrainConfig, loop
from atlas_experiments.train import checkpoint as ckpt
from atlas_experiments.train.metrics import read_metrics


def _write(tmp_path: Path, data: dict, name: str = "train.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data))
    return p


def _cli(*args: str, **kw) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "atlas_experiments.cli", *args], env=env, **kw)


def _losses(run: Path) -> list[float]:
    return [r["loss"] for r in read_metrics(run / "metrics.jsonl")]


def _one_rank_and_two(tmp_path: Path, one_cfg: Path, two_cfg: Path) -> tuple[list[float], list[float]]:
    """Train `one_cfg` on one rank into tmp/one and `two_cfg` on two gloo ranks (torchrun) into tmp/two; their
    losses."""
    one = _cli("train", "--config", str(one_cfg), "--out", str(tmp_path / "one"))
    assert one.wait(timeout=300) == 0
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    two = subprocess.run(
        [
            sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
            "-m", "atlas_experiments.cli", "train", "--config", str(two_cfg), "--out", str(tmp_path / "two"),
        ],
        env=env, timeout=300, capture_output=True, text=True,
    )  # fmt: skip
    assert two.returncode == 0, two.stderr[-3000:]
    return _losses(tmp_path / "one"), _losses(tmp_path / "two")


def test_sigkill_then_resume_gives_the_same_losses_bit_for_bit(tmp_path, prepared_data, train_dict):
    cfg = _write(tmp_path, train_dict(prepared_data, steps=40, checkpoint_interval=4, keep_checkpoints=1))
    ref = _cli("train", "--config", str(cfg), "--out", str(tmp_path / "ref"))
    assert ref.wait(timeout=300) == 0

    run = tmp_path / "killed"
    proc = _cli("train", "--config", str(cfg), "--out", str(run), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    metrics = run / "metrics.jsonl"
    # die mid-run, a few steps past a checkpoint (steps take ~30 ms: poll fast)
    while time.time() < deadline and proc.poll() is None:
        if metrics.exists() and len(metrics.read_text().splitlines()) >= 11:
            break
        time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    latest = ckpt.latest_checkpoint(run / "checkpoints")
    assert latest is not None
    assert not (run / "checkpoints" / "final").exists()
    at = ckpt.load_trainer_state(latest)["step"]
    killed = metrics.read_text().splitlines()
    log_before = len((run / "train.log").read_text().splitlines())

    resumed = _cli("train", "--config", str(cfg), "--out", str(run), "--resume", "auto")
    assert resumed.wait(timeout=300) == 0
    assert _losses(run) == _losses(tmp_path / "ref")  # bit for bit
    assert [r["step"] for r in read_metrics(run / "metrics.jsonl")] == list(range(1, 41))
    # a restart from step 0 reproduces those losses too (CPU is deterministic); these tell the two apart:
    # the records up to the checkpoint are the killed process's, byte for byte (tokens_per_s is a timing) ...
    assert metrics.read_text().splitlines()[:at] == killed[:at]
    # ... and the resumed process logged its resume and the remaining steps only
    new_log = (run / "train.log").read_text().splitlines()[log_before:]
    assert any(f"resumed from {latest} at step {at}" in line for line in new_log)
    logged = [int(m.group(1)) for line in new_log if (m := re.search(r" step (\d+) loss ", line))]
    assert logged == list(range(at + 1, 41))
    assert len(ckpt.step_checkpoints(run / "checkpoints")) == 1  # keep_checkpoints


def test_two_gloo_ranks_match_one_rank(tmp_path, prepared_data, train_dict):
    cfg = _write(tmp_path, train_dict(prepared_data, steps=4))
    a, b = _one_rank_and_two(tmp_path, cfg, cfg)
    assert len(a) == len(b) == 4
    assert max(abs(x - y) for x, y in zip(a, b)) < 1e-5
    grad_a = [r["grad_norm"] for r in read_metrics(tmp_path / "one" / "metrics.jsonl")]
    grad_b = [r["grad_norm"] for r in read_metrics(tmp_path / "two" / "metrics.jsonl")]
    assert max(abs(x - y) / x for x, y in zip(grad_a, grad_b)) < 1e-4


def _nan_at(monkeypatch, bad_steps: set[int]):
    real = loop.lm_loss
    calls = {"n": 0}

    def patched(model, x, y):
        calls["n"] += 1
        loss = real(model, x, y)
        step = (calls["n"] - 1) // 2 + 1  # two micro-batches per step
        return loss * float("nan") if step in bad_steps else loss

    monkeypatch.setattr(loop, "lm_loss", patched)


def test_non_finite_steps_are_skipped_and_counted(tmp_path, prepared_data, train_dict, monkeypatch):
    _nan_at(monkeypatch, {3, 4})
    cfg = TrainConfig.from_dict(train_dict(prepared_data, steps=6))
    result = loop.train(cfg, tmp_path / "run")
    records = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert result.skipped_steps == 2 and records[-1]["skipped_steps"] == 2
    assert records[2]["loss"] is None and records[4]["loss"] is not None


def test_too_many_non_finite_steps_stop_the_run_and_keep_the_checkpoint(
    tmp_path, prepared_data, train_dict, monkeypatch
):
    _nan_at(monkeypatch, {5, 6, 7})
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    data = train_dict(prepared_data, steps=8, checkpoint_interval=2, max_consecutive_skips=3)
    data["tracking"] = {"enabled": True, "uri": uri, "experiment": "nan"}
    with pytest.raises(loop.NonFiniteLossError, match="3 consecutive non-finite steps"):
        loop.train(TrainConfig.from_dict(data), tmp_path / "run")
    latest = ckpt.latest_checkpoint(tmp_path / "run" / "checkpoints")
    # skipped steps never touch the weights, so the step-6 checkpoint (after two skips) is still a good one
    assert latest.name == ckpt.step_name(6)
    state = ckpt.load_trainer_state(latest)
    assert state["step"] == 6 and state["skipped"] == 2
    assert all(torch.isfinite(t).all() for t in ckpt.load_model_state(latest).values())
    from mlflow.tracking import MlflowClient

    run_id = json.loads((tmp_path / "run" / "tracking.json").read_text())["run_id"]
    assert MlflowClient(tracking_uri=uri).get_run(run_id).info.status == "FAILED"


def test_crash_during_checkpoint_save_leaves_previous_loadable(
    tmp_path, prepared_data, train_dict, monkeypatch, one_thread
):
    cfg = TrainConfig.from_dict(train_dict(prepared_data, steps=6, checkpoint_interval=2))
    real_save = torch.save
    calls = {"n": 0}

    def failing_save(obj, path, *a, **k):
        calls["n"] += 1
        if calls["n"] == 2:  # the second checkpoint (step 4) dies after the model files were written
            raise OSError("disk full (simulated)")
        return real_save(obj, path, *a, **k)

    monkeypatch.setattr(ckpt.torch, "save", failing_save)
    with pytest.raises(OSError, match="disk full"):
        loop.train(cfg, tmp_path / "run")
    root = tmp_path / "run" / "checkpoints"
    assert [p.name for p in ckpt.step_checkpoints(root)] == [ckpt.step_name(2)]
    assert ckpt.load_trainer_state(root / ckpt.step_name(2))["step"] == 2
    monkeypatch.setattr(ckpt.torch, "save", real_save)
    loop.train(cfg, tmp_path / "run")  # resumes from step 2; the stale temp dir is cleaned
    assert not list(root.glob(".tmp-*"))
    assert len(read_metrics(tmp_path / "run" / "metrics.jsonl")) == 6
    loop.train(cfg, tmp_path / "ref")
    # the end state equals an uninterrupted run's only if step 2's optimizer moments and loader position came back
    got, want = (ckpt.load_trainer_state(d / "checkpoints" / "final") for d in (tmp_path / "run", tmp_path / "ref"))
    assert got["loader"] == want["loader"], "loader position not restored"
    _assert_same_optimizer_state(got["optimizer"], want["optimizer"])
    assert _losses(tmp_path / "run") == _losses(tmp_path / "ref")


def _assert_same_optimizer_state(got: dict, want: dict) -> None:
    assert got["param_groups"] == want["param_groups"]
    assert got["state"].keys() == want["state"].keys()
    for i, state in want["state"].items():
        assert state.keys() == got["state"][i].keys()
        for key, value in state.items():
            assert torch.equal(got["state"][i][key], value), f"optimizer state {i}.{key} differs: not restored?"


def test_tracked_run_logs_params_metrics_and_artifacts(tmp_path, prepared_data, train_dict):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    data = train_dict(prepared_data, steps=3, eval_interval=3, eval_batches=2)
    data["tracking"] = {"enabled": True, "uri": uri, "experiment": "pretrain", "run_name": "tiny"}
    result = loop.train(TrainConfig.from_dict(data), tmp_path / "run")
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    run = client.get_run(result.run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "tiny"
    assert run.data.params["optim.lr"] == "0.003" and "config.sha256" in run.data.tags
    assert {"loss", "lr", "grad_norm", "tokens_per_s", "mfu", "val_loss"} <= set(run.data.metrics)
    assert {a.path for a in client.list_artifacts(result.run_id)} >= {"config.json", "loss_curve.png"}


def test_two_gloo_ranks_with_fsdp2_match_one_rank(tmp_path, prepared_data, train_dict):
    cfg = _write(tmp_path, train_dict(prepared_data, steps=3, checkpoint_interval=2))
    fsdp = _write(tmp_path, train_dict(prepared_data, steps=3, checkpoint_interval=2, distributed="fsdp"), "fsdp.yaml")
    a, b = _one_rank_and_two(tmp_path, cfg, fsdp)
    assert max(abs(x - y) for x, y in zip(a, b)) < 1e-5
    # the gathered full checkpoint equals a plain one in layout and loads into a fresh model
    full = ckpt.load_model_state(tmp_path / "two" / "checkpoints" / "final")
    plain = ckpt.load_model_state(tmp_path / "one" / "checkpoints" / "final")
    assert full.keys() == plain.keys()
    assert max((full[k] - plain[k]).abs().max().item() for k in full) < 1e-4
