"""Repository-wide pytest setup: offline Hugging Face libraries, no telemetry, GPU tests skipped without CUDA."""

import os
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("HF_HOME", os.path.join(tempfile.gettempdir(), "atlas-tests-hf-home"))

# An xdist worker (`make test`) shares the cores with the others: one BLAS/OpenMP thread each, for its tests and the
# processes they start, or two workers of two threads on two cores spin against each other (measured on a busy
# 2-core machine: one float64 chunk-op test took 26.6 s with two threads, 2.2 s with one).
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

# The Triton interpreter must be on before `triton.language` is first imported: `triton.jit` decides at decoration
# time whether a function (our kernels and triton's own `tl.sum`) is interpreted. torch imports triton.language as
# soon as any test touches torch._dynamo (torch.utils.checkpoint does), which can happen in a package collected
# before atlas-kernels, whose own conftest would then be too late.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


# `make test` runs the suite on every core (pytest-xdist, --dist loadfile): each test file goes whole to one
# worker, so a module's fixture (the whole-DAG run, the GPU-call rehearsal) runs once, and the tests/cluster files go
# together because a second session-wide local Slurm (this machine's one node, its munged) would collide with the
# first. The files below take the longest (a minute or more each on 2 cores); they start first so that no worker is
# left alone with one of them at the end.
LONGEST_FIRST = (
    "tests/test_workflow.py",
    "tests/test_workflow_e2e.py",
    "tests/cluster",
    "packages/atlas-kernels/tests/test_checkpoint_group.py",
    "packages/atlas-kernels/tests/test_memory_equivalence.py",
    "packages/atlas-kernels/tests/test_triton_mlp.py",
)


def work_group(nodeid: str) -> str:
    """The unit of work a worker takes whole: the test's file, or tests/cluster for the cluster tests."""
    path = nodeid.split("::", 1)[0]
    return "tests/cluster" if path.startswith("tests/cluster/") else path


def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist") != "loadfile":
        return None  # xdist's own (benchmarks/gpu/session.sh spreads one file's GPU tests with its default)
    from xdist.scheduler import LoadScopeScheduling

    class ByGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_group(nodeid)

    config.option.loadscopereorder = False  # keep the collection order below, not "most tests first"
    return ByGroup(config, log)


def pytest_collection_modifyitems(config, items):
    if hasattr(config, "workerinput"):  # an xdist worker: the order in which the controller hands out files
        rank = {group: i for i, group in enumerate(LONGEST_FIRST)}
        items.sort(key=lambda item: rank.get(work_group(item.nodeid), len(rank)))
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (gpu marker)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
