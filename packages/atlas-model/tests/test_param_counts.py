"""The parameter table of the README is the script's output, and every non-hybrid preset is within 10 % of the
paper's nominal size."""

import importlib.util
from pathlib import Path

from atlas_model import PAPER_SIZES, PRESETS, AtlasConfig
from atlas_model.stats import parameter_count

PACKAGE = Path(__file__).resolve().parents[1]
NOMINAL = {"170M": 170e6, "340M": 340e6, "760M": 760e6, "1.3B": 1.3e9}


def _script():
    spec = importlib.util.spec_from_file_location("param_counts", PACKAGE / "scripts" / "param_counts.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_parameter_table_is_current():
    script = _script()
    table = script.table(list(PRESETS), ["tiny", "small", *PAPER_SIZES])
    assert table in (PACKAGE / "README.md").read_text(), "rerun scripts/param_counts.py and update the README"


def test_non_hybrid_presets_match_the_nominal_sizes():
    for name in PRESETS:
        if name.startswith("atlas_m"):  # hybrids hold two mixers per block (README)
            continue
        for size in PAPER_SIZES:
            n = parameter_count(AtlasConfig.from_preset(name, size))
            assert abs(n / NOMINAL[size] - 1) < 0.10, (name, size, n)


def test_parameter_count_matches_an_allocated_model():
    config = AtlasConfig.from_preset("atlas_mac", "tiny", tie_word_embeddings=True, mac_persistent_tokens=2)
    from atlas_model import AtlasForCausalLM

    model = AtlasForCausalLM(config)
    assert parameter_count(config) == sum(p.numel() for p in model.parameters())
    embedding = model.get_input_embeddings().weight.numel()
    assert parameter_count(config, embeddings=False) == parameter_count(config) - embedding
