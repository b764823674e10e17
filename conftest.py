"""Repository-wide pytest setup: offline Hugging Face libraries, no telemetry, GPU tests skipped without CUDA."""

import os
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("HF_HOME", os.path.join(tempfile.gettempdir(), "atlas-tests-hf-home"))

import pytest  # noqa: E402
import torch  # noqa: E402

# The Triton interpreter must be on before `triton.language` is first imported: `triton.jit` decides at decoration
# time whether a function (our kernels and triton's own `tl.sum`) is interpreted. torch imports triton.language as
# soon as any test touches torch._dynamo (torch.utils.checkpoint does), which can happen in a package collected
# before atlas-kernels, whose own conftest would then be too late.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (gpu marker)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
