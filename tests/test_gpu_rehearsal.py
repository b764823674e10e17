"""A rehearsal of the scripted GPU call on the CPU: `benchmarks/gpu/session.sh` end to end with SMOKE=1 (every
step's tiny CPU version, Triton interpreter) and stub `nvidia-smi` / `compute-sanitizer` on PATH
(benchmarks/gpu/rehearsal.py), then the CPU side (`benchmarks/gpu/collect.py`) on what the call leaves in OUT. It
checks what a real call relies on: the steps run once each in their order, their limits fit 9 minutes, every step
leaves its output in the returned archive, OUT holds only a few files, and the CPU side turns the archive into
kernels_gpu.md-style rows and study verdicts."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SESSION = ROOT / "benchmarks" / "gpu" / "session.sh"
sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))
sys.path.insert(0, str(ROOT / "benchmarks"))


def step_names() -> list[str]:
    out = subprocess.run(["bash", str(SESSION)], env={**os.environ, "PRINT_BUDGET": "1"}, capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    return [line.split("\t")[0] for line in out.splitlines() if not line.startswith("total")]


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    """The call run once on CPU (benchmarks/gpu/rehearsal.py's setup); returns (OUT, RES, stubs, claims file)."""
    pytest.importorskip("triton", reason="the steps' tiny versions run the kernels under Triton's interpreter")
    import rehearsal as setup

    work = tmp_path_factory.mktemp("rehearsal")
    env = setup.prepare(work)
    res = subprocess.run(["bash", str(SESSION)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=540)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return work / "out", work / "res", work / "bin", Path(env["CLAIMS"])


def test_the_limits_fit_nine_minutes_and_the_steps_come_in_order():
    out = subprocess.run(["bash", str(SESSION)], env={**os.environ, "PRINT_BUDGET": "1"}, capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    rows = [line.split("\t") for line in out.splitlines()]
    limits = {name: int(limit) for name, limit, *_ in rows[:-1]}
    assert rows[-1] == ["total", str(sum(limits.values()))] and sum(limits.values()) <= 540
    # the open faults first, the timing rows next, the panel last
    assert list(limits) == ["env", "mlp_sweep", "racecheck", "newton_schulz", "pytest_gpu", "timing", "compiled",
                            "atlas", "panel"]  # fmt: skip
    over = subprocess.run(["bash", str(SESSION)], env={**os.environ, "PRINT_BUDGET": "1", "LIMIT_panel": "100"},
                          capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert over.splitlines()[-1] == f"total\t{sum(limits.values()) - limits['panel'] + 100}"


def test_every_step_runs_once_in_order_and_leaves_its_output(rehearsal):
    out, res, stubs, _ = rehearsal
    with (res / "steps.tsv").open() as handle:
        steps = list(csv.DictReader(handle, delimiter="\t"))
    assert [s["step"] for s in steps] == step_names()
    assert all(s["rc"] == "0" for s in steps), steps
    assert sum(int(s["limit_s"]) for s in steps) <= 540
    assert all(float(s["wall_s"]) < int(s["limit_s"]) for s in steps)
    log = (out / "session.log").read_text()
    started = [line.split()[2] for line in log.splitlines() if line.startswith("== step") and "limit" in line]
    assert started == step_names()
    # the call returns a few files only; the archive holds every step's output
    assert sorted(p.name for p in out.iterdir()) == ["gpu-call.tar.gz", "session.log", "steps.tsv"]
    with tarfile.open(out / "gpu-call.tar.gz") as tar:
        names = {n.removeprefix("./") for n in tar.getnames()}
    for s in steps:
        assert s["output"] in names and (res / s["output"]).stat().st_size > 0, s
    assert not [n for n in names if "checkpoints" in n or n.endswith(".tmp")]
    # the timed rows' first calls ran in the background beside the correctness steps, into the shared caches: the
    # eager rows' Triton kernels (the torch rows compile nothing) beside the compiled rows
    assert "compile warm-up (eager compiled): started in the background" in log
    assert {"compile_warm.md", "compile_warm_eager.md"} <= names
    assert log.index("compile warm-up") < log.index("== step timing (")
    assert "(warm-up, not timed)" in (res / "compile_warm.md").read_text()
    eager = (res / "compile_warm_eager.md").read_text()
    assert "| triton | gated-delta c=1 | compiled in" in eager
    assert "| torch chunk op | omega c=4 | nothing to compile" in eager
    assert "inductor-cache" not in " ".join(names)
    # the sanitizer ran racecheck on the MLP forward, limited to that kernel
    args = (stubs / "sanitizer-args").read_text()
    assert "--tool racecheck" in args and "kns=_mlp_fwd_kernel" in args and "faults.py case race-" in args


def test_the_cpu_side_turns_the_returned_files_into_rows_and_verdicts(rehearsal, tmp_path):
    import shutil

    import collect
    import kernels_gpu_cases as cases

    out, _, _, claims = rehearsal
    returned = tmp_path / "returned"  # only what the call returns: the archive, steps.tsv, session.log
    shutil.copytree(out, returned)
    text = collect.summarize(returned, claims)
    assert text == (returned / "summary.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert "| mlp-d16-h16-w4 | 16 | 64 | 16 | 4 |" in text and "| newton-schulz k=5 | 2x16x24 | bf16 |" in text
    # the eager rows' warm-up, their timing, the compiled rows' warm-up (plain, then with CUDA graphs), their timing
    timing = [r for r in rows if r.startswith("| tiny | 70 | 1 |")]
    loop = "torch chunk op, per-chunk loop"
    eager = ["triton", "fla chunk_gated_delta_rule", "torch chunk op", loop, "triton", "torch chunk op", loop]
    eager += ["torch chunk op", loop]  # the Omega MLP memory, its chunks' terms batched and per chunk
    compiled = ["torch chunk op, compiled", "torch chunk op, compiled + CUDA graphs"]
    assert [r.split(" | ")[3] for r in timing] == [*eager, *eager, *compiled, *compiled]
    assert "(warm-up, not timed)" in timing[0] and all("nothing to compile" in timing[i] for i in (2, 3, 5, 6, 7, 8))
    assert all("% |" in timing[i] for i in (9, 11, 12, 14, 15, 16, 17))
    assert "(warm-up, not timed)" in timing[18] and "% |" in timing[20] and "% |" in timing[21]
    assert "skipped: flash-linear-attention" in timing[10] or "ms" not in timing[10]
    # after the timed rows, one profiled step per timed row: kernels launched, busy time, the busiest kernel
    profiled = [r.split(" | ") for r in rows if r.startswith(("| tiny | triton |", "| tiny | torch chunk op"))]
    pairs = [(impl, "gated-delta c=1") for impl in ("triton", "torch chunk op", loop)]
    pairs += [(impl, "omega c=4") for impl in ("triton", "torch chunk op", loop)]
    pairs += [(impl, "mlp omega gd c=4") for impl in ("torch chunk op", loop)]
    pairs += [(impl, "gated-delta c=1") for impl in compiled]
    assert [(r[1], r[2]) for r in profiled] == pairs
    assert all(int(r[4].replace(",", "")) > 0 and r[7].startswith("`") for r in profiled)
    atlas = [r for r in rows if r.startswith("| tiny | 21 | 1 |")]
    assert [r.split(" | ")[3] for r in atlas] == list(cases.ATLAS_CONFIGS)[:2]
    assert atlas[0].endswith("| 1.0x |") and not [r for r in atlas if "ERROR" in r or "skipped" in r]
    assert "RACECHECK SUMMARY: 0 hazards" in text and "skipped" in text.split("pytest -m gpu")[1].split("##")[0]
    assert "| panel | 200 |" in text and "Limits sum to 540 s." in text
    verdicts = [r for r in rows if r.startswith("| tpp.beats_la |")]
    assert len(verdicts) == 1 and (returned / "study-report" / "verdicts.md").is_file()
    from atlas_experiments import tracking

    uri = f"sqlite:///{(returned / 'study-report' / 'mlflow.db').resolve()}"
    assert len(tracking.load_runs(uri, ["study"])) == 10 and f"MLflow runs (experiment `study`): `{uri}`." in text
    seeds = sorted((returned / "call" / "panel" / "study" / "lm_tiny").glob("*/seed*.json"))
    assert len(seeds) == 10  # both arms, every seed, each result written by its arm's process
