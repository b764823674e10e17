"""`make mutants` must not go stale: every test id of every module's selection still exists, and every scope marker
is still in its module. A renamed test otherwise shows up only when mutmut's unmutated baseline fails, at the start
of a run that takes an hour."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run_module():
    spec = importlib.util.spec_from_file_location("mutants_run", ROOT / "scripts" / "mutants" / "run.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


RUN = _run_module()


@pytest.mark.parametrize("name", sorted(RUN.MODULES))
def test_scope_markers_are_in_the_module(name):
    module = RUN.MODULES[name]
    source = (ROOT / module.path).read_text()
    lines = RUN.scope_lines(source, module.scope)  # raises SystemExit naming a missing marker
    assert lines is None or lines, f"{name}: the scope selects no line of {module.path}"


def test_every_selected_test_is_collected():
    ids = sorted({t for module in RUN.MODULES.values() for t in module.tests})
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-m", "", *ids],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    missing = [line for line in proc.stdout.splitlines() + proc.stderr.splitlines() if "not found" in line]
    assert proc.returncode == 0 and not missing, "\n".join(missing) or proc.stdout[-2000:] + proc.stderr[-2000:]
