"""lm-eval's `hf` backend scores and generates with a saved tiny model on local, offline tasks."""

import json
import math

import pytest
import torch

SENTENCES = [
    "the memory learns to store keys and values at test time",
    "a sliding window keeps the last few tokens in the objective",
    "polynomial features lift the keys into a wider space",
    "the quick brown fox jumps over the lazy dog",
    "muon orthogonalises the momentum before each update",
    "attention compares every query with every key",
]
QUESTIONS = [
    {"question": "The capital of France is", "choices": ["Paris", "a dog", "blue"], "answer": 0},
    {"question": "Two plus two is", "choices": ["four", "green", "Tuesday"], "answer": 0},
    {"question": "The sky is", "choices": ["blue", "a key", "heavy"], "answer": 0},
    {"question": "Memory stores", "choices": ["values", "nothing", "rivers"], "answer": 0},
]

# both tasks read the questions from one local JSONL (format fields: cache, data)
LOCAL_DATA = """dataset_path: json
dataset_kwargs:
  cache_dir: {cache}
  data_files:
    test: {data}
test_split: test
"""


def _task(name: str, body: str) -> str:
    return f"task: {name}\n{LOCAL_DATA}{body}"


MC_TASK = _task(
    "atlas_tiny_mc",
    """output_type: multiple_choice
doc_to_text: "{{{{question}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{answer}}}}"
metric_list:
  - metric: acc
""",
)

GEN_TASK = _task(
    "atlas_tiny_gen",
    """output_type: generate_until
doc_to_text: "{{{{question}}}}"
doc_to_target: "{{{{choices[answer]}}}}"
generation_kwargs:
  until: ["."]
  max_gen_toks: 4
  do_sample: false
metric_list:
  - metric: exact_match
""",
)


def _tokenizer(path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(SENTENCES + [q["question"] for q in QUESTIONS], trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    fast.save_pretrained(path)
    return fast


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning", "ignore::UserWarning")
def test_lm_eval_hf_backend_on_a_local_task(tmp_path, make_model, monkeypatch):
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.setenv(name, "1")
    lm_eval = pytest.importorskip("lm_eval")
    from lm_eval.tasks import TaskManager

    tokenizer = _tokenizer(tmp_path / "tokenizer")
    eos = tokenizer.eos_token_id
    model = make_model("atlas", vocab_size=len(tokenizer), eos_token_id=eos, pad_token_id=eos)
    model.save_pretrained(tmp_path / "model")

    data = tmp_path / "tasks" / "data.jsonl"
    data.parent.mkdir()
    data.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    cache = tmp_path / "datasets"
    (tmp_path / "tasks" / "mc.yaml").write_text(MC_TASK.format(data=data, cache=cache))
    (tmp_path / "tasks" / "gen.yaml").write_text(GEN_TASK.format(data=data, cache=cache))

    results = lm_eval.simple_evaluate(
        model="hf",
        model_args=f"pretrained={tmp_path / 'model'},tokenizer={tmp_path / 'tokenizer'},dtype=float32",
        tasks=["atlas_tiny_mc", "atlas_tiny_gen"],
        task_manager=TaskManager(include_path=str(tmp_path / "tasks"), include_defaults=False),
        device="cpu",
        batch_size=2,  # batched generation pads on the left: the attention_mask path of the model
        log_samples=True,
    )
    acc = results["results"]["atlas_tiny_mc"]["acc,none"]
    assert 0.0 <= acc <= 1.0 and math.isfinite(acc)
    assert results["results"]["atlas_tiny_gen"]["exact_match,none"] >= 0.0
    assert results["n-samples"]["atlas_tiny_mc"]["effective"] == len(QUESTIONS)

    # The harness scored our model: its log-likelihood of the first answer is the one computed here.
    sample = next(s for s in results["samples"]["atlas_tiny_mc"] if s["doc_id"] == 0)
    question, choice = QUESTIONS[0]["question"], QUESTIONS[0]["choices"][0]
    context = tokenizer(question)["input_ids"]
    whole = tokenizer(question + " " + choice)["input_ids"]  # the harness joins them with target_delimiter " "
    with torch.no_grad():
        logprobs = torch.log_softmax(model(torch.tensor([whole])).logits[0].double(), dim=-1)
    expected = sum(logprobs[i - 1, whole[i]].item() for i in range(len(context), len(whole)))
    assert sample["resps"][0][0][0] == pytest.approx(expected, abs=1e-4)
