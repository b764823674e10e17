"""A training checkpoint is a self-contained Hugging Face directory: in a fresh Python that never imported
atlas_model, `AutoTokenizer` and `AutoModelForCausalLM` load it (`trust_remote_code=True`, through the loader
module that `atlas_model.portable` saves beside the weights), and so does the command every lm-eval user types,
`lm_eval --model hf --model_args pretrained=<checkpoint>,trust_remote_code=True`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from atlas_experiments.train import TrainConfig, golden, loop

TEXTS = ["in the beginning was the word", "and the word was with god", "let there be light"]

# Runs in a fresh interpreter: the checkpoint directory is all it has.
FRESH_LOAD = """
import json, sys
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
ckpt, texts = sys.argv[1], json.loads(sys.argv[2])
assert "atlas_model" not in sys.modules
# AutoTokenizer reads config.json too, so it needs the flag as well (else it asks on a terminal)
tok = AutoTokenizer.from_pretrained(ckpt, trust_remote_code=True)
model = AutoModelForCausalLM.from_pretrained(ckpt, trust_remote_code=True, dtype=torch.float32).eval()
ids = [tok(t)["input_ids"] for t in texts]
with torch.no_grad():
    logits = [model(torch.tensor([i])).logits[0].tolist() for i in ids]
cls = type(model).__module__ + "." + type(model).__name__
print("RESULT " + json.dumps({"ids": ids, "logits": logits, "class": cls}))
"""

MC_TASK = """task: atlas_ckpt_mc
dataset_path: json
dataset_kwargs:
  cache_dir: {cache}
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{question}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{answer}}}}"
metric_list:
  - metric: acc
"""
QUESTIONS = [
    {"question": "In the beginning", "choices": ["was the word", "light"], "answer": 0},
    {"question": "Let there be", "choices": ["light", "the word"], "answer": 0},
]


def _env(tmp_path: Path) -> dict[str, str]:
    # offline, one thread, and a private HF_HOME (HF copies the loader module into its module cache there)
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf-home"),
        "OMP_NUM_THREADS": "1",
    }


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, prepared_data) -> Path:
    """The `final` checkpoint of a 2-step tiny run (the golden harness's base run)."""
    data = golden.merge(golden.BASE, {"data": {"path": str(prepared_data)}, "steps": 2, "eval_interval": 2})
    out = tmp_path_factory.mktemp("portable") / "run"
    with golden.one_thread():
        loop.train(TrainConfig.from_dict(data), out)
    return out / "checkpoints" / "final"


def _logprob(model, tokenizer, context: str, continuation: str) -> float:
    """log p(continuation | context) as lm-eval's hf backend computes it (joined by the task's delimiter " ")."""
    ctx = tokenizer(context)["input_ids"]
    whole = tokenizer(context + " " + continuation)["input_ids"]
    with torch.no_grad():
        logprobs = torch.log_softmax(model(torch.tensor([whole])).logits[0].double(), dim=-1)
    return sum(logprobs[i - 1, whole[i]].item() for i in range(len(ctx), len(whole)))


def test_the_checkpoint_holds_the_tokenizer_and_the_loader(checkpoint, prepared_data):
    names = {p.name for p in checkpoint.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "atlas_loader.py"} <= names
    assert json.loads((checkpoint / "tokenizer.json").read_text()) == json.loads(
        (prepared_data / "tokenizer.json").read_text()
    )
    auto_map = json.loads((checkpoint / "config.json").read_text())["auto_map"]
    assert auto_map["AutoModelForCausalLM"] == "atlas_loader.AtlasForCausalLM"


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning", "ignore::UserWarning")
def test_a_fresh_python_loads_the_checkpoint_and_lm_eval_scores_it(checkpoint, prepared_data, tmp_path):
    from transformers import AutoModelForCausalLM

    from atlas_data import load_tokenizer

    proc = subprocess.run(
        [sys.executable, "-c", FRESH_LOAD, str(checkpoint), json.dumps(TEXTS)],
        env=_env(tmp_path), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    fresh = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))[7:])
    assert fresh["class"] == "atlas_model.modeling.AtlasForCausalLM"

    # the project's own way of loading (atlas_model imported, the prepared data's tokenizer) sees the same
    tokenizer = load_tokenizer(prepared_data)
    model = AutoModelForCausalLM.from_pretrained(str(checkpoint), dtype=torch.float32).eval()
    for text, ids, logits in zip(TEXTS, fresh["ids"], fresh["logits"]):
        assert ids == tokenizer(text)["input_ids"]
        with torch.no_grad():
            want = model(torch.tensor([ids])).logits[0]
        torch.testing.assert_close(torch.tensor(logits), want, rtol=0, atol=1e-5)

    lm_eval = shutil.which("lm_eval") or str(Path(sys.executable).with_name("lm_eval"))
    data = tmp_path / "tasks" / "data.jsonl"
    data.parent.mkdir()
    data.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    (tmp_path / "tasks" / "mc.yaml").write_text(MC_TASK.format(data=data, cache=tmp_path / "datasets"))
    cli = subprocess.run(
        [
            lm_eval, "--model", "hf", "--model_args", f"pretrained={checkpoint},trust_remote_code=True,dtype=float32",
            "--tasks", "atlas_ckpt_mc", "--include_path", str(tmp_path / "tasks"), "--device", "cpu",
            "--batch_size", "1", "--output_path", str(tmp_path / "out"), "--log_samples",
        ],
        env=_env(tmp_path), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert cli.returncode == 0, cli.stderr[-3000:]
    samples = [json.loads(line) for f in (tmp_path / "out").rglob("samples_atlas_ckpt_mc_*.jsonl") for line in
               f.read_text().splitlines()]  # fmt: skip
    assert len(samples) == len(QUESTIONS)
    # the harness scored this checkpoint: every choice's log-likelihood is the one computed here
    for sample in samples:
        q = QUESTIONS[sample["doc_id"]]
        got = [float(resp[0][0]) for resp in sample["resps"]]  # the samples file keeps them as text
        want = [_logprob(model, tokenizer, q["question"], choice) for choice in q["choices"]]
        assert got == pytest.approx(want, abs=1e-4)
