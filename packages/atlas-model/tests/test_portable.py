"""Saved directories load without importing atlas_model first (`atlas_model.portable`): `config.json` maps the
Auto classes to a loader module saved beside the weights, which re-exports the installed package's classes."""

import json
import os
import subprocess
import sys

import torch

from atlas_model.portable import AUTO_MAP, LOADER_MODULE

FRESH = """
import json, sys
import torch
from transformers import AutoConfig, AutoModelForCausalLM
path, trust = sys.argv[1], sys.argv[2] == "trust"
assert "atlas_model" not in sys.modules
try:
    config = AutoConfig.from_pretrained(path, trust_remote_code=trust)
    model = AutoModelForCausalLM.from_pretrained(path, trust_remote_code=trust, dtype=torch.float32).eval()
except ValueError as exc:
    print("REFUSED " + json.dumps(str(exc)))
    raise SystemExit(0)
with torch.no_grad():
    logits = model(torch.arange(12).view(1, 12)).logits[0].tolist()
print("LOADED " + json.dumps({"config": type(config).__module__, "logits": logits}))
"""


def _fresh(path, trust: bool, tmp_path) -> tuple[str, object]:
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf-home"), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", FRESH, str(path), "trust" if trust else "no"],
        env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith(("LOADED ", "REFUSED ")))
    kind, _, payload = line.partition(" ")
    return kind, json.loads(payload)


def test_save_pretrained_writes_the_auto_map_and_the_loader(make_model, tmp_path):
    make_model("atlas", vocab_size=64).save_pretrained(tmp_path / "m")
    names = sorted(p.name for p in (tmp_path / "m").iterdir())
    assert names == ["atlas_loader.py", "config.json", "generation_config.json", "model.safetensors"]
    assert json.loads((tmp_path / "m" / "config.json").read_text())["auto_map"] == AUTO_MAP
    source = (tmp_path / "m" / f"{LOADER_MODULE}.py").read_text()
    # the loader holds no model code of its own: a checkpoint runs the installed package, never a stale copy
    assert "from atlas_model import AtlasConfig, AtlasForCausalLM, AtlasModel" in source
    assert "class " not in source and "def " not in source


def test_a_fresh_python_loads_the_directory_with_trust_remote_code_only(make_model, tmp_path):
    model = make_model("atlas", vocab_size=64)
    model.save_pretrained(tmp_path / "m")
    kind, refused = _fresh(tmp_path / "m", False, tmp_path)
    assert kind == "REFUSED" and "trust_remote_code=True" in refused
    kind, loaded = _fresh(tmp_path / "m", True, tmp_path)
    assert kind == "LOADED" and loaded["config"] == "atlas_model.config"
    with torch.no_grad():
        want = model(torch.arange(12).view(1, 12)).logits[0]
    torch.testing.assert_close(torch.tensor(loaded["logits"]), want, rtol=0, atol=1e-5)
