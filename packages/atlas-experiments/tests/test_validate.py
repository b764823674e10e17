"""The DAG-build checks (`atlas_experiments.validate`): what the workflow asks the package before any job runs."""

from __future__ import annotations

import pytest

from atlas_experiments.schema import ConfigError
from atlas_experiments.validate import check_command_options, check_presets, check_train_configs

RUN = {
    "model": {"preset": "atlas", "size": "tiny", "overrides": {"memory": {"window": 2}}},
    "data": {"path": "d", "seq_len": 32},
    "global_batch_tokens": 256,
    "micro_batch": 4,
    "steps": 10,
}


def test_good_runs_and_options_pass():
    check_train_configs([("config models.atlas", RUN)])
    check_command_options(["eval", "mqar"], {"steps": 5, "lrs": [1e-3, 3e-3], "match_memory": "atlas"}, "x")
    check_command_options(["eval", "niah"], {"lengths": [256, 512], "samples": 4}, "x")  # --checkpoint: the rule's
    check_presets(["atlas", "gated_deltanet"], "x")


@pytest.mark.parametrize(
    ("run", "message"),
    [
        ({**RUN, "model": {"preset": "atlas", "overrides": {"memory": {"window": "wide"}}}},
         r"^t.tsv, row 1: train\.model \(atlas, tiny\): memory: window"),
        ({**RUN, "model": {"preset": "atlas", "overrides": {"use_gama_gate": False}}},
         r"^t.tsv, row 1: train\.model\.overrides\.use_gama_gate: not an AtlasConfig field \(did you mean"),
        ({**RUN, "optim": {"lrr": 1}}, r"^t.tsv, row 1: train\.optim\.lrr: unknown key"),
        ({**RUN, "recipe": "paper-760M"}, r"^t.tsv, row 1: train\.model\.size: 'tiny' disagrees with recipe"),
    ],
)  # fmt: skip
def test_a_bad_run_names_where_and_the_key(run, message):
    with pytest.raises(ConfigError, match=message):
        check_train_configs([("config models.ok", RUN), ("t.tsv, row 1", run)])


@pytest.mark.parametrize(
    ("command", "options", "message"),
    [
        (["eval", "mqar"], {"stepz": 5}, r"^config synthetic\.mqar: atlas eval mqar: not an option of .*'stepz'"),
        (["eval", "mqar"], {"steps": "many"}, r"'steps': 'many' is not a valid int"),
        (["eval", "mad"], {"grid": "huge"}, r"'grid': 'huge' is not one of baseline, reduced, paper"),
        (["eval", "lm-eval"], {"max_docs": 3, "limitt": 2}, r"not an option of .*'limitt'"),
    ],
)  # fmt: skip
def test_a_bad_option_names_the_section_and_the_key(command, options, message):
    with pytest.raises(ConfigError, match=message):
        check_command_options(command, options, "config synthetic.mqar")


def test_an_unknown_preset_is_named():
    with pytest.raises(ConfigError, match=r"^config synthetic\.models: 'atlsa' is not a preset"):
        check_presets(["atlas", "atlsa"], "config synthetic.models")
