"""S-NIAH and BABILong scoring against hand-computed results on fixed predictions (no model)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from atlas_data.synthetic.niah import string_match
from atlas_experiments.evaluation import needle
from atlas_experiments.evaluation.babilong_eval import babilong_judge, babilong_metrics
from atlas_experiments.evaluation.needle import niah_metrics, rank_verdict, score_samples

# ------------------------------------------------------------------------------------------------------ S-NIAH

S1, MK = "niah_single_1", "niah_multikey_1"

# (task, length, depth, generate hit, rank hit); cells interleaved so grouping cannot lean on the order
NIAH_ROWS = [
    (S1, 128, 0.0, 1, 1),
    (MK, 128, 0.0, 0, 1),
    (S1, 128, 0.5, 0, 0),
    (S1, 256, 0.0, 1, 1),
    (S1, 128, 0.0, 0, 1),
    (MK, 128, 0.0, 1, 1),
    (S1, 256, 0.0, 1, 1),
    (S1, 128, 0.0, 1, 1),
]


def _scored(rows, fields, hit=None, rank_hit=None):
    """Samples with `fields` from the leading columns of `rows`, records from the last two (generate hit, rank
    hit); `hit` / `rank_hit` replace every row's."""
    samples = [SimpleNamespace(**dict(zip(fields, row))) for row in rows]
    records = [
        {"generate_correct": bool(g if hit is None else hit), "rank_correct": bool(r if rank_hit is None else rank_hit)}
        for *_, g, r in rows
    ]
    return samples, records


def _niah(rows, hit=None, rank_hit=None):
    return _scored(rows, ("task", "length", "depth"), hit, rank_hit)


def test_niah_mixed_cells_lengths_tasks_and_overall():
    metrics = niah_metrics(*_niah(NIAH_ROWS), ["generate"])
    assert metrics == pytest.approx(
        {
            # cells: S1/128/0 hits 1,0,1 -> 2/3; S1/128/0.5 hits 0 -> 0; S1/256/0 hits 1,1 -> 1;
            # MK/128/0 hits 0,1 -> 1/2
            f"acc/{S1}/len=128/depth=0": 2 / 3,
            f"acc/{S1}/len=128/depth=0.5": 0.0,
            f"acc/{S1}/len=256/depth=0": 1.0,
            f"acc/{MK}/len=128/depth=0": 0.5,
            # per length, pooled over the length's samples (not the mean of cell means, 1/3):
            # S1/128 hits 1,0,1,0 -> 2/4
            f"acc/{S1}/len=128": 0.5,
            f"acc/{S1}/len=256": 1.0,
            f"acc/{MK}/len=128": 0.5,
            # per task, pooled: S1 hits 1,0,1,0,1,1 -> 4/6; MK 1/2
            f"acc/{S1}": 4 / 6,
            f"acc/{MK}": 0.5,
            # overall: 5 hits of 8 samples
            "acc": 5 / 8,
        }
    )


def test_niah_rank_scoring_uses_its_own_hits_and_prefix():
    metrics = niah_metrics(*_niah(NIAH_ROWS), ["generate", "rank"])
    # rank hits: everything but the one S1/128/0.5 sample -> 7/8 overall, S1 5/6, cell S1/128/0 3/3
    assert metrics["rank_acc"] == pytest.approx(7 / 8)
    assert metrics[f"rank_acc/{S1}"] == pytest.approx(5 / 6)
    assert metrics[f"rank_acc/{S1}/len=128/depth=0"] == 1.0
    assert metrics[f"rank_acc/{S1}/len=128/depth=0.5"] == 0.0
    assert metrics["acc"] == pytest.approx(5 / 8)  # the generate metrics are untouched by the rank ones


@pytest.mark.parametrize("hit, expected", [(0, 0.0), (1, 1.0)])
def test_niah_all_miss_is_zero_and_all_hit_is_one(hit, expected):
    metrics = niah_metrics(*_niah(NIAH_ROWS, hit=hit, rank_hit=hit), ["generate", "rank"])
    assert len(metrics) == 2 * 10
    assert all(v == expected for v in metrics.values()), metrics


def test_niah_judge_is_a_case_insensitive_substring_match():
    assert string_match(" The special magic number is 7654321.", "7654321")
    assert string_match("APPLE", "apple")
    assert not string_match("765432", "7654321")  # a dropped digit is a miss
    assert not string_match("", "7654321")


def test_rank_verdict_argmax_ties_and_rank():
    assert rank_verdict([-0.5, -2.0, -1.0], 0) == (True, 1)
    # candidate 2 scores highest: a miss, and the answer is second (one candidate strictly above it)
    assert rank_verdict([-1.0, -2.0, -0.5], 0) == (False, 2)
    assert rank_verdict([-1.0, -2.0, -0.5], 1) == (False, 3)
    # a tie goes to the earlier candidate; a tied later answer is no hit, yet nothing scores strictly higher
    assert rank_verdict([-1.0, -1.0], 0) == (True, 1)
    assert rank_verdict([-1.0, -1.0], 1) == (False, 1)


class _CharTokenizer:
    eos_token_id = None

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [ord(c) for c in text]}

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(i) for i in ids)


def test_score_samples_judges_decoded_text_and_ranks_the_answer(monkeypatch):
    """The per-sample loop around the model: what is decoded goes to the judge, the answer's index to the ranking."""
    scripted = {
        "p0": ("the number is 42", [-0.1, -3.0]),  # generate hit; the answer ranks first
        "p1": ("no idea", [-2.0, -0.2]),  # generate miss; a distractor ranks first
    }

    def fake_score_prompt(model, ids, *, device, max_new_tokens, eos_id, candidates):
        text, logprobs = scripted["".join(chr(i) for i in ids)]
        assert max_new_tokens == 8 and len(candidates) == 2
        return {"generated": [ord(c) for c in text], "candidate_logprobs": logprobs}

    monkeypatch.setattr(needle, "score_prompt", fake_score_prompt)
    samples = [
        SimpleNamespace(index=i, length=64, prompt=f"p{i}", answer="42", candidates=["42", "17"], tokens_to_generate=8)
        for i in range(2)
    ]
    records = score_samples(
        SimpleNamespace(eval=lambda: None),
        _CharTokenizer(),
        samples,
        scorings=["generate", "rank"],
        device="cpu",
        judge=lambda s, text: string_match(text, s.answer),
        progress=False,
    )
    assert [r["prediction"] for r in records] == ["the number is 42", "no idea"]
    assert [r["generate_correct"] for r in records] == [True, False]
    assert [r["rank_correct"] for r in records] == [True, False]
    assert [r["answer_rank"] for r in records] == [1, 2]


# ---------------------------------------------------------------------------------------------------- BABILong

# (task, length, generate hit, rank hit)
BABILONG_ROWS = [
    ("qa1", 0, 1, 1),
    ("qa2", 1000, 0, 0),
    ("qa1", 1000, 0, 1),
    ("qa2", 0, 1, 1),
    ("qa1", 0, 1, 1),
    ("qa2", 1000, 0, 1),
    ("qa1", 0, 0, 1),
    ("qa2", 0, 0, 0),
    ("qa1", 1000, 1, 1),
    ("qa1", 0, 1, 1),
    ("qa2", 1000, 0, 0),
]


def _babilong(rows, hit=None):
    return _scored(rows, ("task", "length"), hit, hit)


def test_babilong_mixed_cells_tasks_lengths_and_overall():
    metrics = babilong_metrics(*_babilong(BABILONG_ROWS), ["generate"])
    assert metrics == pytest.approx(
        {
            # cells: qa1/0 hits 1,1,0,1 -> 3/4; qa1/1000 hits 0,1 -> 1/2; qa2/0 hits 1,0 -> 1/2; qa2/1000 0,0,0 -> 0
            "acc/qa1/len=0": 0.75,
            "acc/qa1/len=1000": 0.5,
            "acc/qa2/len=0": 0.5,
            "acc/qa2/len=1000": 0.0,
            # per task, pooled over its samples: qa1 4/6, qa2 1/5
            "acc/qa1": 4 / 6,
            "acc/qa2": 1 / 5,
            # per length, the mean over tasks of the cells (pooled would give 4/6 and 1/5):
            # len=0 (3/4 + 1/2) / 2 = 5/8; len=1000 (1/2 + 0) / 2 = 1/4
            "acc/len=0": 5 / 8,
            "acc/len=1000": 0.25,
            # overall, pooled: 5 hits of 11 samples
            "acc": 5 / 11,
        }
    )


def test_babilong_rank_scoring_uses_its_own_hits_and_prefix():
    metrics = babilong_metrics(*_babilong(BABILONG_ROWS), ["rank"])
    assert "acc" not in metrics
    # rank hits: qa1 6/6; qa2/0 1/2, qa2/1000 1/3 -> qa2 2/5; len=1000 (1 + 1/3) / 2 = 2/3; overall 8/11
    assert metrics["rank_acc/qa1"] == 1.0
    assert metrics["rank_acc/qa2"] == pytest.approx(2 / 5)
    assert metrics["rank_acc/len=1000"] == pytest.approx(2 / 3)
    assert metrics["rank_acc"] == pytest.approx(8 / 11)


@pytest.mark.parametrize("hit, expected", [(0, 0.0), (1, 1.0)])
def test_babilong_all_miss_is_zero_and_all_hit_is_one(hit, expected):
    metrics = babilong_metrics(*_babilong(BABILONG_ROWS, hit=hit), ["generate", "rank"])
    assert len(metrics) == 2 * 9
    assert all(v == expected for v in metrics.values()), metrics


def _babilong_sample(answer, question="Where is Mary?"):
    return SimpleNamespace(answer=answer, question=question, candidates=["kitchen", "garden", "hallway"])


@pytest.mark.parametrize(
    "prediction, hit",
    [
        ("kitchen", True),
        (" Kitchen.", True),
        ("kitchen\ngarden", True),  # only the first line is read
        ("garden", False),
        ("kitchen or garden", False),  # two labels: no hit
        ("", False),
    ],
)
def test_babilong_judge(prediction, hit):
    assert babilong_judge(_babilong_sample("kitchen"), prediction) is hit


def test_babilong_judge_ignores_labels_the_question_names():
    sample = _babilong_sample("hallway", question="Where was the apple before the kitchen?")
    assert babilong_judge(sample, "the kitchen, then the hallway")
    assert not babilong_judge(sample, "the kitchen")
