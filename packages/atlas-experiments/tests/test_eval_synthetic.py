"""`atlas eval mqar | mad | learnability` on tiny settings, the model/option plumbing, and a real MQAR signal."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from atlas_data.synthetic.mqar import MQARConfig, generate_mqar
from atlas_experiments.cli import main
from atlas_experiments.evaluation import results
from atlas_experiments.evaluation import synthetic_train as st

FAST = ["--threads", "1", "--no-progress", "--no-track"]


pytestmark = pytest.mark.usefixtures("one_thread")


def _load(path: Path) -> dict:
    data = json.loads(path.read_text())
    assert {"task", "model", "metrics", "protocol", "deviations", "details", "created"} <= set(data)
    assert data["deviations"] and all(isinstance(d, str) for d in data["deviations"])
    assert all(isinstance(v, float | int) and np.isfinite(v) for v in data["metrics"].values())
    return data


def test_parse_models_presets_and_files(tmp_path):
    models = st.parse_models("atlas, transformer_pp,atlas", "tiny")
    assert [m.name for m in models] == ["atlas", "transformer_pp", "atlas#2"]
    spec = tmp_path / "small_atlas.yaml"
    spec.write_text("preset: atlas\noverrides:\n  memory:\n    window: 2\n")
    train_cfg = tmp_path / "train.json"
    train_cfg.write_text(json.dumps({"model": {"preset": "gated_deltanet", "size": "tiny"}, "steps": 3}))
    hf = tmp_path / "config.json"
    hf.write_text(json.dumps({"model_type": "atlas_lm", "preset": "omeganet", "hidden_size": 32, "junk": 1}))
    a, b, c = st.parse_models(f"{spec},{train_cfg},{hf}")
    assert (a.name, a.preset, dict(a.overrides)) == ("small_atlas", "atlas", {"memory": {"window": 2}})
    assert (b.preset, b.name) == ("gated_deltanet", "train")
    assert c.preset == "omeganet" and c.overrides == {"hidden_size": 32}
    cfg = st.model_config(a, vocab_size=40, width=32, memory_head_dim=8, memory_expansion=1)
    assert (cfg.vocab_size, cfg.hidden_size, cfg.num_memory_heads) == (40, 32, 4)
    assert cfg.memory.window == 2 and cfg.memory.expansion == 1  # command knobs merged with the file's
    gdn = st.model_config(st.ModelChoice("g", "gated_deltanet"), vocab_size=40, width=32, memory_head_dim=8)
    assert gdn.num_memory_heads is None  # linear memories keep their heads
    with pytest.raises(ValueError, match="neither a preset"):
        st.parse_models("not_a_model")
    with pytest.raises(FileNotFoundError):
        st.parse_models(str(tmp_path / "missing.yaml"))
    with pytest.raises(ValueError, match="multiple"):
        st.model_config(a, vocab_size=40, width=36, memory_head_dim=8)


def test_lr_schedule_and_state_size():
    s = st.TrainSettings(steps=100, batch_size=4, lr=1e-3, warmup_fraction=0.1)
    assert st.lr_at(0, s.optim, s.steps) == pytest.approx(1e-4) and st.lr_at(9, s.optim, s.steps) == pytest.approx(1e-3)
    assert st.lr_at(99, s.optim, s.steps) < 1e-5
    choice = st.ModelChoice("transformer_pp", "transformer_pp")
    model = st.build_lm(st.model_config(choice, vocab_size=16, width=16), 0, torch.device("cpu"))
    short, long = st.state_size(model, 8, 16, torch.device("cpu")), st.state_size(model, 16, 16, torch.device("cpu"))
    assert long["memory"] > short["memory"] > 0  # a KV cache grows with the context
    gdn = st.build_lm(st.model_config(st.ModelChoice("g", "gated_deltanet"), vocab_size=16, width=16), 0, "cpu")
    assert st.state_size(gdn, 8, 16, "cpu")["memory"] == st.state_size(gdn, 16, 16, "cpu")["memory"] > 0


def test_mqar_command_writes_results_and_figure(tmp_path):
    out = tmp_path / "mqar.json"
    argv = ["eval", "mqar", "--models", "transformer_pp,gated_deltanet,atlas", "--settings", "16x2,24x4",
            "--vocab-size", "32", "--width", "16", "--steps", "4", "--batch-size", "4", "--test-examples", "8",
            "--lrs", "1e-3,3e-3", "--out", str(out), *FAST]  # fmt: skip
    assert main(argv) == 0
    data = _load(out)
    assert data["task"] == "mqar" and data["model"] == "transformer_pp,gated_deltanet,atlas"
    m = data["metrics"]
    for name in ("transformer_pp", "gated_deltanet", "atlas"):
        for key in ("acc", "acc_init"):
            assert 0.0 <= m[f"{key}/{name}/d=16"] <= 1.0
        assert f"acc/{name}/d=16/len=24/pairs=4" in m
        assert m[f"memory_size/{name}/d=16/len=16"] > 0
    assert m["memory_size/transformer_pp/d=16/len=24"] > m["memory_size/transformer_pp/d=16/len=16"]
    assert len(data["details"]["runs"]) == 3 * 2  # models x lrs
    assert any("vocab 32" in d for d in data["deviations"])
    assert any("memory head dim 8" in d for d in data["deviations"])
    assert Path(data["details"]["figures"][0]).is_file()
    assert data["protocol"]["settings"] == [[16, 2], [24, 4]]


def test_mad_command_all_tasks(tmp_path):
    out = tmp_path / "mad.json"
    argv = ["eval", "mad", "--models", "transformer_pp,gated_deltanet", "--grid", "baseline", "--sweep", "single",
            "--steps", "2", "--batch-size", "4", "--train-examples", "8", "--test-examples", "4", "--width", "16",
            "--out", str(out), *FAST]  # fmt: skip
    assert main(argv) == 0
    data = _load(out)
    m = data["metrics"]
    tasks = ("compression", "in_context_recall", "noisy_in_context_recall", "fuzzy_in_context_recall",
             "selective_copying", "memorization")  # fmt: skip
    for name in ("transformer_pp", "gated_deltanet"):
        for task in tasks:
            assert 0.0 <= m[f"acc/{name}/{task}"] <= 1.0
        assert m[f"acc/{name}/average"] == pytest.approx(np.mean([m[f"acc/{name}/{t}"] for t in tasks]))
    assert len(data["details"]["runs"]) == 2 * 6
    assert any("sweep" in d for d in data["deviations"]) and any("width 16" in d for d in data["deviations"])


def test_mad_sweep_takes_the_best_run(tmp_path):
    out = tmp_path / "mad.json"
    argv = ["eval", "mad", "--models", "transformer_pp", "--tasks", "selective_copying,compression", "--grid",
            "reduced", "--lrs", "1e-4,3e-3", "--wds", "0,0.1", "--steps", "2", "--batch-size", "4",
            "--train-examples", "8", "--test-examples", "4", "--width", "16", "--out", str(out), *FAST]  # fmt: skip
    assert main(argv) == 0
    data = _load(out)
    runs = data["details"]["runs"]
    assert len(runs) == 2 * 2 * 2 * 2  # tasks x settings x lrs x wds
    for task in ("selective_copying", "compression"):
        best = data["details"]["scores"]["transformer_pp"][task]["best_per_setting"]
        assert len(best) == 2
        for row in best:
            accs = [r["acc"] for r in runs if r["task"] == task and r["setting"] == row["setting"]]
            assert row["acc"] == max(accs)
        assert data["metrics"][f"acc/transformer_pp/{task}"] == pytest.approx(np.mean([r["acc"] for r in best]))


def test_learnability_command(tmp_path):
    out = tmp_path / "learn.json"
    argv = ["eval", "learnability", "--dim", "8", "--seq-len", "64", "--window", "8", "--rank", "2",
            "--memories", "2x1,3x4", "--bins", "8", "--repeats", "2", "--out", str(out), *FAST]  # fmt: skip
    assert main(argv) == 0
    data = _load(out)
    curves = data["details"]["curves"]
    assert set(curves) == {"layers=2/exp=1", "layers=3/exp=4"}
    for per_setting in curves.values():
        assert list(per_setting) == ["1_low_rank", "2_mlp", "3_attention_mlp", "4_attention_inputs_mlp", "5_swa_mlp"]
        for c in per_setting.values():
            assert len(c["position"]) == len(c["loss"]) == 8
            assert c["loss"][0] == pytest.approx(1.0, abs=0.2)  # zero-initialised output: starts at the zero predictor
    assert data["metrics"]["final_loss/layers=2/exp=1/1_low_rank"] >= 0
    assert Path(data["details"]["figures"][0]).is_file()
    assert "all_below_1" in data["details"]["claims"]["layers=3/exp=4"]


def test_learnability_learns_a_low_rank_map():
    from atlas_data.synthetic.learnability import LearnabilityConfig, generate_stream
    from atlas_experiments.evaluation.learnability import online_losses

    i, o = generate_stream(1, LearnabilityConfig(dim=16, seq_len=500, rank=8), seed=0)
    losses = online_losses(
        torch.from_numpy(i)[None], torch.from_numpy(o)[None], 2, 4, optimizer="adam", lr=1e-3, seed=0
    )
    assert losses.shape == (1, 500)
    assert losses[0, :20].mean() > 0.9 and losses[0, -100:].mean() < 0.3


def test_commands_track_through_track_result(tmp_path, monkeypatch):
    calls = []

    def fake_track(result, **kwargs):
        calls.append((result, kwargs))
        return "run-1"

    monkeypatch.setattr(results, "track_result", fake_track)
    out = tmp_path / "learn.json"
    argv = ["eval", "learnability", "--dim", "4", "--seq-len", "16", "--window", "4", "--rank", "1", "--memories",
            "2x1", "--bins", "4", "--out", str(out), "--threads", "1", "--no-progress",
            "--experiment", "syn"]  # fmt: skip
    assert main(argv) == 0
    ((result, kwargs),) = calls
    assert result.task == "learnability" and result.deviations and kwargs["experiment"] == "syn"
    assert kwargs["results_root"] == tmp_path and kwargs["artifact"] == out


def test_user_errors_are_one_line(tmp_path, capsys):
    out = str(tmp_path / "x.json")
    assert main(["eval", "mqar", "--models", "nope", "--out", out, *FAST]) == 2
    assert "neither a preset" in capsys.readouterr().err
    assert main(["eval", "mqar", "--seq-lens", "8", "--kv-pairs", "4", "--out", out, *FAST]) == 2
    assert main(["eval", "mad", "--tasks", "copying", "--out", out, *FAST]) == 2
    assert main(["eval", "learnability", "--settings", "7", "--out", out, *FAST]) == 2
    assert main(["eval", "learnability", "--memories", "2by4", "--out", out, *FAST]) == 2
    assert not Path(out).exists()


def test_mqar_training_beats_an_untrained_model():
    """REAL signal: a tiny Transformer++ trained for 200 steps recalls far above chance and does not answer a
    constant."""
    train = generate_mqar(MQARConfig(vocab_size=32, seq_len=16, num_kv_pairs=2), 6400, seed=1)
    test = generate_mqar(MQARConfig(vocab_size=32, seq_len=16, num_kv_pairs=2), 256, seed=2)
    choice = st.ModelChoice("transformer_pp", "transformer_pp")
    model = st.build_lm(st.model_config(choice, vocab_size=32, width=32), 0, torch.device("cpu"))
    before = st.evaluate(model, test)
    summary = st.fit(model, [train], st.TrainSettings(steps=200, batch_size=32, lr=3e-3), seed=0, progress=False)
    after = st.evaluate(model, test)
    assert summary["loss_last"] < summary["loss_first"] - 1.0
    assert before["acc"] < 0.15
    assert after["acc"] > 0.4 and after["acc"] > before["acc"] + 0.25
    with torch.no_grad():
        logits = model(input_ids=torch.from_numpy(test.inputs), use_cache=False).logits
    preds = logits.argmax(-1)[torch.from_numpy(test.answer_mask)]
    assert len(torch.unique(preds)) > 5  # the answers follow the queried keys, not a constant


def test_sweep_settings_take_the_protocols_shared_fields():
    from atlas_experiments.evaluation.mad import MADProtocol
    from atlas_experiments.evaluation.mqar import MQARProtocol

    mad = MADProtocol(steps=7, batch_size=3, grad_clip=0.5, warmup_fraction=0.2, eval_batch_size=5)
    s = st.TrainSettings.for_sweep(mad, lr=1e-3, weight_decay=0.25)
    assert (s.steps, s.batch_size, s.grad_clip, s.warmup_fraction, s.eval_batch_size) == (7, 3, 0.5, 0.2, 5)
    assert (s.lr, s.weight_decay) == (1e-3, 0.25)
    s = st.TrainSettings.for_sweep(MQARProtocol(steps=9, weight_decay=0.3), lr=2e-3)
    assert (s.steps, s.weight_decay, s.lr, s.grad_clip) == (9, 0.3, 2e-3, 1.0)
    with pytest.raises(ValueError, match="positive lr"):
        st.TrainSettings.for_sweep(mad, lr=0.0)


def test_mqar_picks_the_lr_on_a_validation_split_and_records_the_curve(caplog):
    """With a validation split the lr sweep selects on it (never on the test set), the learning curve is recorded
    (and logged point by point), and validating along the way changes neither the training nor the test scores."""
    from atlas_experiments.evaluation.mqar import MQARProtocol, run_mqar

    base = dict(settings=((16, 2),), vocab_size=32, widths=(16,), layers=1, steps=30, batch_size=8,
                lrs=(3e-3, 1e-2), test_examples=32)  # fmt: skip
    models = [st.ModelChoice("transformer_pp", "transformer_pp")]
    plain = run_mqar(models, MQARProtocol(**base), progress=False)
    with caplog.at_level("INFO", logger="atlas.eval"):
        curved = run_mqar(models, MQARProtocol(**base, val_examples=32, eval_every=10), progress=False)
    runs = {r["lr"]: r for r in curved.details["runs"]}
    assert [s for s, _ in runs[3e-3]["curve"]] == [10, 20, 30]
    logged = [m for m in caplog.messages if "validation accuracy" in m]
    assert (
        len(logged) == 6
        and logged[1]
        == f"mqar transformer_pp/d=16 lr=0.003 step 20: validation accuracy {runs[3e-3]['curve'][1][1]:.3f}"
    )
    assert {lr: r["mean_acc"] for lr, r in runs.items()} == {r["lr"]: r["mean_acc"] for r in plain.details["runs"]}
    (row,) = curved.details["table"]
    assert row["best_lr"] == max(runs, key=lambda lr: (runs[lr]["val_acc"], -lr))
    assert row["val_acc"] == runs[row["best_lr"]]["val_acc"] and "val_acc/transformer_pp/d=16" in curved.metrics
    assert not any("picked on the held-out test set" in d for d in curved.deviations)
    assert any("picked on the held-out test set" in d for d in plain.deviations)
    with pytest.raises(ValueError, match="--eval-every needs a validation split"):
        MQARProtocol(**base, eval_every=5)


def test_mqar_test_only_settings_are_scored_but_never_trained_or_averaged(tmp_path):
    """A test-only setting (extrapolation: 4x the trained length) gets its own held-out set and metrics, while the
    trained settings' sets, the training, the mean accuracy and the protocol's resume identity stay as they were."""
    from atlas_experiments.evaluation.mqar import MQARProtocol, held_out_sets, run_mqar, test_only_sets

    base = dict(settings=((16, 2),), vocab_size=32, widths=(16,), layers=1, steps=6, batch_size=4, test_examples=8)
    plain_protocol, extra_protocol = MQARProtocol(**base), MQARProtocol(**base, test_settings=((64, 2),))
    assert "test_settings" not in plain_protocol.describe()  # old records and resume keys keep their identity
    assert extra_protocol.describe()["test_settings"] == [[64, 2]]
    (plain_set,), (same_set,) = held_out_sets(plain_protocol, 3), held_out_sets(extra_protocol, 3)
    assert np.array_equal(plain_set.inputs, same_set.inputs)
    (long_set,) = test_only_sets(extra_protocol, 3)
    assert long_set.inputs.shape == (8, 64) and test_only_sets(plain_protocol, 3) == []

    models = [st.ModelChoice("gated_deltanet", "gated_deltanet")]
    plain = run_mqar(models, plain_protocol, seed=3, progress=False)
    extra = run_mqar(models, extra_protocol, seed=3, progress=False)
    key = "gated_deltanet/d=16"
    for name in (f"acc/{key}", f"acc/{key}/len=16/pairs=2", f"acc_init/{key}", f"loss_last/{key}"):
        assert extra.metrics[name] == plain.metrics[name], name
    assert 0.0 <= extra.metrics[f"acc/{key}/len=64/pairs=2"] <= 1.0
    assert f"acc/{key}/len=64/pairs=2" not in plain.metrics
    assert extra.metrics[f"memory_size/{key}/len=64"] > 0
    # descriptive: the test-only set scored again at its queries beyond any key distance of training (14 at T 16)
    assert 0 < extra.metrics[f"answers_far/{key}/len=64/pairs=2"] < 8 * 2
    assert 0.0 <= extra.metrics[f"acc_far/{key}/len=64/pairs=2"] <= 1.0 and not any("_far/" in k for k in plain.metrics)
    (row,) = extra.details["table"]
    assert row["test_only"] == ["len=64/pairs=2"] and set(row["per_setting"]) == {"len=16/pairs=2", "len=64/pairs=2"}
    assert row["trained_span"] == 14
    with pytest.raises(ValueError, match=r"--test-settings \[\(16, 2\)\] are trained settings"):
        MQARProtocol(**base, test_settings=((16, 2),))


def test_mqar_command_takes_test_settings(tmp_path, capsys):
    out = tmp_path / "mqar.json"
    argv = ["eval", "mqar", "--models", "deltanet", "--settings", "16x2", "--test-settings", "64x2",
            "--vocab-size", "32", "--width", "16", "--steps", "2", "--batch-size", "4", "--test-examples", "8",
            "--out", str(out), *FAST]  # fmt: skip
    assert main(argv) == 0
    data = _load(out)
    assert data["protocol"]["test_settings"] == [[64, 2]] and "acc/deltanet/d=16/len=64/pairs=2" in data["metrics"]
    assert main([*argv[:6], "--test-settings", "64", *argv[8:]]) != 0
    assert "--test-settings: expected TxP items like 64x4, got '64'" in capsys.readouterr().err


def test_mqar_report_marks_test_only_settings():
    from atlas_experiments.evaluation.tasks.mqar import mqar_section

    metrics = {"acc/atlas/d_64": 0.9, "acc/atlas/d_64/len_64/pairs_8": 0.9, "acc/atlas/d_64/len_256/pairs_8": 0.4}
    tracked = {"atlas": {"mqar": {"metrics": metrics, "params": {"protocol.test_settings": "[[256, 8]]"}}}}
    section = mqar_section(tracked)
    assert "| T64 P8 | T256 P8 (test only) | mean |" in section and "never trained on" in section
    plain = mqar_section({"atlas": {"mqar": {"metrics": metrics, "params": {}}}})
    assert "| T64 P8 | T256 P8 | mean |" in plain and "test only" not in plain
