"""lm-eval scoring against hand-computed results: what lm-eval makes of our offline tasks' per-document
log-likelihoods, and how `flatten_results` / `summarize` turn lm-eval's output into our metrics (no model)."""

from __future__ import annotations

import math

import pytest

from atlas_experiments.evaluation.lm_eval_run import flatten_results, summarize
from atlas_experiments.evaluation.lm_eval_tasks import (
    OFFLINE_TASKS,
    PAPER_ACCURACY_COLUMNS,
    PAPER_COLUMNS,
    write_offline_tasks,
)

# --------------------------------------------------------------------------------------- flatten / summarize


def test_flatten_keeps_numbers_renames_filters_and_drops_the_rest():
    results = {
        "results": {
            "atlas_cloze": {"alias": "atlas_cloze", "acc,none": 0.5, "acc_stderr,none": 0.125, "acc_norm,none": 1},
            "gsm": {"exact_match,strict-match": 0.25, "exact_match,flexible-extract": 0.75},
            "odd": {"acc,none": float("nan"), "flag,none": True, "samples": "N/A", "ppl": float("inf")},
        },
        "configs": {"atlas_cloze": {"acc,none": 0.9}},  # not results: ignored
    }
    assert flatten_results(results) == {
        "lm_eval/atlas_cloze/acc": 0.5,
        "lm_eval/atlas_cloze/acc_stderr": 0.125,
        "lm_eval/atlas_cloze/acc_norm": 1.0,
        "lm_eval/gsm/exact_match_strict-match": 0.25,
        "lm_eval/gsm/exact_match_flexible-extract": 0.75,
    }
    assert flatten_results({}) == {}


# Table 2 accuracies (fractions, as lm-eval reports them); hellaswag and arc_challenge are read from acc_norm
PAPER_ACC = {
    "lmb_acc": 0.5,
    "piqa": 0.75,
    "hella": 0.25,
    "wino": 0.5,
    "arc_e": 1.0,
    "arc_c": 0.0,
    "siqa": 0.5,
    "boolq": 0.5,
}


def _paper_flat(acc: dict[str, float]) -> dict[str, float]:
    flat = {f"lm_eval/{task}/{metric}": acc.get(col, 0.0) for col, task, metric in PAPER_COLUMNS}
    flat["lm_eval/wikitext/word_perplexity"] = 20.5
    flat["lm_eval/lambada_openai/perplexity"] = 30.0
    # decoys: the metric Table 2 does not print for these tasks
    flat["lm_eval/hellaswag/acc"] = 0.99
    flat["lm_eval/arc_challenge/acc"] = 0.99
    return flat


def test_summarize_paper_columns_and_average():
    out = summarize(_paper_flat(PAPER_ACC))
    assert out["paper/wiki_ppl"] == 20.5 and out["paper/lmb_ppl"] == 30.0  # perplexities are not scaled
    assert out["paper/hella"] == 25.0 and out["paper/arc_c"] == 0.0  # acc_norm, not the 0.99 decoys
    assert {c: out[f"paper/{c}"] for c in PAPER_ACCURACY_COLUMNS} == pytest.approx(
        {c: 100.0 * v for c, v in PAPER_ACC.items()}
    )
    # (50 + 75 + 25 + 50 + 100 + 0 + 50 + 50) / 8 = 400 / 8
    assert out["paper/avg"] == pytest.approx(50.0)
    assert not any(k.startswith(("recall/", "offline/")) for k in out)


@pytest.mark.parametrize("value, expected", [(0.0, 0.0), (1.0, 100.0)])
def test_summarize_average_zero_and_hundred(value, expected):
    out = summarize(_paper_flat(dict.fromkeys(PAPER_ACC, value)))
    assert out["paper/avg"] == expected


def test_summarize_has_no_average_when_a_paper_accuracy_is_missing():
    flat = _paper_flat(PAPER_ACC)
    del flat["lm_eval/boolq/acc"]
    out = summarize(flat)
    assert "paper/boolq" not in out and "paper/avg" not in out
    assert out["paper/piqa"] == 75.0


def test_summarize_recall_columns_and_their_mean():
    flat = {"lm_eval/swde/contains": 0.5, "lm_eval/drop/f1": 0.25, "lm_eval/drop/em": 0.9, "lm_eval/fda/acc": 0.9}
    out = summarize(flat)
    # SWDE 50, DROP (f1) 25; FDA has no `contains`: (50 + 25) / 2
    assert out == pytest.approx({"recall/SWDE": 50.0, "recall/DROP": 25.0, "recall/avg_available": 37.5})


# ------------------------------------------------------------------------ lm-eval on the offline tasks' configs

# Three documents: 21 of these words (all 20, then the i-th again) and a closing "uniform." -> 22 words, and
# 104 letters + 21 spaces + 8 ("uniform.") + the repeated word's letters bytes: 138, 138 (bravo), 140 (charlie).
NATO = (
    "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa quebec romeo "
    "sierra tango"
).split()
TEXTS = [" ".join(NATO[(i + j) % 20] for j in range(21)) + " uniform." for i in range(3)]


@pytest.fixture(scope="module")
def offline_tasks(tmp_path_factory):
    from lm_eval.tasks import TaskManager

    task_dir = tmp_path_factory.mktemp("offline_tasks")
    assert write_offline_tasks(task_dir, TEXTS, seed=0) == dict.fromkeys(OFFLINE_TASKS, 3)
    tasks = TaskManager(include_path=str(task_dir), include_defaults=False).load(list(OFFLINE_TASKS))["tasks"]
    return {name: (tasks[name], list(tasks[name].eval_docs)) for name in OFFLINE_TASKS}


def _aggregate(task, per_doc: list[dict]) -> dict[str, float]:
    """What lm-eval reports for a task: each metric's aggregation over the documents."""
    agg = task.aggregation()
    return {f"{m},none": float(agg[m]([d[m] for d in per_doc])) for m in per_doc[0]}


def _cloze_lls(doc, hit: bool) -> list[tuple[float, bool]]:
    gold = doc["answer"]
    lls = [-4.0] * len(doc["choices"])
    lls[gold if hit else (gold + 1) % len(lls)] = -1.0
    return [(ll, False) for ll in lls]


def test_requests_score_the_word_after_one_space(offline_tasks):
    """The continuation whose log-likelihood is scored: " uniform", the word after the context's last one."""
    task, docs = offline_tasks["atlas_lastword"]
    request = task.construct_requests(doc=docs[0], ctx=docs[0]["context"], metadata=("atlas_lastword", 0, 1))
    assert request.arguments == (docs[0]["context"], " uniform")
    task, docs = offline_tasks["atlas_cloze"]
    requests = task.construct_requests(doc=docs[0], ctx="ctx", metadata=("atlas_cloze", 0, 1))
    assert [r.arguments for r in requests] == [("ctx", " " + c) for c in docs[0]["choices"]]


def test_cloze_acc_is_the_share_of_documents_whose_answer_scores_highest(offline_tasks):
    task, docs = offline_tasks["atlas_cloze"]
    assert all(d["choices"][d["answer"]] == "uniform" for d in docs)
    per_doc = [task.process_results(d, _cloze_lls(d, hit)) for d, hit in zip(docs, (True, False, True))]
    # hit, miss, hit -> 2/3, for acc and acc_norm alike (choices have 4-8 letters: -1 vs -4 survives the norm)
    assert _aggregate(task, per_doc) == pytest.approx({"acc,none": 2 / 3, "acc_norm,none": 2 / 3})
    for hit, expected in ((False, 0.0), (True, 1.0)):
        agg = _aggregate(task, [task.process_results(d, _cloze_lls(d, hit)) for d in docs])
        assert agg == {"acc,none": expected, "acc_norm,none": expected}


def test_cloze_acc_norm_divides_by_the_choice_length(offline_tasks):
    task, docs = offline_tasks["atlas_cloze"]
    doc = docs[0]
    # every choice -5.6, the answer ("uniform", 7 letters) -6.0: last by acc, but -6/7 ~ -0.86 beats the others'
    # -5.6/n for n <= 6 letters (>= 0.93 per letter)
    assert all(len(c) <= 6 for i, c in enumerate(doc["choices"]) if i != doc["answer"])
    lls = [(-6.0 if i == doc["answer"] else -5.6, False) for i in range(len(doc["choices"]))]
    assert task.process_results(doc, lls) == {"acc": 0.0, "acc_norm": 1.0}


def test_lastword_acc_and_perplexity(offline_tasks):
    task, docs = offline_tasks["atlas_lastword"]
    assert [d["target"] for d in docs] == ["uniform"] * 3
    per_doc = [task.process_results(d, [r]) for d, r in zip(docs, [(-1.0, True), (-2.0, False), (-3.0, True)])]
    # acc: greedy twice of three -> 2/3; perplexity exp(-mean ll) = exp((1 + 2 + 3) / 3) = e^2
    assert _aggregate(task, per_doc) == pytest.approx({"perplexity,none": math.exp(2.0), "acc,none": 2 / 3})
    for greedy, expected in ((False, 0.0), (True, 1.0)):
        agg = _aggregate(task, [task.process_results(d, [(-1.0, greedy)]) for d in docs])
        assert agg["acc,none"] == expected


def test_rolling_word_and_byte_perplexity(offline_tasks):
    task, docs = offline_tasks["atlas_rolling_ppl"]
    per_doc = [task.process_results(d, [ll]) for d, ll in zip(docs, (-10.0, -20.0, -30.0))]
    assert [r["word_perplexity"][1] for r in per_doc] == [22, 22, 22]
    assert [r["byte_perplexity"][1] for r in per_doc] == [138, 138, 140]
    # token-weighted: -sum ll / sum count = 60 / 66 words, 60 / 416 bytes
    assert _aggregate(task, per_doc) == pytest.approx(
        {
            "word_perplexity,none": math.exp(60 / 66),
            "byte_perplexity,none": math.exp(60 / 416),
            "bits_per_byte,none": 60 / 416 / math.log(2),
        }
    )


def test_offline_metrics_from_lm_eval_output(offline_tasks):
    """The whole way: per-document results -> lm-eval's aggregation -> flatten -> our `offline/...` metrics."""
    results = {"results": {}}
    scripted = {
        "atlas_lastword": lambda i, d: [(-1.0 - i, i != 1)],
        "atlas_cloze": lambda i, d: _cloze_lls(d, hit=i == 0),
        "atlas_rolling_ppl": lambda i, d: [-10.0 * (i + 1)],
    }
    for name, (task, docs) in offline_tasks.items():
        per_doc = [task.process_results(d, scripted[name](i, d)) for i, d in enumerate(docs)]
        results["results"][name] = {"alias": name, **_aggregate(task, per_doc)}
    out = summarize(flatten_results(results))
    assert out == pytest.approx(
        {
            "offline/lastword_acc": 2 / 3,  # greedy on documents 0 and 2
            "offline/lastword_ppl": math.exp(2.0),  # lls -1, -2, -3
            "offline/cloze_acc": 1 / 3,  # a hit on document 0 only
            "offline/cloze_acc_norm": 1 / 3,
            "offline/word_ppl": math.exp(60 / 66),
            "offline/bits_per_byte": 60 / 416 / math.log(2),
        }
    )
