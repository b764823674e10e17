"""A model arm and its training job (`atlas_experiments.arms`): the workflow's runs and the study's arms are one
kind of object, and one function builds their TrainConfig mappings."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from atlas_experiments.arms import ModelArm
from atlas_experiments.study.claims import Arm
from atlas_experiments.train.config import TrainConfig


def test_layers_of_overrides_merge_by_the_one_rule():
    base = ModelArm("atlas", "tiny", {"memory": {"window": 4, "chunk_size": 4}, "use_gamma_gate": True})
    cell = base.over({"memory": {"window": 1}}, {"use_gamma_gate": False})
    assert cell.overrides == {"memory": {"window": 1, "chunk_size": 4}, "use_gamma_gate": False}
    assert base.overrides == {"memory": {"window": 4, "chunk_size": 4}, "use_gamma_gate": True}  # untouched
    frozen = MappingProxyType({"memory": MappingProxyType({"window": 2})})
    assert ModelArm("atlas").over(frozen).model() == {"preset": "atlas", "size": "tiny",
                                                      "overrides": {"memory": {"window": 2}}}  # fmt: skip


def test_the_training_job_puts_the_arm_data_and_tracking_over_the_defaults():
    defaults = {"steps": 7, "global_batch_tokens": 66, "micro_batch": 2, "optim": {"lr": 1e-3, "warmup_steps": 2}}
    cfg = ModelArm("omeganet", "tiny", {"memory": {"window": 2}}).train_config(
        defaults, data={"path": "d", "seq_len": 33}, tracking={"enabled": False}, seed=5, optim={"lr": 3e-3}
    )
    assert cfg["model"] == {"preset": "omeganet", "size": "tiny", "overrides": {"memory": {"window": 2}}}
    assert cfg["optim"] == {"lr": 3e-3, "warmup_steps": 2} and (cfg["steps"], cfg["seed"]) == (7, 5)
    assert cfg["data"] == {"path": "d", "seq_len": 33} and cfg["tracking"] == {"enabled": False}
    assert TrainConfig.from_dict(cfg).model.overrides == {"memory": {"window": 2}}


def test_a_study_arm_is_the_model_arm_of_the_same_ablation_cell():
    """`atlas_c1` of the claims file and the `window~1` row of the window table on the same base are one model."""
    protocol_overrides = {"memory": {"muon_float64": False}}
    study = Arm("atlas_c1", "atlas", MappingProxyType({"memory": {"window": 1}}), MappingProxyType({}))
    table_row = ModelArm("atlas", "tiny", protocol_overrides).over({"memory": {"window": 1}})
    assert study.model_arm("tiny", protocol_overrides) == table_row
    with pytest.raises(ValueError, match="arm 'all' selects a task cell; it is no model"):
        Arm("all", None, MappingProxyType({}), MappingProxyType({"setting": 1})).model_arm("tiny")
