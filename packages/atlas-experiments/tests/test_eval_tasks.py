"""The evaluation task registry (`evaluation.tasks`, docs/eval-tasks.md): every `atlas eval` command comes from it,
and a task added to it alone reaches the command line, the config checks, the in-process runner and the report."""

from __future__ import annotations

import argparse
import json

import pytest

from atlas_experiments import tracking
from atlas_experiments.cli import main
from atlas_experiments.commands.eval import run_task, task_parser
from atlas_experiments.evaluation import tasks
from atlas_experiments.evaluation.results import EvalResult, add_output_options, finish
from atlas_experiments.evaluation.tasks import CHECKPOINT, PER_PRESET, STANDALONE, EvalTask, get_task, task_names
from atlas_experiments.reporting.build import evaluation_report
from atlas_experiments.schema import ConfigError
from atlas_experiments.validate import check_task_section


def test_the_registry_holds_every_command_in_report_order():
    assert list(tasks.TASKS) == ["ppl", "lm_eval", "niah", "babilong", "mqar", "mad", "learnability"]
    assert task_names(CHECKPOINT) == ("ppl", "lm_eval", "niah", "babilong")
    assert task_names(PER_PRESET) == ("mqar", "mad") and task_names(STANDALONE) == ("learnability",)
    assert get_task("lm-eval") is get_task("lm_eval") is tasks.TASKS["lm_eval"]
    with pytest.raises(ValueError, match=r"no evaluation task 'mqr' \(tasks: ppl, lm_eval, niah"):
        get_task("mqr")
    with pytest.raises(ValueError, match=r"no task kind 'synthetic' \(kinds: checkpoint, per_preset, standalone\)"):
        task_names("synthetic")


@pytest.mark.parametrize("name", list(tasks.TASKS))
def test_each_task_parses_its_own_defaults_and_runs_its_own_handler(name, capsys):
    task = tasks.TASKS[name]
    with pytest.raises(SystemExit) as exit_:
        main(["eval", task.command, "--help"])
    assert exit_.value.code == 0 and task.help.split(":")[0] in " ".join(capsys.readouterr().out.split())
    parser = task_parser(name)
    assert parser.get_default("handler") is task.run
    with pytest.raises(SystemExit) as exit_:  # the config key is a name of the command too
        main(["eval", task.name, "--help"])
    assert exit_.value.code == 0


def test_a_task_record_refuses_an_unknown_kind_and_a_command_of_another_name():
    with pytest.raises(ValueError, match=r"kind 'model' is not one of checkpoint, per_preset, standalone"):
        EvalTask("toy", "toy", "model", "h", lambda p: None, lambda a: 0)
    with pytest.raises(ValueError, match=r"command 'toy-2' must spell the same name"):
        EvalTask("toy", "toy-2", PER_PRESET, "h", lambda p: None, lambda a: 0)


# ---- a new task in one module and one registry line, as docs/eval-tasks.md tells


def _toy_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--models", default="transformer_pp", help="presets")
    p.add_argument("--keys", type=int, default=3, help="keys to recall")
    p.add_argument("--threads", type=int)
    add_output_options(p, "results/eval/toy_recall.json")


def _toy_run(args: argparse.Namespace) -> int:
    metrics = {"acc": 1.0 / args.keys}
    return finish(EvalResult("toy_recall", args.models, metrics, protocol={"keys": args.keys}), args)


def _toy_report(by_model, ctx) -> str:
    rows = [f"{name}: {runs['toy_recall']['metrics']['acc']:.3f}" for name, runs in by_model.items()
            if "toy_recall" in runs]  # fmt: skip
    return "\n## Toy recall\n\n" + "\n".join(rows) + "\n" if rows else ""


TOY = EvalTask("toy_recall", "toy-recall", PER_PRESET, "toy recall: one number", _toy_options, _toy_run, _toy_report)


@pytest.fixture
def toy_registry(monkeypatch):
    monkeypatch.setattr(tasks, "TASKS", {**tasks.TASKS, TOY.name: TOY})


def test_a_new_task_reaches_the_cli_the_checks_the_runner_and_the_report(toy_registry, tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    out = tmp_path / "toy.json"
    argv = ["eval", "toy-recall", "--keys", "4", "--out", str(out), "--tracking-uri", uri, "--experiment", "eval_toy"]
    assert main(argv) == 0
    assert json.loads(out.read_text())["metrics"] == {"acc": 0.25}
    assert run_task("toy_recall", {"keys": 2, "out": str(tmp_path / "b.json"), "no_track": True}, where="t") == 0
    assert task_names(PER_PRESET) == ("mqar", "mad", "toy_recall")

    check_task_section({"tasks": ["toy_recall"], "toy_recall": {"keys": 5}}, (PER_PRESET,), "config synthetic")
    bad_option = r"config synthetic\.toy_recall: atlas eval toy-recall: not an option .*'kez'"
    with pytest.raises(ConfigError, match=bad_option):
        check_task_section({"tasks": ["toy_recall"], "toy_recall": {"kez": 5}}, (PER_PRESET,), "config synthetic")
    with pytest.raises(ConfigError, match=r"config evaluation: 'toy_recall' is not a task of this section"):
        check_task_section({"tasks": ["toy_recall"]}, (CHECKPOINT,), "config evaluation")

    report = evaluation_report(tracking.load_runs(uri), tmp_path / "figures")
    assert "## Toy recall\n\ntransformer_pp: 0.250" in report


def test_the_section_checks_name_the_key_that_is_wrong():
    check_task_section({"tasks": ["ppl", "niah"], "niah": {"samples": 4}}, (CHECKPOINT,), "config evaluation")
    with pytest.raises(ConfigError, match=r"config evaluation: 'niha' is not a task of this section \(its tasks: ppl"):
        check_task_section({"tasks": ["niha"]}, (CHECKPOINT,), "config evaluation")
    with pytest.raises(ConfigError, match=r"config evaluation: 'mqar' is not a task of this section"):
        check_task_section({"tasks": [], "mqar": {"steps": 3}}, (CHECKPOINT,), "config evaluation")
    with pytest.raises(ConfigError, match=r"config synthetic\.mad: atlas eval mad: .*'sweep': 'huge' is not one of"):
        check_task_section({"tasks": ["mad"], "mad": {"sweep": "huge"}}, (PER_PRESET,), "config synthetic")
    # the section's own keys are not tasks
    check_task_section({"tasks": ["mqar"], "models": ["atlas"]}, (PER_PRESET,), "s", settings=("tasks", "models"))
