"""The packages' import rules, read from the source: kernels <- model <- experiments and data <- experiments (no
import runs back up), no package imports snakemake, and only `atlas_experiments.tracking` imports mlflow."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = {
    "atlas_kernels": ROOT / "packages/atlas-kernels/src/atlas_kernels",
    "atlas_data": ROOT / "packages/atlas-data/src/atlas_data",
    "atlas_model": ROOT / "packages/atlas-model/src/atlas_model",
    "atlas_experiments": ROOT / "packages/atlas-experiments/src/atlas_experiments",
}
# what each package may import of the others
ALLOWED = {
    "atlas_kernels": set(),
    "atlas_data": set(),
    "atlas_model": {"atlas_kernels"},
    "atlas_experiments": {"atlas_kernels", "atlas_data", "atlas_model"},
}
TRACKING = SOURCES["atlas_experiments"] / "tracking"


def _imports(path: Path) -> set[str]:
    """Top-level names of every module `path` imports, at module level or inside functions."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def _files(package: str) -> list[Path]:
    return sorted(SOURCES[package].rglob("*.py"))


@pytest.mark.parametrize("package", sorted(SOURCES))
def test_no_import_runs_back_up(package):
    bad = {
        str(path.relative_to(ROOT)): sorted(found)
        for path in _files(package)
        if (found := (_imports(path) & set(SOURCES)) - ALLOWED[package] - {package})
    }
    assert not bad, bad


@pytest.mark.parametrize("package", sorted(SOURCES))
def test_no_package_imports_snakemake_and_only_tracking_imports_mlflow(package):
    snakemake = [str(p.relative_to(ROOT)) for p in _files(package) if "snakemake" in _imports(p)]
    mlflow = [
        str(p.relative_to(ROOT)) for p in _files(package) if "mlflow" in _imports(p) and TRACKING not in p.parents
    ]
    assert not snakemake and not mlflow, {"snakemake": snakemake, "mlflow outside tracking": mlflow}


def test_the_rules_see_imports_inside_functions():
    # mlflow is imported lazily inside tracking's functions: the scan must find those, or the test above is empty
    assert "mlflow" in _imports(TRACKING / "__init__.py")
    assert "mlflow" in _imports(TRACKING / "parents.py")
