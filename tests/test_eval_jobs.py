"""The workflow's evaluation jobs come from the package's task registry (workflow/lib/eval_jobs.py): a task added
to the registry gets its wildcard, command and result files without a change to the rules."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow" / "lib"))

import eval_jobs  # noqa: E402

from atlas_experiments.evaluation import tasks  # noqa: E402
from atlas_experiments.evaluation.tasks import EvalTask  # noqa: E402


def test_commands_wildcards_and_results_of_the_registry():
    assert eval_jobs.command("lm_eval") == "lm-eval" and eval_jobs.command("niah") == "niah"
    assert eval_jobs.wildcard(eval_jobs.CHECKPOINT) == "ppl|lm_eval|niah|babilong"
    assert eval_jobs.wildcard(eval_jobs.PER_PRESET) == "mqar|mad"
    assert eval_jobs.checkpoint_results("r", ["ppl", "niah"], ["atlas", "omeganet"]) == [
        "r/eval/ppl/atlas.json", "r/eval/ppl/omeganet.json", "r/eval/niah/atlas.json", "r/eval/niah/omeganet.json",
    ]  # fmt: skip
    assert eval_jobs.synthetic_results("r", ["learnability", "mqar"], ["atlas"]) == [
        "r/synthetic/mqar/atlas.json", "r/synthetic/learnability/result.json",
    ]  # fmt: skip
    options = {"lengths": [64, 128], "no_track": True, "heads": None}
    assert eval_jobs.option_args(options) == "--lengths 64,128 --no-track"
    with pytest.raises(ValueError, match="no evaluation task 'perplexity'"):
        eval_jobs.command("perplexity")


def test_a_task_added_to_the_registry_is_a_job_without_touching_the_rules(monkeypatch):
    toy = EvalTask("toy_recall", "toy-recall", eval_jobs.STANDALONE, "toy", lambda p: None, lambda a: 0)
    monkeypatch.setattr(tasks, "TASKS", {**tasks.TASKS, toy.name: toy})
    assert eval_jobs.wildcard(eval_jobs.STANDALONE) == "learnability|toy_recall"
    assert eval_jobs.command("toy_recall") == "toy-recall"
    assert eval_jobs.synthetic_results("r", ["toy_recall"], ["atlas"]) == ["r/synthetic/toy_recall/result.json"]


def test_an_empty_kind_matches_no_file(monkeypatch):
    monkeypatch.setattr(tasks, "TASKS", {k: v for k, v in tasks.TASKS.items() if v.kind != eval_jobs.STANDALONE})
    assert eval_jobs.wildcard(eval_jobs.STANDALONE) == "NONE"
