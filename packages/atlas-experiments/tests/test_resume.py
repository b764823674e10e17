"""Resume proves itself: the resumed process starts at the checkpoint's step and computes only the rest, and the
skipped-step counter, the RNG streams, the optimizer and the loader position survive.

CPU training is deterministic, so a run that ignored its checkpoint and started over would reproduce the losses
of an uninterrupted run; comparing losses alone proves nothing about resumption. Here the loss draws from every
RNG stream a checkpoint saves (dropout on the logits: torch; a jitter factor: python `random` and numpy's global
RNG), and a probe records which steps each process computed.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch.nn.functional as F

from atlas_experiments.train import TrainConfig, loop
from atlas_experiments.train import checkpoint as ckpt
from atlas_experiments.train.metrics import read_metrics


class Crash(Exception):
    """Stands in for a kill: the process dies mid-step, after its last checkpoint."""


class Probe:
    """Patches the loop: `lr_at` is called once per step with the 0-based step, which tells the patched loss
    which step it is in. The loss is stochastic, NaN at `nan_steps` (skipped by the loop), and raises `Crash` at
    `crash_step`."""

    def __init__(self, monkeypatch, nan_steps=(), crash_step=None):
        self.steps: list[int] = []  # 1-based steps this process computed
        self.nan_steps, self.crash_step = set(nan_steps), crash_step
        real_lr_at = loop.lr_at

        def lr_at(step, *args):
            self.steps.append(step + 1)
            return real_lr_at(step, *args)

        monkeypatch.setattr(loop, "lr_at", lr_at)
        monkeypatch.setattr(loop, "lm_loss", self.loss)

    def loss(self, model, x, y):
        step = self.steps[-1]
        if step == self.crash_step:
            raise Crash(f"killed in step {step}")
        logits = F.dropout(model(input_ids=x).logits.float(), p=0.2, training=True)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss = loss * (1 + 0.01 * random.random()) * (1 + 0.01 * np.random.random())  # noqa: NPY002
        return loss * float("nan") if step in self.nan_steps else loss


@pytest.fixture
def fresh_rngs():
    """`fresh_rngs(seed)` seeds python and numpy's global RNGs (train() seeds torch only); restored afterwards."""
    saved = ckpt.rng_state()

    def seed(value: int) -> None:
        random.seed(value)
        np.random.seed(value)  # noqa: NPY002

    yield seed
    ckpt.set_rng_state(saved)


def test_resume_starts_at_the_checkpoint_and_restores_counters_and_rngs(
    tmp_path, prepared_data, train_dict, monkeypatch, fresh_rngs, one_thread
):
    cfg = TrainConfig.from_dict(train_dict(prepared_data, steps=8, checkpoint_interval=4))
    fresh_rngs(0)
    Probe(monkeypatch, nan_steps={2})
    loop.train(cfg, tmp_path / "ref")
    ref = read_metrics(tmp_path / "ref" / "metrics.jsonl")

    run = tmp_path / "run"
    fresh_rngs(0)
    Probe(monkeypatch, nan_steps={2}, crash_step=6)
    with pytest.raises(Crash):
        loop.train(cfg, run)
    killed = (run / "metrics.jsonl").read_text().splitlines()
    assert len(killed) == 5 and ckpt.latest_checkpoint(run / "checkpoints").name == ckpt.step_name(4)

    fresh_rngs(1)  # a different process: only the checkpoint can bring the python / numpy streams back
    probe = Probe(monkeypatch, nan_steps={2})
    result = loop.train(cfg, run)
    assert probe.steps == [5, 6, 7, 8], "the resumed process must compute exactly the steps after the checkpoint"
    lines = (run / "metrics.jsonl").read_text().splitlines()
    assert lines[:4] == killed[:4]  # records up to the checkpoint are the killed process's, byte for byte
    log = (run / "train.log").read_text()
    assert f"resumed from {run / 'checkpoints' / ckpt.step_name(4)} at step 4" in log

    records = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in records] == list(range(1, 9))
    # the step-2 skip happened before the checkpoint: the resumed process must carry it on
    assert [r["skipped_steps"] for r in records] == [r["skipped_steps"] for r in ref] == [0] + [1] * 7
    assert result.skipped_steps == 1 and ckpt.load_trainer_state(run / "checkpoints" / "final")["skipped"] == 1
    # dropout and the jitter make every loss depend on the RNG streams: equal only if all were restored
    assert [r["loss"] for r in records] == [r["loss"] for r in ref], "RNG, optimizer or loader state not restored"
