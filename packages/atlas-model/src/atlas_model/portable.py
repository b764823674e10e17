"""Checkpoint directories that load on their own, in a Python that never imported `atlas_model`.

Hugging Face's Auto classes only know model types registered in the running process. A saved directory therefore
names, in `config.json`'s `auto_map`, a loader module saved beside the weights (`atlas_loader.py`); with
`trust_remote_code=True` the Auto classes import it, and it re-exports the classes of the installed `atlas_model`
package. The loader holds no model code, so a checkpoint always runs the installed package's code, never a stale
copy, and loading fails with a plain ImportError naming `atlas_model` where the package is missing.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

LOADER_MODULE = "atlas_loader"
AUTO_MAP = {
    "AutoConfig": f"{LOADER_MODULE}.AtlasConfig",
    "AutoModel": f"{LOADER_MODULE}.AtlasModel",
    "AutoModelForCausalLM": f"{LOADER_MODULE}.AtlasForCausalLM",
}
LOADER_SOURCE = '''"""Loads this checkpoint with the installed atlas-model package (`pip install atlas-model`).

Written by atlas_model.portable so that `AutoModelForCausalLM.from_pretrained(<this dir>, trust_remote_code=True)`
and `lm_eval --model hf --model_args pretrained=<this dir>,trust_remote_code=True` work in a fresh Python.
"""

from atlas_model import AtlasConfig, AtlasForCausalLM, AtlasModel

__all__ = ["AtlasConfig", "AtlasForCausalLM", "AtlasModel"]
'''


def write_loader(directory: str | os.PathLike) -> Path:
    """Write `atlas_loader.py` into `directory` (atomically: a crash never leaves half a module)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / f"{LOADER_MODULE}.py"
    fd, tmp = tempfile.mkstemp(prefix=f".{LOADER_MODULE}-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(LOADER_SOURCE)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
