"""The prepared GPU calls, checked on CPU: the session script runs each step once and in order, and the Atlas rows
of `benchmarks/kernels_gpu.py` run end to end at a tiny shape (`--smoke`: CPU, Triton interpreter)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SESSION = ROOT / "benchmarks" / "gpu" / "session.sh"
sys.path.insert(0, str(ROOT / "benchmarks"))


def test_the_session_script_parses_and_runs_each_step_once_in_order():
    subprocess.run(["bash", "-n", str(SESSION)], check=True)
    steps = [int(n) for n in re.findall(r'echo "== step (\d+)', SESSION.read_text())]
    assert steps == [2, 3, 4, 5]


def _stub_python(tmp_path: Path) -> Path:
    """A `python3` and an `nvidia-smi` on PATH that only record or echo: the script's steps become lines of a log."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    (bin_dir / "python3").write_text(f'#!/usr/bin/env bash\necho "python3 $*" >> {log}\n')
    (bin_dir / "nvidia-smi").write_text("#!/usr/bin/env bash\necho stub-gpu\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    return bin_dir


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        ("5", ["--only atlas"]),
        ("2 5", ["pytest", "--only atlas"]),
        (None, ["pytest", "--quick", "--only mlp", "--only atlas"]),
    ],
)
def test_steps_selects_the_session_steps(tmp_path, steps, expected):
    env = {**os.environ, "PATH": f"{_stub_python(tmp_path)}:{os.environ['PATH']}", "OUT": str(tmp_path / "out")}
    if steps is not None:
        env["STEPS"] = steps
    subprocess.run(["bash", str(SESSION)], cwd=tmp_path, env=env, check=True, capture_output=True, timeout=60)
    calls = (tmp_path / "calls.log").read_text().splitlines()
    work = [c for c in calls if "import " not in c]  # the environment step's version probes
    assert len(work) == len(expected)
    for call, marker in zip(work, expected, strict=True):
        assert marker in call, (call, marker)


def test_the_atlas_rows_run_at_a_tiny_shape(tmp_path):
    pytest.importorskip("triton", reason="triton installs on Linux only; kernels_gpu.py imports it")
    out = tmp_path / "atlas.md"
    res = subprocess.run(
        [sys.executable, "benchmarks/kernels_gpu.py", "--smoke", "--only", "atlas", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    rows = [line for line in out.read_text().splitlines() if line.startswith("| tiny |")]
    import kernels_gpu_cases as cases

    assert [row.split(" | ")[3] for row in rows] == list(cases.ATLAS_CONFIGS)
    assert not [row for row in rows if "ERROR" in row or "skipped" in row]
    assert rows[0].endswith("| - | 1.0x |")  # the GD twin, its own reference
    ratios = [float(row.split(" | ")[-1].rstrip(" |x")) for row in rows]
    assert all(r > 0 for r in ratios)


class _NoRoomAfterTheFirstCall:
    """A budget with room for each row's first call and none for its timed repeats."""

    def ok(self, need: float = 0.0) -> bool:
        return need <= 30


def test_a_short_budget_reports_the_first_call_and_saves_every_row(monkeypatch):
    import kernels_gpu
    import kernels_gpu_cases as cases

    monkeypatch.setattr(cases, "DEVICE", "cpu")
    monkeypatch.setattr(cases, "MODELS", {"tiny": (32, 2, 8)})
    monkeypatch.setattr(cases, "ATLAS_SHAPES", {"tiny": (1, 21)})
    saved = []
    budget = _NoRoomAfterTheFirstCall()
    lines = kernels_gpu.atlas_timing(budget, quick=False, save=lambda rows: saved.append(list(rows)))
    rows = [line for line in lines if line.startswith("| tiny |")]
    assert len(rows) == len(cases.ATLAS_CONFIGS) == len(saved)
    assert all("(first call only)" in row and row.split(" | ")[4] == "-" for row in rows)
    assert [len(s) for s in saved] == sorted(len(s) for s in saved) and saved[-1] == lines
