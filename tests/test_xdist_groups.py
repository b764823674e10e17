"""`make test` hands whole test files to pytest-xdist workers (conftest.py): the grouping and the longest-first list
must name files that exist, or a renamed file would silently lose its place at the front (or its group)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _conftest():
    spec = importlib.util.spec_from_file_location("root_conftest", ROOT / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_longest_first_files_exist_and_are_test_files():
    conftest = _conftest()
    for entry in conftest.LONGEST_FIRST:
        path = ROOT / entry
        assert path.exists(), f"conftest.py LONGEST_FIRST: {entry} does not exist"
        files = [path] if path.is_file() else sorted(path.glob("test_*.py"))
        assert files and all(f.name.startswith("test_") for f in files), entry


def test_a_file_is_one_unit_and_the_cluster_files_are_one():
    group = _conftest().work_group
    assert group("tests/test_workflow.py::test_lint_is_clean") == "tests/test_workflow.py"
    assert group("packages/atlas-kernels/tests/test_checkpoint_group.py::test_x[mlp-33-3]") == (
        "packages/atlas-kernels/tests/test_checkpoint_group.py"
    )
    cluster = {group(f"tests/cluster/{p.name}::test_x") for p in (ROOT / "tests" / "cluster").glob("test_*.py")}
    assert cluster == {"tests/cluster"}
