"""Command options from a mapping: `option_argv` (for a shell) and `options_namespace` (for an in-process run) agree
with the command line, and a bad key or value is refused by name."""

from __future__ import annotations

import argparse
import shlex

import pytest

from atlas_experiments.commands.eval import run_task, task_parser
from atlas_experiments.commands.options import option_argv, options_namespace


def test_option_argv_spells_every_kind_of_value():
    argv = option_argv({"kv_pairs": [2, 4], "no_track": True, "heads": None, "cpu": False, "lr": 3e-4})
    assert argv == ["--kv-pairs", "2,4", "--no-track", "--lr", "0.0003"]


@pytest.mark.parametrize("task", ["mqar", "mad", "learnability"])
def test_a_mapping_gives_the_namespace_its_command_line_gives(task):
    options = {
        "mqar": {"settings": ["32x4", "64x8"], "vocab_size": 64, "width": 128, "steps": 7, "lrs": "1e-3,3e-3",
                 "no_track": True, "seed": 3, "out": "r/x.json"},
        "mad": {"tasks": "memorization", "sweep": "reduced", "steps": 33, "batch_size": 8, "out": "m.json"},
        "learnability": {"dim": 16, "seq_len": 63, "memories": "2x1", "optimizer": "sgd", "lr": 0.1, "seed": 7},
    }[task]  # fmt: skip
    parser = task_parser(task)
    from_argv = parser.parse_args(shlex.split(shlex.join(option_argv(options))))
    from_mapping = options_namespace(parser, options, where="test")
    a, b = vars(from_argv), vars(from_mapping)
    if task == "mqar":  # a list stays a list in-process; the command line joins it (parse_list reads both alike)
        assert a.pop("settings") == "32x4,64x8" and b.pop("settings") == ["32x4", "64x8"]
    assert a == b


def test_bad_keys_and_values_are_refused_by_name():
    parser = task_parser("mqar")
    with pytest.raises(ValueError, match=r"protocols\.p\.args: not an option of `.*mqar`: 'widht' \(its options: "):
        options_namespace(parser, {"widht": 64}, where="protocols.p.args")
    with pytest.raises(ValueError, match=r"where: 'steps': 'many' is not a valid int"):
        options_namespace(parser, {"steps": "many"}, where="where")
    with pytest.raises(ValueError, match=r"where: 'steps': 2\.5 is not an integer"):
        options_namespace(parser, {"steps": 2.5}, where="where")
    with pytest.raises(ValueError, match=r"where: 'no_track' is a flag: true or false, not 'yes'"):
        options_namespace(parser, {"no_track": "yes"}, where="where")
    with pytest.raises(ValueError, match=r"where: 'sweep': 'huge' is not one of paper, reduced, single"):
        options_namespace(task_parser("mad"), {"sweep": "huge"}, where="where")
    with pytest.raises(ValueError, match=r"where: 'steps' takes one int, not \[1, 2\]"):
        options_namespace(parser, {"steps": [1, 2]}, where="where")
    with pytest.raises(ValueError, match=r"atlas eval: no evaluation task 'mqr' \(tasks: ppl, lm_eval, "):
        task_parser("mqr")


def test_a_required_option_must_be_present():
    parser = argparse.ArgumentParser(prog="atlas demo")
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--samples", type=int, default=4)
    with pytest.raises(ValueError, match=r"where: `atlas demo` needs 'checkpoint'"):
        options_namespace(parser, {"samples": 2}, where="where")
    assert vars(options_namespace(parser, {"checkpoint": "c"}, where="where")) == {"checkpoint": "c", "samples": 4}


def test_run_task_runs_the_command_in_process(tmp_path):
    out = tmp_path / "learn.json"
    options = {"settings": "1", "dim": 8, "seq_len": 33, "rank": 2, "memories": "2x1", "bins": 4, "seed": 5,
               "generator": "orthogonal", "threads": 1, "out": str(out), "no_track": True,
               "no_progress": True}  # fmt: skip
    assert run_task("learnability", options, where="test") == 0
    import json

    result = json.loads(out.read_text())
    assert result["task"] == "learnability" and "final_loss/layers=2/exp=1/1_low_rank" in result["metrics"]
    assert result["protocol"]["stream"]["generator"] == "orthogonal"
    assert any("Haar orthogonal weights" in d for d in result["deviations"])
