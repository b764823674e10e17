"""atlas-model: ATLAS (Behrouz et al., arXiv 2505.23735), its baselines and hybrids as Hugging Face causal LMs.

Importing the package registers `AtlasConfig` ("atlas_lm") with `AutoConfig`, `AutoModel` and
`AutoModelForCausalLM`, so saved models load with the Auto classes (and lm-eval's `hf` backend). A saved
directory also loads in a Python that never imported the package, with `trust_remote_code=True`
(`atlas_model.portable`).

Public API:
    AtlasConfig, AtlasConfigError, AtlasConfig.from_preset(name, size="tiny", **overrides)
    check_overrides(overrides, where): every key an AtlasConfig field, every `memory` key a MemoryConfig field
    PRESETS (model names), SIZES (size names), PAPER_SIZES, PRESET_TABLE, SIZE_TABLE
    AtlasModel, AtlasForCausalLM, AtlasPreTrainedModel, AtlasCache
"""

from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

from atlas_model.cache import AtlasCache
from atlas_model.config import AtlasConfig, AtlasConfigError, check_overrides
from atlas_model.modeling import AtlasForCausalLM, AtlasModel, AtlasPreTrainedModel
from atlas_model.presets import PAPER_SIZES, PRESET_TABLE, PRESETS, SIZE_TABLE, SIZES

__version__ = "0.3.0"

AutoConfig.register(AtlasConfig.model_type, AtlasConfig, exist_ok=True)
AutoModel.register(AtlasConfig, AtlasModel, exist_ok=True)
AutoModelForCausalLM.register(AtlasConfig, AtlasForCausalLM, exist_ok=True)

__all__ = [
    "PAPER_SIZES",
    "PRESETS",
    "PRESET_TABLE",
    "SIZES",
    "SIZE_TABLE",
    "AtlasCache",
    "AtlasConfig",
    "AtlasConfigError",
    "AtlasForCausalLM",
    "AtlasModel",
    "AtlasPreTrainedModel",
    "check_overrides",
]
