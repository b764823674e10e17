"""The other ways into `train`: a finished run is not trained again, `resume="never"` starts over, an explicit
checkpoint path resumes from that checkpoint (not the newest), and the checkpoint schedule and trainer state that
resuming depends on.

Written against the mutants `make mutants` left alive in the resume path of train/loop.py (docs/testing.md);
test_resume.py covers the automatic resume after a crash.
"""

from __future__ import annotations

import pytest

from atlas_experiments.train import TrainConfig, loop
from atlas_experiments.train import checkpoint as ckpt
from atlas_experiments.train.metrics import read_metrics

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def computed(monkeypatch):
    """The 1-based steps the next `train` call computes (lr_at is called once per step)."""
    steps: list[int] = []
    real = loop.lr_at

    def lr_at(step, *args):
        steps.append(step + 1)
        return real(step, *args)

    monkeypatch.setattr(loop, "lr_at", lr_at)
    return steps


def _records(run):
    return [(r["step"], r["tokens"], r["loss"]) for r in read_metrics(run / "metrics.jsonl")]


def test_a_finished_run_is_not_trained_again(tmp_path, prepared_data, train_dict, computed):
    cfg = TrainConfig.from_dict(train_dict(prepared_data, steps=4))
    first = loop.train(cfg, tmp_path / "run")
    before = (tmp_path / "run" / "metrics.jsonl").read_text()
    computed.clear()
    again = loop.train(cfg, tmp_path / "run")
    assert computed == []
    assert (again.steps, again.tokens, again.skipped_steps) == (4, first.tokens, 0)
    assert first.tokens == 4 * cfg.global_batch_tokens
    assert (tmp_path / "run" / "metrics.jsonl").read_text() == before


def test_resume_never_starts_over(tmp_path, prepared_data, train_dict, computed):
    cfg = TrainConfig.from_dict(train_dict(prepared_data, steps=4, checkpoint_interval=2))
    loop.train(cfg, tmp_path / "run")
    ref = _records(tmp_path / "run")
    computed.clear()
    result = loop.train(cfg, tmp_path / "run", resume="never")
    assert computed == [1, 2, 3, 4]
    assert result.steps == 4 and _records(tmp_path / "run") == ref


def test_an_explicit_checkpoint_is_resumed_not_the_newest(tmp_path, prepared_data, train_dict, computed):
    cfg = TrainConfig.from_dict(train_dict(prepared_data, steps=6, checkpoint_interval=2))
    loop.train(cfg, tmp_path / "ref")
    ref = _records(tmp_path / "ref")
    root = tmp_path / "ref" / "checkpoints"
    # a step checkpoint only where a later step follows, `final` at the end
    assert [p.name for p in ckpt.step_checkpoints(root)] == [ckpt.step_name(2), ckpt.step_name(4)]
    state = ckpt.load_trainer_state(root / ckpt.step_name(2))
    assert (state["step"], state["tokens"], state["skipped"]) == (2, 2 * cfg.global_batch_tokens, 0)
    assert state["config"] == cfg.to_dict() and state["loader"]["position"] == 2 * 2 * 4
    assert {"optimizer", "rng"} <= set(state)

    computed.clear()
    result = loop.train(cfg, tmp_path / "ref", resume=str(root / ckpt.step_name(2)))
    assert computed == [3, 4, 5, 6]
    assert (result.steps, result.tokens) == (6, 6 * cfg.global_batch_tokens)
    assert _records(tmp_path / "ref") == ref  # tokens and losses continue exactly


def test_keep_checkpoints_prunes_during_the_run(tmp_path, prepared_data, train_dict):
    cfg = TrainConfig.from_dict(train_dict(prepared_data, steps=6, checkpoint_interval=2, keep_checkpoints=1))
    loop.train(cfg, tmp_path / "run")
    root = tmp_path / "run" / "checkpoints"
    assert [p.name for p in ckpt.step_checkpoints(root)] == [ckpt.step_name(4)]
    assert ckpt.load_trainer_state(root / "final")["step"] == 6


def test_a_fresh_run_starts_its_skip_streak_at_zero(tmp_path, prepared_data, train_dict, monkeypatch):
    # one non-finite first step is a streak of one: max_consecutive_skips=2 must let the run go on
    real = loop.lm_loss
    calls = {"n": 0}

    def nan_in_step_one(model, x, y):
        calls["n"] += 1
        loss = real(model, x, y)
        return loss * float("nan") if calls["n"] <= 2 else loss  # two micro-batches per step

    monkeypatch.setattr(loop, "lm_loss", nan_in_step_one)
    cfg = TrainConfig.from_dict(train_dict(prepared_data, steps=3, max_consecutive_skips=2))
    result = loop.train(cfg, tmp_path / "run")
    assert (result.steps, result.skipped_steps) == (3, 1)
