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


def _module_names() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the packages (a package is its __init__)."""
    modules = {}
    for root in SOURCES.values():
        for path in root.rglob("*.py"):
            parts = list(path.relative_to(root.parent).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def _runtime_imports(tree: ast.AST):
    """Import nodes that run (anywhere, functions included), skipping `if TYPE_CHECKING:` blocks."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING":
            yield from (n for child in node.orelse for n in _runtime_imports_of(child))
            continue
        yield from _runtime_imports_of(node)


def _runtime_imports_of(node: ast.AST):
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield node
    yield from _runtime_imports(node)


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of the packages it imports at run time."""
    modules = _module_names()

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps = set()
        for node in _runtime_imports(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                deps.update(filter(None, (resolve(alias.name) for alias in node.names)))
                continue
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            deps.update(filter(None, (resolve(f"{base}.{alias.name}") or resolve(base) for alias in node.names)))
        deps.discard(name)
        graph[name] = deps
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(circles)


def test_the_circle_finder_finds_circles_and_ignores_type_checking_imports():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert import_circles(graph) == [["a", "b", "c"]]
    tree = ast.parse(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import x\nelse:\n    import y\n"
        "def f():\n    import z\n"
    )
    assert [n.names[0].name for n in _runtime_imports(tree)][1:] == ["y", "z"]


# Circles known and accepted (none): a circle cut must leave this list, a new one fails the test below.
KNOWN_CIRCLES: list[list[str]] = []


def test_no_new_import_circle():
    """No module of the packages imports itself through others (the study runs `atlas eval` through
    commands.eval.run_task, not through `cli.main`, which imports the study's command)."""
    assert import_circles(import_graph()) == KNOWN_CIRCLES
