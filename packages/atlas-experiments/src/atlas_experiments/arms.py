"""A model arm: an `atlas_model` preset at a size with `AtlasConfig` overrides, and the one function that turns it
into a training job (docs/settings.md, "One arm, one training job").

The workflow's pretraining runs (a model of config `models`, or an ablation table row on top of the ablation
base) and the claims study's language-model jobs (an arm of `claims.yaml` at its protocol's size and model
overrides) are both `ModelArm`s, and both get their `TrainConfig` mapping from `ModelArm.train_config`; layered
overrides combine by the project's one merge rule (`configio.merge_settings`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from atlas_experiments.configio import merge_settings


def _plain(value: Any) -> Any:
    """Mutable plain data (dicts and lists) of possibly frozen mappings and tuples."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


@dataclass(frozen=True)
class ModelArm:
    preset: str
    size: str = "tiny"
    overrides: Mapping[str, Any] = field(default_factory=dict)

    def over(self, *layers: Mapping[str, Any]) -> ModelArm:
        """The same arm with `layers` of overrides merged on top, in order (the later wins)."""
        overrides = _plain(self.overrides)
        for layer in layers:
            overrides = merge_settings(overrides, _plain(layer))
        return ModelArm(self.preset, self.size, overrides)

    def model(self) -> dict[str, Any]:
        """The `model` section of a TrainConfig (and of a `--models` file, with a name)."""
        return {"preset": self.preset, "size": self.size, "overrides": _plain(self.overrides)}

    def train_config(
        self,
        defaults: Mapping[str, Any],
        *,
        data: Mapping[str, Any],
        tracking: Mapping[str, Any],
        **settings: Any,
    ) -> dict[str, Any]:
        """The TrainConfig mapping of training this arm: `defaults` (a workflow's train defaults, a protocol's
        training arguments), then `settings`, the arm's model, the data and the tracking section on top."""
        job = {**settings, "model": self.model(), "data": _plain(data), "tracking": _plain(tracking)}
        return merge_settings(_plain(defaults), job)
