"""`atlas eval ppl | lm-eval | niah | babilong` on a tiny model, offline; the scoring helpers against full forwards."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest
import torch

from atlas_experiments.cli import main


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models; the CPUs are shared
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def run_dir(prepared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An `atlas train`-like run directory: checkpoints/final (tiny Transformer++, random init) + config.json."""
    import atlas_model
    from atlas_data import load_manifest

    run = tmp_path_factory.mktemp("run")
    vocab = load_manifest(prepared_data).tokenizer.vocab_size
    torch.manual_seed(0)
    model = atlas_model.AtlasForCausalLM(
        atlas_model.AtlasConfig.from_preset("transformer_pp", "tiny", vocab_size=vocab)
    )
    model.save_pretrained(run / "checkpoints" / "final")
    config = {
        "model": {"preset": "transformer_pp", "size": "tiny"},
        "data": {"path": str(prepared_data), "seq_len": 32},
    }
    (run / "config.json").write_text(json.dumps(config))
    return run


def _read(path: Path) -> dict:
    data = json.loads(path.read_text())
    assert {"task", "model", "metrics", "protocol", "deviations", "details", "created"} <= set(data)
    assert data["deviations"] and all(isinstance(d, str) for d in data["deviations"])
    assert all(isinstance(v, float) for v in data["metrics"].values())
    return data


def test_ppl_from_run_dir_with_mlflow(run_dir: Path, tmp_path: Path):
    out = tmp_path / "ppl.json"
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    argv = ["eval", "ppl", "--checkpoint", str(run_dir / "checkpoints" / "final"), "--out", str(out)]
    assert main([*argv, "--tracking-uri", uri, "--no-progress", "--batch-size", "4"]) == 0
    data = _read(out)
    assert data["protocol"]["lengths"] == [32, 64, 128]  # T, 2T, 4T from the run config
    m = data["metrics"]
    for n in (32, 64, 128):
        assert math.isfinite(m[f"ppl/len={n}"]) and m[f"ppl/len={n}"] > 1 and m[f"tokens/len={n}"] > 0
        assert m[f"ppl/len={n}"] == pytest.approx(math.exp(m[f"nll/len={n}"]))
    assert "ppl_beyond_train/len=64" in m and "ppl_beyond_train/len=32" not in m

    # the same perplexity computed by hand over the loader's first windows
    from transformers import AutoModelForCausalLM

    import atlas_model  # noqa: F401
    from atlas_data.loader import TokenWindowLoader

    model = AutoModelForCausalLM.from_pretrained(str(run_dir / "checkpoints" / "final")).eval()
    data_dir = json.loads((run_dir / "config.json").read_text())["data"]["path"]
    loader = TokenWindowLoader(data_dir, "validation", 32, 1000, shuffle=False, epochs=1, return_pairs=True)
    x, y = next(iter(loader))
    with torch.no_grad():
        nll = torch.nn.functional.cross_entropy(model(x).logits.transpose(1, 2), y)
    assert m["nll/len=32"] == pytest.approx(nll.item(), rel=1e-4)
    assert m["tokens/len=32"] == y.numel()

    from mlflow.tracking import MlflowClient

    run = MlflowClient(uri).search_runs([MlflowClient(uri).get_experiment_by_name("eval").experiment_id])[0]
    assert run.data.metrics["ppl/len_32"] == pytest.approx(m["ppl/len=32"])
    assert "FineWeb" in run.data.tags["deviations"] and run.data.tags["task"] == "ppl"


def test_lm_eval_offline_tasks_on_a_checkpoint(run_dir: Path, tmp_path: Path):
    out = tmp_path / "lm_eval.json"
    argv = ["eval", "lm-eval", "--checkpoint", str(run_dir / "checkpoints" / "final"), "--tasks", "offline"]
    assert main([*argv, "--max-docs", "6", "--batch-size", "4", "--out", str(out), "--no-track"]) == 0
    data = _read(out)
    m = data["metrics"]
    assert 0 <= m["offline/lastword_acc"] <= 1 and 0 <= m["offline/cloze_acc"] <= 1 and m["offline/word_ppl"] > 1
    assert m["lm_eval/atlas_cloze/acc"] == m["offline/cloze_acc"] and "lm_eval/atlas_cloze/acc_stderr" in m
    assert not any("," in k for k in m)
    assert data["details"]["offline_docs"] == {"atlas_lastword": 6, "atlas_cloze": 6, "atlas_rolling_ppl": 6}
    assert data["details"]["n_samples"]["atlas_cloze"]["effective"] == 6
    assert data["protocol"]["max_length"] == 32 and any("offline stand-in" in d for d in data["deviations"])
    assert (tmp_path / "lm_eval_tasks" / "atlas_cloze.yaml").is_file()


def test_lm_eval_untrained_preset(prepared_data: Path, tmp_path: Path):
    out = tmp_path / "preset.json"
    argv = ["eval", "lm-eval", "--preset", "gated_deltanet", "--data", str(prepared_data), "--tasks", "atlas_cloze"]
    assert main([*argv, "--max-docs", "4", "--max-length", "64", "--out", str(out), "--no-track"]) == 0
    data = _read(out)
    assert data["model"] == "preset:gated_deltanet/tiny" and "lm_eval/atlas_cloze/acc" in data["metrics"]
    assert any("untrained" in d for d in data["deviations"])


def test_offline_tasks_are_valid_lm_eval_tasks(prepared_data: Path, tmp_path: Path):
    from atlas_data.synthetic.niah import load_split_texts
    from atlas_experiments.evaluation.lm_eval_tasks import OFFLINE_TASKS, validate_tasks, write_offline_tasks

    texts = load_split_texts(prepared_data, "validation")
    counts = write_offline_tasks(tmp_path, texts, seed=1, max_docs=5)
    assert counts == validate_tasks(tmp_path, OFFLINE_TASKS) == {t: 5 for t in OFFLINE_TASKS}
    last = [json.loads(x) for x in (tmp_path / "atlas_lastword.jsonl").read_text().splitlines()]
    cloze = [json.loads(x) for x in (tmp_path / "atlas_cloze.jsonl").read_text().splitlines()]
    corpus = " ".join(" ".join(t.split()) for t in texts)
    for lw, cz in zip(last, cloze):
        assert f"{lw['context']} {lw['target']}" in corpus  # a real passage, its last word held out
        assert cz["context"] == lw["context"] and cz["choices"][cz["answer"]] == lw["target"]
        assert len(set(cz["choices"])) == 4
    with pytest.raises(ValueError, match="does not know"):
        validate_tasks(tmp_path, ["atlas_no_such_task"])


def test_hub_task_sets_fail_fast_offline(run_dir: Path, tmp_path: Path, monkeypatch, capsys):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty cache
    t0 = time.perf_counter()
    argv = ["eval", "lm-eval", "--checkpoint", str(run_dir / "checkpoints" / "final"), "--tasks", "paper"]
    assert main([*argv, "--out", str(tmp_path / "x.json"), "--no-track"]) == 2
    assert time.perf_counter() - t0 < 30
    err = capsys.readouterr().err
    assert "offline" in err and "wikitext" in err and "--tasks offline" in err
    assert not (tmp_path / "x.json").exists()


def test_task_tables_match_installed_lm_eval():
    import lm_eval

    from atlas_experiments.evaluation.lm_eval_tasks import HUB_DATASETS, RECALL_MISSING, TASK_SETS, resolve_tasks

    root = Path(lm_eval.__file__).parent / "tasks"
    sources = {
        p: p.read_text() for p in root.rglob("*") if p.suffix in (".yaml", ".py") and "__pycache__" not in str(p)
    }
    for task, (path, _) in HUB_DATASETS.items():
        assert any(f"task: {task}\n" in s or f"class {task.upper()}" in s for s in sources.values()), task
        assert any(path in s for s in sources.values()), path
    for missing in ("based_nq", "based_triviaqa"):
        assert not any(f"task: {missing}" in s for s in sources.values())
    assert set(RECALL_MISSING) == {"NQ", "TQA"}
    assert resolve_tasks("paper,atlas_cloze,piqa") == [*TASK_SETS["paper"], "atlas_cloze"]


def test_niah_command(run_dir: Path, tmp_path: Path):
    out = tmp_path / "niah.json"
    argv = ["eval", "niah", "--checkpoint", str(run_dir / "checkpoints" / "final"), "--tasks", "pk,niah_single_2"]
    argv += ["--lengths", "448,512", "--depths", "0,1", "--samples", "1", "--scoring", "generate,rank"]
    assert main([*argv, "--out", str(out), "--no-track", "--no-progress", "--save-samples"]) == 0
    data = _read(out)
    m = data["metrics"]
    for scoring in ("acc", "rank_acc"):
        for task in ("niah_single_1", "niah_single_2"):
            for n in (448, 512):
                assert 0 <= m[f"{scoring}/{task}/len={n}"] <= 1
                for d in ("0", "1"):
                    assert m[f"{scoring}/{task}/len={n}/depth={d}"] in (0.0, 1.0)
        assert (
            Path(data["details"]["figures"]["generate" if scoring == "acc" else "rank"]).read_bytes()[:4] == b"\x89PNG"
        )
    rows = [json.loads(x) for x in Path(data["details"]["samples_file"]).read_text().splitlines()]
    assert len(rows) == 8 and all(r["prompt_tokens"] + r["tokens_to_generate"] <= r["length"] for r in rows)
    assert all(r["answer"] in r["prompt"] for r in rows) and all("prediction" in r for r in rows)
    assert data["protocol"]["tasks"] == {"niah_single_1": "S-NIAH-PK", "niah_single_2": "S-NIAH-N"}
    assert any("Paul Graham" in d for d in data["deviations"])


def test_babilong_command(prepared_data: Path, tmp_path: Path):
    out = tmp_path / "babilong.json"
    argv = ["eval", "babilong", "--preset", "transformer_pp", "--data", str(prepared_data), "--tasks", "qa1,qa4"]
    argv += ["--lengths", "0,400", "--samples", "2", "--scoring", "generate,rank"]
    assert main([*argv, "--out", str(out), "--no-track", "--no-progress"]) == 0
    data = _read(out)
    m = data["metrics"]
    for key in ("acc/qa1/len=0", "acc/qa4/len=400", "acc/len=400", "acc", "rank_acc/qa1/len=400", "rank_acc"):
        assert 0 <= m[key] <= 1
    assert Path(data["details"]["figures"]["rank"]).is_file()
    assert any("fine-tun" in d for d in data["deviations"])


def test_user_errors_exit_2(run_dir: Path, prepared_data: Path, tmp_path: Path, capsys):
    out = ["--out", str(tmp_path / "e.json"), "--no-track"]
    ckpt = str(run_dir / "checkpoints" / "final")
    assert main(["eval", "ppl", "--checkpoint", ckpt, "--preset", "atlas", *out]) == 2
    assert main(["eval", "ppl", "--preset", "atlas", "--lengths", "8", *out]) == 2
    assert "--data" in capsys.readouterr().err
    assert main(["eval", "niah", "--checkpoint", ckpt, "--depths", "2", *out]) == 2
    assert main(["eval", "babilong", "--checkpoint", ckpt, "--tasks", "qa9", *out]) == 2
    assert main(["eval", "niah", "--checkpoint", ckpt, "--scoring", "beam", *out]) == 2
    assert main(["eval", "ppl", "--checkpoint", str(tmp_path), "--data", str(prepared_data), *out]) == 2


@pytest.mark.parametrize("preset", ["transformer_pp", "gated_deltanet", "atlas"])
def test_score_prompt_matches_full_forward(preset):
    """Candidate log-likelihoods from the cached prefill (+ batched, right-padded candidates) and greedy decoding
    through the cache equal what full forwards of the whole sequence give."""
    import atlas_model
    from atlas_experiments.evaluation.needle import score_prompt

    torch.manual_seed(0)
    model = atlas_model.AtlasForCausalLM(atlas_model.AtlasConfig.from_preset(preset, "tiny")).double().eval()
    prompt = torch.randint(1, 256, (19,), generator=torch.Generator().manual_seed(1)).tolist()
    cands = [[5, 6, 7], [9], [11, 12]]
    res = score_prompt(model, prompt, device="cpu", max_new_tokens=5, candidates=cands)
    with torch.no_grad():
        for c, got in zip(cands, res["candidate_logprobs"]):
            logp = torch.log_softmax(model(torch.tensor([prompt + c])).logits[0], -1)
            want = sum(logp[len(prompt) - 1 + k, tok].item() for k, tok in enumerate(c))
            assert got == pytest.approx(want, abs=1e-8)
        seq = list(prompt)
        for _ in range(5):
            seq.append(int(model(torch.tensor([seq])).logits[0, -1].argmax()))
    assert res["generated"] == seq[len(prompt) :]
