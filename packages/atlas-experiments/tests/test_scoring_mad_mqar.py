"""MAD and MQAR scoring against hand-computed results: token accuracy (micro, macro), best-of-sweep selection and
the means over settings and tasks, on fixed predictions and scripted runs (no training)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from atlas_data.synthetic import IGNORE_INDEX, TokenDataset
from atlas_experiments.evaluation import mad, mqar
from atlas_experiments.evaluation.mad import MADProtocol, run_mad, task_score
from atlas_experiments.evaluation.mqar import MQARProtocol, mean_accuracy, run_mqar
from atlas_experiments.evaluation.synthetic_train import ModelChoice, best_run, evaluate

NAN = float("nan")
X = IGNORE_INDEX

# ------------------------------------------------------------------------------------------- token accuracy

VOCAB = 5
# The fake model predicts its input token at every position, so `inputs` are the predictions.
PREDICTIONS = np.array([[2, 0, 3], [1, 4, 4], [3, 3, 0]])
TARGETS = np.array([[2, X, 1], [1, 1, X], [3, 3, 3]])


def _echo(module, x):
    return 10.0 * torch.nn.functional.one_hot(x, VOCAB).float()


def _evaluate(predictions, targets, batch_size=64):
    data = TokenDataset(predictions.astype(np.int64), targets.astype(np.int64), VOCAB, "fixed")
    return evaluate(torch.nn.Identity(), data, forward=_echo, batch_size=batch_size)


@pytest.mark.parametrize("batch_size", [1, 2, 64])
def test_token_accuracy_micro_macro_and_loss(batch_size):
    score = _evaluate(PREDICTIONS, TARGETS, batch_size)
    # 7 scored answers (two IGNORE_INDEX); hits: row 0 pos 0, row 1 pos 0, row 2 pos 0 and 1 -> micro 4/7
    assert score["answers"] == 7
    assert score["acc"] == pytest.approx(4 / 7)
    # per class: 1 -> 1 hit of 3 answers, 2 -> 1 of 1, 3 -> 2 of 3; classes 0 and 4 are never a target (4 is only
    # predicted) and do not count: macro (1/3 + 1 + 2/3) / 3 = 2/3
    assert score["acc_macro"] == pytest.approx(2 / 3)
    # logits 10 on one token of 5: a hit costs log(1 + 4 e^-10), a miss log(e^10 + 4)
    hit, miss = math.log(1 + 4 * math.exp(-10)), math.log(math.exp(10) + 4)
    assert score["loss"] == pytest.approx((4 * hit + 3 * miss) / 7)


def test_token_accuracy_zero_and_one():
    scored = TARGETS != X
    right = np.where(scored, TARGETS, 0)
    wrong = np.where(scored, (TARGETS + 1) % VOCAB, 0)
    for predictions, expected in ((wrong, 0.0), (right, 1.0)):
        score = _evaluate(predictions, TARGETS)
        assert (score["acc"], score["acc_macro"]) == (expected, expected)


def test_token_accuracy_without_answers_is_nan():
    score = _evaluate(PREDICTIONS, np.full_like(TARGETS, X))
    assert score["answers"] == 0 and math.isnan(score["acc"]) and math.isnan(score["acc_macro"])


# -------------------------------------------------------------------------------------------------------- MAD


def _run(acc, acc_macro=None, lr=1e-3, wd=0.0):
    return {"lr": lr, "weight_decay": wd, "acc": acc, "acc_macro": acc if acc_macro is None else acc_macro, "loss": 1.0}


def best_of_sweep(runs):  # MAD's selection (mad-lab): the sweep point with the best test accuracy
    return best_run(runs, "acc")


def test_best_of_sweep_picks_the_highest_accuracy_first_on_ties_and_skips_nan():
    runs = [_run(0.5, lr=1), _run(NAN, lr=2), _run(0.75, lr=3), _run(0.25, lr=4)]
    assert best_of_sweep(runs)["lr"] == 3
    assert best_of_sweep([_run(0.4, 0.35, lr=1), _run(0.4, 0.45, lr=2)])["lr"] == 1
    assert best_of_sweep([_run(NAN, lr=1), _run(0.0, lr=2)])["lr"] == 2  # a NaN is not the max
    assert best_of_sweep([_run(NAN, lr=1), _run(NAN, lr=2)])["lr"] == 1


def test_task_score_is_the_mean_over_settings():
    # (0.75 + 0.40 + 0.20) / 3 = 0.45; macro (0.70 + 0.35 + 0.0) / 3 = 0.35
    assert task_score([_run(0.75, 0.70), _run(0.40, 0.35), _run(0.20, 0.0)]) == pytest.approx((0.45, 0.35))
    assert task_score([_run(0.0), _run(0.0)]) == (0.0, 0.0)
    assert task_score([_run(1.0), _run(1.0)]) == (1.0, 1.0)


ICR, MEM = "in_context_recall", "memorization"
LRS, WDS = (1e-3, 5e-4), (0.0, 0.1)
# (acc, acc_macro) of model "m" per task, setting index and sweep point (lr, wd) in the order run_mad sweeps them:
# (1e-3, 0), (1e-3, 0.1), (5e-4, 0), (5e-4, 0.1)
SWEEP = {
    (ICR, 0): [(0.50, 0.50), (0.75, 0.70), (0.25, 0.25), (NAN, NAN)],  # best 0.75 at (1e-3, 0.1)
    (ICR, 1): [(0.40, 0.35), (0.40, 0.45), (0.30, 0.30), (0.20, 0.20)],  # tie: the first, (1e-3, 0), macro 0.35
    (MEM, 0): [(0.00, 0.00), (0.00, 0.00), (1.00, 1.00), (0.50, 0.50)],  # best 1.0 at (5e-4, 0)
    (MEM, 1): [(0.60, 0.60), (0.90, 0.80), (0.80, 0.85), (0.70, 0.70)],  # best 0.9 at (1e-3, 0.1), macro 0.8
}


def test_run_mad_best_per_setting_mean_per_task_and_average(monkeypatch):
    protocol = MADProtocol(tasks=(ICR, MEM), grid="reduced", lrs=LRS, wds=WDS)
    labels = {t: [s.label for s in protocol.settings(t)] for t in protocol.tasks}
    assert all(len(v) == 2 for v in labels.values())
    fixed = {"zero": (0.0, 0.0), "one": (1.0, 1.0)}

    def fake_train_and_score(choice, setting, train, test, lr, wd, protocol, **kw):
        point = [(a, b) for a in LRS for b in WDS].index((lr, wd))
        acc, macro = fixed.get(choice.name) or SWEEP[setting.task, labels[setting.task].index(setting.label)][point]
        return _run(acc, macro, lr, wd)

    monkeypatch.setattr(mad, "generate_mad", lambda setting, split, seed: None)
    monkeypatch.setattr(mad, "_train_and_score", fake_train_and_score)
    sizes = {"m": 100, "zero": 200, "one": 300}
    monkeypatch.setattr(
        mad, "memory_sizes", lambda choice, setting, protocol, **kw: {"memory": sizes[choice.name], "state": 7}
    )
    models = [ModelChoice(name, "atlas") for name in ("m", "zero", "one")]
    result = run_mad(models, protocol, progress=False)
    metrics = {k: v for k, v in result.metrics.items() if k.startswith("acc")}
    for name, size in sizes.items():  # every arm's memory size is reported per task, beside its accuracy
        for task in (ICR, MEM):
            assert result.metrics[f"memory_size/{name}/{task}"] == size
            assert result.metrics[f"state_size/{name}/{task}"] == 7
            assert result.details["memory_size"][name][task]["seq_len"] == protocol.settings(task)[0].seq_len

    expected_m = {
        f"acc/m/{ICR}/{labels[ICR][0]}": 0.75,
        f"acc/m/{ICR}/{labels[ICR][1]}": 0.40,
        f"acc/m/{MEM}/{labels[MEM][0]}": 1.0,
        f"acc/m/{MEM}/{labels[MEM][1]}": 0.9,
        f"acc/m/{ICR}": (0.75 + 0.40) / 2,  # 0.575
        f"acc/m/{MEM}": (1.0 + 0.9) / 2,  # 0.95
        f"acc_macro/m/{ICR}": (0.70 + 0.35) / 2,  # 0.525, the macro of the selected runs
        f"acc_macro/m/{MEM}": (1.0 + 0.8) / 2,  # 0.9
        "acc/m/average": (0.575 + 0.95) / 2,  # 0.7625
    }
    assert {k: v for k, v in metrics.items() if k.split("/")[1] == "m"} == pytest.approx(expected_m)
    for name, value in (("zero", 0.0), ("one", 1.0)):
        mine = {k: v for k, v in metrics.items() if k.split("/")[1] == name}
        assert len(mine) == len(expected_m) and all(v == value for v in mine.values()), mine


# ------------------------------------------------------------------------------------------------------- MQAR


def _mqar_run(lr, mean_acc):
    return {"lr": lr, "mean_acc": mean_acc}


def test_mqar_mean_accuracy_is_the_unweighted_mean_over_settings():
    # (1.0 + 0.5 + 0.25 + 0.0) / 4 = 0.4375, whatever the settings' sizes
    assert mean_accuracy([{"acc": 1.0}, {"acc": 0.5}, {"acc": 0.25}, {"acc": 0.0}]) == pytest.approx(0.4375)
    assert mean_accuracy([{"acc": 0.0}, {"acc": 0.0}]) == 0.0
    assert mean_accuracy([{"acc": 1.0}, {"acc": 1.0}]) == 1.0


def best_lr_run(runs):  # MQAR's selection without a validation split
    return best_run(runs, "mean_acc")


def test_mqar_best_lr_is_the_highest_mean_earliest_on_ties():
    assert best_lr_run([_mqar_run(1, 0.2), _mqar_run(2, 0.6), _mqar_run(3, 0.4)])["lr"] == 2
    assert best_lr_run([_mqar_run(1, 0.6), _mqar_run(2, 0.6)])["lr"] == 1
    assert best_lr_run([_mqar_run(1, 0.0)])["lr"] == 1
    nan = float("nan")  # a diverged run never wins, also when it comes first
    assert best_lr_run([_mqar_run(1, nan), _mqar_run(2, 0.3), _mqar_run(3, 0.1)])["lr"] == 2
    assert best_lr_run([_mqar_run(1, nan), _mqar_run(2, nan)])["lr"] == 1


MQAR_LRS = (1e-3, 3e-3, 1e-2)
# held-out accuracy per (lr, setting label); lr None is the untrained model
MQAR_ACC = {
    None: {"len=16/pairs=2": 0.0, "len=32/pairs=4": 0.25},
    1e-3: {"len=16/pairs=2": 0.5, "len=32/pairs=4": 0.25},  # mean 0.375
    3e-3: {"len=16/pairs=2": 1.0, "len=32/pairs=4": 0.5},  # mean 0.75: the best
    1e-2: {"len=16/pairs=2": 0.75, "len=32/pairs=4": 0.75},  # mean 0.75: tied, later
}


def test_run_mqar_reports_the_best_lr_and_its_per_setting_accuracy(monkeypatch):
    protocol = MQARProtocol(settings=((32, 4), (16, 2)), lrs=MQAR_LRS, widths=(64,), steps=10)
    labels = [c.label for c in protocol.configs]
    assert sorted(labels) == sorted(MQAR_ACC[None])

    def fake_fit(model, train, settings, **kw):
        model.lr = settings.lr
        return {"seconds": 0.0, "loss_last": 0.5}

    monkeypatch.setattr(mqar, "_datasets", lambda protocol, seed: (labels, labels))
    monkeypatch.setattr(mqar, "model_config", lambda choice, **kw: None)
    monkeypatch.setattr(mqar, "build_lm", lambda cfg, seed, device: SimpleNamespace(lr=None))
    monkeypatch.setattr(mqar, "count_parameters", lambda model: 1)
    monkeypatch.setattr(mqar, "state_size", lambda model, t, v, device: {"state": 2 * t, "memory": 3 * t})
    monkeypatch.setattr(mqar, "fit", fake_fit)
    monkeypatch.setattr(mqar, "evaluate", lambda model, label, **kw: {"acc": MQAR_ACC[model.lr][label]})
    result = run_mqar([ModelChoice("m", "atlas")], protocol, progress=False)

    m = result.metrics
    assert m["acc/m/d=64"] == pytest.approx(0.75)  # lr 3e-3: (1.0 + 0.5) / 2, ahead of the tied 1e-2
    assert m["acc/m/d=64/len=16/pairs=2"] == 1.0  # the best run's per-setting accuracies
    assert m["acc/m/d=64/len=32/pairs=4"] == 0.5
    assert m["acc_init/m/d=64"] == pytest.approx(0.125)  # untrained: (0.0 + 0.25) / 2
    assert m["acc_init/m/d=64/len=32/pairs=4"] == 0.25
    assert result.details["table"][0]["best_lr"] == 3e-3
    assert [r["mean_acc"] for r in result.details["runs"]] == pytest.approx([0.375, 0.75, 0.75])


def test_mad_memory_sizes_count_the_memory_and_the_whole_state():
    """Hand-computed at width 16, 2 layers, 4 heads of 4 (T = 64 for the recall baseline): Gated DeltaNet holds one
    4 x 4 matrix per head and layer (2 * 4 * 16 = 128 floats) and, in its whole state, the q/k/v short-conv tails
    (2 layers * 3 convs * 16 channels * 3 taps = 288); Transformer++ keeps keys and values of every token."""
    protocol = MADProtocol(tasks=(ICR,), width=16, layers=2)
    setting = protocol.settings(ICR)[0]
    gdn = mad.memory_sizes(ModelChoice("gdn", "gated_deltanet"), setting, protocol, seed=0, device="cpu")
    assert gdn == {"memory": 2 * 4 * 4 * 4, "state": 2 * 4 * 4 * 4 + 2 * 3 * 16 * 3}
    attn = mad.memory_sizes(ModelChoice("tpp", "transformer_pp"), setting, protocol, seed=0, device="cpu")
    assert attn["memory"] >= 2 * 2 * setting.seq_len * 16  # layers x (K, V) x T x width


def test_mad_report_shows_each_arms_memory_beside_its_accuracy():
    from atlas_experiments.evaluation.tasks.mad import mad_section

    runs = {
        "atlas": {"mad": {"metrics": {f"acc/atlas/{ICR}": 0.5, f"memory_size/atlas/{ICR}": 6784.0}}},
        "gdn": {"mad": {"metrics": {f"acc/gdn/{ICR}": 0.25}}},  # tracked before sizes were reported
    }
    lines = [ln for ln in mad_section(runs).splitlines() if ln.startswith("| atlas") or ln.startswith("| gdn")]
    assert lines[0].endswith("| 6784 |") and "memory floats (recall)" in mad_section(runs)
    assert lines[1].endswith("| – |")
