"""Every preset arm of the claims file as an `AtlasConfig`: proves presets and override keys are real settings.

Separate from `claims` because it imports the model stack (torch, transformers), which loading the file does not need.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from atlas_experiments.study._fields import ClaimsError
from atlas_experiments.study.claims import Registry


def check_arm_configs(registry: Registry, size: str = "tiny") -> None:
    """Build the `AtlasConfig` of every preset arm at `size`, and at the size and model overrides of every protocol
    that runs it; an unknown preset or override key raises `ClaimsError` naming a claim that uses the arm."""
    import atlas_model

    for arm in registry.arms.values():
        if arm.preset is None:
            continue
        users = [c for c in registry.claims if any(a.name == arm.name for a in c.arms)]
        where = f"claims[{users[0].id}].arms.{arm.name}"
        if arm.preset not in atlas_model.PRESETS:
            raise ClaimsError(
                f"{where}.preset: unknown {arm.preset!r}; expected one of {', '.join(atlas_model.PRESETS)}"
            )
        targets: list[tuple[str, Mapping[str, Any]]] = [(size, {})]
        for c in users:
            p = registry.protocol_of(c)
            if p is not None and p.size is not None and (p.size, p.model_overrides) not in targets:
                targets.append((p.size, p.model_overrides))
        for target_size, base in targets:
            model = arm.model_arm(target_size, base)
            try:
                atlas_model.AtlasConfig.from_preset(model.preset, size=model.size, **model.model()["overrides"])
            except (ValueError, TypeError) as exc:
                raise ClaimsError(f"{where}.overrides (size {target_size}): {exc}") from exc
