"""The sweep skeleton MQAR and MAD share (`evaluation.sweep.run_sweep`): every point trained once and in order, the
best by the selection metric, finished points read back from a resume folder instead of trained again, and run
names that stay those of the snapshots written before the skeleton existed."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from atlas_experiments.evaluation import mad
from atlas_experiments.evaluation.mad import MADProtocol, run_mad
from atlas_experiments.evaluation.mqar import MQARProtocol
from atlas_experiments.evaluation.resume import ResumeDir
from atlas_experiments.evaluation.sweep import SweepPoint, run_sweep
from atlas_experiments.evaluation.synthetic_train import ModelChoice

NAN = float("nan")
CHOICE = ModelChoice("arm", "transformer_pp", "tiny")
PROTOCOL = MQARProtocol(steps=3)
POINTS = [SweepPoint(f"lr{lr:g}", {"lr": lr}) for lr in (1e-3, 3e-3, 1e-2, 3e-2)]
SCORES = {1e-3: 0.4, 3e-3: NAN, 1e-2: 0.7, 3e-2: 0.7}  # a diverged point, a tie at the top


def _scripted(calls: list[float]):
    def train(point: SweepPoint, snapshots):
        calls.append(point.identity["lr"])
        return {"lr": point.identity["lr"], "acc": SCORES[point.identity["lr"]]}

    return train


def _sweep(train, resume=None):
    return run_sweep(POINTS, train, select="acc", choice=CHOICE, seed=7, protocol=PROTOCOL, resume=resume)


def test_every_point_trains_once_in_order_and_the_best_is_the_earliest_top_score():
    calls: list[float] = []
    runs, best = _sweep(_scripted(calls))
    assert calls == [1e-3, 3e-3, 1e-2, 3e-2]
    assert [r["lr"] for r in runs] == calls
    assert best["lr"] == 1e-2  # 0.7 twice: the earlier; the NaN point never wins


def test_a_rerun_in_the_same_folder_reads_the_finished_points_and_trains_none(tmp_path: Path):
    resume = ResumeDir(tmp_path, every=5)
    calls: list[float] = []
    runs, best = _sweep(_scripted(calls), resume)
    assert len(list(tmp_path.glob("*.json"))) == 4 and calls == [1e-3, 3e-3, 1e-2, 3e-2]

    def never(point, snapshots):
        raise AssertionError(f"{point.label} was trained again")

    again, best_again = _sweep(never, resume)
    assert json.dumps(again) == json.dumps(runs) and best_again["lr"] == best["lr"]


def test_a_point_gets_a_snapshot_named_after_its_run_with_the_callers_records(tmp_path: Path):
    resume = ResumeDir(tmp_path, every=5)
    seen = []

    def train(point, snapshots):
        snap = snapshots({"curve": [[1, 0.5]]})
        seen.append((snap.path, snap.every, snap.records))
        return {"lr": point.identity["lr"], "acc": 0.1}

    run_sweep(POINTS[:1], train, select="acc", choice=CHOICE, seed=7, protocol=PROTOCOL, resume=resume)
    key = ResumeDir.key(CHOICE, 7, PROTOCOL, POINTS[0].label, POINTS[0].identity)
    assert seen == [(tmp_path / f"{key}.pt", 5, {"curve": [[1, 0.5]]})]
    assert (tmp_path / f"{key}.json").exists()


def test_mqar_run_names_are_those_written_before_the_skeleton():
    # the study's unfinished MQAR jobs keep snapshots under these names: a change would restart them from zero
    width, lr, seed = 64, 1e-3, 71
    identity = {"arm": CHOICE.describe(), "width": width, "lr": lr, "seed": seed, "protocol": PROTOCOL.describe()}
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:16]
    old = f"{CHOICE.name}-d{width}-lr{lr:g}-{digest}"
    assert ResumeDir.key(CHOICE, seed, PROTOCOL, f"d{width}-lr{lr:g}", {"width": width, "lr": lr}) == old


def test_a_point_identity_may_not_shadow_the_run_fields():
    with pytest.raises(ValueError, match=r"\['seed'\]"):
        ResumeDir.key(CHOICE, 7, PROTOCOL, "x", {"seed": 1})


def test_mad_with_a_resume_folder_gives_the_same_numbers_and_a_rerun_trains_nothing(tmp_path: Path, monkeypatch):
    protocol = MADProtocol(tasks=("in_context_recall",), grid="baseline", lrs=(1e-3, 3e-3), wds=(0.0,), width=16,
                           layers=1, steps=4, batch_size=4, num_train_examples=8, num_test_examples=8)  # fmt: skip
    models = [ModelChoice("transformer_pp", "transformer_pp", "tiny")]
    plain = run_mad(models, protocol, seed=2, progress=False)
    resume = ResumeDir(tmp_path, every=2)
    first = run_mad(models, protocol, seed=2, progress=False, resume=resume)
    assert first.metrics == plain.metrics
    assert len(list(tmp_path.glob("transformer_pp-in_context_recall-s0-lr*-wd0-*.json"))) == 2
    assert not list(tmp_path.glob("*.pt")), "a finished run keeps no snapshot"

    def never(*args, **kwargs):
        raise AssertionError("a finished MAD run was trained again")

    monkeypatch.setattr(mad, "fit", never)
    again = run_mad(models, protocol, seed=2, progress=False, resume=resume)
    assert again.metrics == plain.metrics
