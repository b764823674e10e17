"""Golden losses: short fixed CPU runs (fp32, one thread) of a tiny Transformer++, Atlas, OmegaNet and Gated
DeltaNet whose per-step losses must match `golden/<case>_losses.json` to a relative 1e-4.

Each golden file also stores the train config, the resolved model config and a fingerprint of the prepared data
it was made with; a difference in any of them fails before training, naming the keys (options added since the
golden was made are not a difference: their defaults must keep the old losses, which the loss check verifies).

After a deliberate numerical change, regenerate and commit the files with the change (never in CI: the command
refuses when `CI` is set) and read the old/new loss table it prints:

    python -m atlas_experiments.train.golden --update [CASE ...]
    python -m atlas_experiments.train.golden [CASE ...]   # check only, exit 1 on a difference

The cases are `atlas_experiments.train.golden.CASES`.
"""

from __future__ import annotations

import json

import pytest

from atlas_experiments.train import golden


@pytest.mark.parametrize("name", list(golden.CASES))
def test_golden_losses(tmp_path, prepared_data, name):
    path = golden.golden_path(name)
    assert path.is_file(), f"no golden file {path}; generate it with `{golden.UPDATE_COMMAND} {name}`"
    stored = json.loads(path.read_text())
    mismatch = golden.config_mismatch(name, stored, golden.describe(name, prepared_data))
    if mismatch:
        pytest.fail(mismatch, pytrace=False)
    losses = golden.run_case(name, prepared_data, tmp_path / "run")
    rtol = stored.get("rtol", golden.RTOL)
    if golden.loss_mismatch(stored["losses"], losses, rtol):
        pytest.fail(
            f"golden {name}: losses differ (rtol {rtol:g}):\n{golden.loss_diff(stored['losses'], losses, rtol)}\n"
            f"if the change is deliberate, regenerate with `{golden.UPDATE_COMMAND} {name}` (not in CI)",
            pytrace=False,
        )
    assert losses[-1] < losses[0]  # it learns
    if name == "transformer_pp_tiny":
        assert losses[-1] < losses[0] - 0.5


def test_a_changed_config_is_a_clear_failure(prepared_data, monkeypatch):
    stored = golden.describe("omeganet_tiny", prepared_data)
    monkeypatch.setitem(golden.CASES, "omeganet_tiny", {**golden.CASES["omeganet_tiny"], "seed": 4})
    message = golden.config_mismatch("omeganet_tiny", stored, golden.describe("omeganet_tiny", prepared_data))
    assert "config.seed: golden 3, now 4" in message
    assert f"regenerate with `{golden.UPDATE_COMMAND} omeganet_tiny`" in message
    # a field the golden predates is an added option, not a difference
    stored["model_config"].pop("eta_max")
    monkeypatch.setitem(golden.CASES, "omeganet_tiny", {**golden.CASES["omeganet_tiny"], "seed": 3})
    assert golden.config_mismatch("omeganet_tiny", stored, golden.describe("omeganet_tiny", prepared_data)) is None
    stored["model_config"]["eta_max"] = 0.5
    assert "model_config.eta_max: golden 0.5, now 1.0" in golden.config_mismatch(
        "omeganet_tiny", stored, golden.describe("omeganet_tiny", prepared_data)
    )


def test_update_refuses_under_ci(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CI", "true")
    assert golden.main(["--update", "--dir", str(tmp_path)]) == 2
    assert "refusing" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_loss_diff_shows_old_and_new():
    old, new = [5.0, 4.0, 3.0], [5.0, 4.1, 3.0, 2.0]
    assert golden.loss_mismatch(old, new) == [1, 3]
    table = golden.loss_diff(old, new)
    assert "step   2: old" in table and "4.1" in table and "step   4" in table and "step   1" not in table
    assert "3 bit-identical" in golden.loss_diff(old, old)
