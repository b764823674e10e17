"""The prepared GPU call's parts, checked on CPU without running its steps: the scripts parse, STEPS selects steps,
the panel's runner groups seeds by arm (`atlas study run --pending --per-arm` / `--arm`), the projection keeps the
registered priority rule, and the Atlas rows' budget logic. The whole call end to end: test_gpu_rehearsal.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
GPU = ROOT / "benchmarks" / "gpu"
SESSION = GPU / "session.sh"
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(GPU))


@pytest.mark.parametrize("script", ["session.sh", "study_panel.sh", "wheels.sh"])
def test_the_scripts_parse(script):
    subprocess.run(["bash", "-n", str(GPU / script)], check=True)


def _stub_python(tmp_path: Path) -> Path:
    """A `python` that only records its arguments, and an `nvidia-smi`: the steps become lines of a log."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    (bin_dir / "python").write_text(f'#!/usr/bin/env bash\necho "python $*" >> {log}\n')
    (bin_dir / "nvidia-smi").write_text("#!/usr/bin/env bash\necho stub-gpu\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    return bin_dir


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        ("atlas", ["faults.py env", "atlas_rows.py --quick"]),
        ("mlp_sweep newton_schulz", ["faults.py env", "faults.py mlp", "faults.py ns"]),
        ("timing compiled", ["faults.py env", "timing_rows.py --rows eager", "timing_rows.py --rows compiled"]),
        ("newton_schulz compiled", ["faults.py env", "faults.py ns", "timing_rows.py --rows compiled --budget"]),
    ],
)
def test_steps_selects_the_session_steps(tmp_path, steps, expected):
    bin_dir = _stub_python(tmp_path)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "OUT": str(tmp_path / "out"),
           "RES": str(tmp_path / "res"), "PYTHON": str(bin_dir / "python"), "STEPS": steps}  # fmt: skip
    subprocess.run(["bash", str(SESSION)], cwd=tmp_path, env=env, check=True, capture_output=True, timeout=60)
    lines = (tmp_path / "calls.log").read_text().splitlines()
    calls = [c for c in lines if "--warm" not in c]  # the compile warm-up runs beside the steps, in any order
    assert len(calls) == len(expected)
    for call, marker in zip(calls, expected, strict=True):
        assert marker in call, (call, marker)
    ran = [line.split("\t")[0] for line in (tmp_path / "res" / "steps.tsv").read_text().splitlines()[1:]]
    assert ran == ["env", *[s for s in ("mlp_sweep", "newton_schulz", "timing", "compiled", "atlas") if s in steps]]
    # the warm-up starts only with a timed step to warm (timing, compiled) and a correctness step to run beside (ns:
    # 20 s), and is over before the compiled step starts
    log = (tmp_path / "out" / "session.log").read_text()
    warmed = "compile warm-up (compiled): started in the background for at most 20 s" in log
    assert warmed == (steps == "newton_schulz compiled")
    if warmed:
        assert log.index("compile warm-up") < log.index("== step compiled") and "before step compiled" in log
        assert "compile_warm" not in " ".join(calls)
        warm_calls = [c for c in lines if "--warm" in c]
        assert len(warm_calls) == 1 and "--rows compiled --warm --budget 20" in warm_calls[0]
    # a step whose command wrote nothing still leaves its file, saying why
    assert "no output: step" in (tmp_path / "res" / "env.txt").read_text()


# ---- the panel's runner: seeds of an arm in one process -------------------------------------------------------


def _claims(tmp_path: Path) -> Path:
    from rehearsal import rehearsal_claims

    path = tmp_path / "claims.yaml"
    path.write_text(yaml.safe_dump(rehearsal_claims()))
    return path


def test_an_arm_runs_its_pending_seeds_in_sequence_and_a_failed_seed_does_not_stop_the_next(
    tmp_path, monkeypatch, capsys
):
    from atlas_experiments.cli import main
    from atlas_experiments.study import execute
    from atlas_experiments.study.claims import load_claims
    from atlas_experiments.study.plan import plan_jobs
    from atlas_experiments.study.results import finalize, partial_path

    ran = []

    def fake_run_job(job, root, *, overrides=None, data_dir=None):
        ran.append(job.seed)
        if job.seed == 2:
            raise RuntimeError("a seed that fails")
        partial = partial_path(job, root)
        partial.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(json.dumps({"metrics": {f"val_loss/{job.arm.name}": 5.0}}))
        return finalize(job, root, 0.0)

    monkeypatch.setattr(execute, "run_job", fake_run_job)
    claims, root = _claims(tmp_path), tmp_path / "study"
    args = ["study", "run", "--claims", str(claims), "--scale", "gpu", "--root", str(root), "--no-track"]
    assert main([*args, "--arm", "lm_tiny/tpp"]) == 1  # seed 2 failed
    assert ran == [1, 2, 3, 4, 5]
    assert sorted(p.name for p in (root / "lm_tiny" / "tpp").glob("*.json")) == [f"seed{s}.json" for s in (1, 3, 4, 5)]
    ran.clear()
    assert main([*args, "--arm", "lm_tiny/tpp"]) == 1 and ran == [2]  # only the missing seed runs again
    # a seed another process finishes while the arm runs is not run again
    for seed in (1, 3, 4, 5):
        (root / "lm_tiny" / "tpp" / f"seed{seed}.json").unlink()

    def other_worker_finishes_seed_4(job, root, **kwargs):
        if job.seed == 3:
            four = next(j for j in plan_jobs(load_claims(claims), ["gpu"]) if j.name == "lm_tiny/tpp/seed4")
            fake_run_job(four, root)
        return fake_run_job(job, root, **kwargs)

    monkeypatch.setattr(execute, "run_job", other_worker_finishes_seed_4)
    ran.clear()
    assert main([*args, "--arm", "lm_tiny/tpp"]) == 1 and ran == [1, 2, 4, 3, 5]  # seed 2 still fails
    assert "study job lm_tiny/tpp/seed4: finished by another process meanwhile, skipped" in capsys.readouterr().out
    assert main([*args, "--arm", "lm_tiny/nope"]) == 2
    assert "not a (protocol, arm) of the plan (known: lm_tiny/la, lm_tiny/tpp)" in capsys.readouterr().err
    assert main([*args, "--job", "lm_tiny/tpp/seed1", "--per-arm"]) == 2
    assert "--per-arm: only with --pending" in capsys.readouterr().err


def test_pending_per_arm_starts_one_process_per_arm_and_the_plan_drops_jobs_in_the_parent(tmp_path, monkeypatch):
    from atlas_experiments.cli import main
    from atlas_experiments.study import pending

    started = []

    def fake_subprocess_run(argv, stdout, **kw):
        started.append(argv[argv.index("--arm") + 1] if "--arm" in argv else argv[argv.index("--job") + 1])
        return subprocess.CompletedProcess(argv, 0)

    monkeypatch.setattr(pending.subprocess, "run", fake_subprocess_run)
    claims, root = _claims(tmp_path), tmp_path / "study"
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"accepted_jobs": [f"lm_tiny/tpp/seed{s}" for s in range(1, 6)]}))
    args = ["study", "run", "--claims", str(claims), "--scale", "gpu", "--root", str(root), "--no-track", "--pending"]
    assert main([*args, "--per-arm", "--workers", "2", "--plan", str(plan)]) == 1  # tpp's seeds: none written
    assert started == ["lm_tiny/tpp"]  # la was dropped by the plan: recorded here, no process for it
    assert all("skipped" in json.loads((root / "lm_tiny" / "la" / f"seed{s}.json").read_text()) for s in range(1, 6))
    assert (root / "logs" / "lm_tiny" / "tpp.log").is_file()
    started.clear()
    assert main([*args, "--workers", "2", "--plan", str(plan)]) == 0  # one process per job, as before
    assert sorted(started) == [f"lm_tiny/tpp/seed{s}" for s in range(1, 6)]


# ---- the panel's projection ---------------------------------------------------------------------------------


def _row(arm: str, host_s: float, kernels: int = 1000, gflop: float = 1.0) -> dict:
    return {"protocol": "lm_tiny", "arm": arm, "seeds": 5, "steps": 100, "micro_batch": 4, "host_s": host_s,
            "kernels": kernels, "gflop_seq": gflop}  # fmt: skip


def test_the_projection_takes_the_cores_or_the_gpu_whichever_binds():
    import panel_timing as pt

    rows = [_row("tpp", 0.1), _row("la", 0.2)]
    arm = pt.project([dict(r) for r in rows], grouping="per-arm", launch_us=0, kernel_us=0, gpu_tflops=1e9)
    # host-bound: the slower arm, its 5 seeds in sequence
    assert arm["wall_s"] == pytest.approx(pt.START_S + 5 * (100 * 0.2 + pt.SEED_S))
    job = pt.project([dict(r) for r in rows], grouping="per-job", launch_us=0, kernel_us=0, gpu_tflops=1e9, cores=16)
    assert job["wall_s"] == pytest.approx(pt.START_S + 100 * 0.2 + pt.SEED_S)  # every seed side by side
    gpu = pt.project([dict(r) for r in rows], grouping="per-job", host_speed=0, launch_us=0, kernel_us=100)
    assert gpu["wall_s"] == pytest.approx(pt.START_S + 2 * 5 * 100 * (1000 * 100e-6 + 4 / pt.GPU_TFLOPS / 1e3))


def test_the_fit_drops_whole_claims_by_priority_like_the_pilot(tmp_path):
    import panel_timing as pt
    from rehearsal import rehearsal_claims

    data = rehearsal_claims()
    cheap = {**data["claims"][0], "id": "cheap", "arms": ["tpp", "tpp2"], "predicted": {"order": ["tpp", "tpp2"]}}
    cheap["test"] = {**cheap["test"], "priority": 2}
    data["arms"]["tpp2"] = {"preset": "transformer_pp", "overrides": {"num_hidden_layers": 1}}
    data["claims"].append(cheap)
    claims = tmp_path / "claims.yaml"
    claims.write_text(yaml.safe_dump(data))
    rows = [_row("tpp", 0.01), _row("tpp2", 0.01), _row("la", 1.0)]
    kw = {"launch_us": 0, "kernel_us": 0, "gpu_tflops": 1e9}
    everything = pt.fit_plan([dict(r) for r in rows], claims, 1e6, **kw)
    assert everything["dropped_claims"] == [] and len(everything["accepted_jobs"]) == 15
    # la's 500 s do not fit 200 s: the last claim by priority goes first, although the priority-1 claim is the
    # one that needs la; then the priority-1 claim itself
    fit = pt.fit_plan([dict(r) for r in rows], claims, 200, **kw)
    assert fit["dropped_claims"] == ["cheap", "tpp.beats_la"] and fit["accepted_jobs"] == []
    fit = pt.fit_plan([dict(r) for r in rows], claims, 200, grouping="per-job", **kw)
    assert fit["dropped_claims"] == [] and fit["grouping"] == "per-job"  # 5 seeds of la side by side: 118 s


def test_the_committed_plan_names_jobs_of_the_registered_panel():
    from atlas_experiments.study.claims import load_claims
    from atlas_experiments.study.plan import plan_jobs

    plan = json.loads((GPU / "panel_plan.json").read_text())
    jobs = {j.name for j in plan_jobs(load_claims(ROOT / "config" / "study" / "claims.yaml"), ["gpu"])}
    assert plan["accepted_jobs"] and set(plan["accepted_jobs"]) <= jobs
    assert plan["grouping"] in ("per-arm", "per-job") and plan["projected_wall_s"] <= plan["budget_minutes"] * 60


# ---- the Atlas rows' budget ---------------------------------------------------------------------------------


class _NoRoomAfterTheFirstCall:
    """A budget with room for each row's first call and none for its timed repeats."""

    def ok(self, need: float = 0.0) -> bool:
        import kernels_gpu

        return need == kernels_gpu.ATLAS_ROW_RESERVE_S


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


def test_a_step_profile_counts_top_level_calls_on_a_cpu():
    import torch
    from step_profile import profile_step

    a, b = torch.randn(64, 64), torch.randn(64, 64)

    def step():
        torch.relu(torch.mm(a, b))  # two top-level calls; their inner calls are not counted again

    prof = profile_step(step)
    assert prof.kernels == 2 and prof.top_name in ("aten::mm", "aten::relu")
    assert 0 < prof.top_ms <= prof.busy_ms


def test_a_step_profile_on_a_gpu_counts_device_events_only_and_names_the_busiest():
    from types import SimpleNamespace

    from step_profile import StepProfile, summarize
    from torch.autograd import DeviceType

    def event(name, us, device, annotation=False):
        return SimpleNamespace(name=name, device_type=device, cpu_parent=None, is_user_annotation=annotation,
                               time_range=SimpleNamespace(elapsed_us=lambda: us))  # fmt: skip

    events = [event("aten::mm", 900.0, DeviceType.CPU), event("_linear_bwd_kernel", 300.0, DeviceType.CUDA),
              event("memory op", 1000.0, DeviceType.CUDA, annotation=True),
              event("void at::native::vectorized_elementwise_kernel<4, Add>(int)", 50.0, DeviceType.CUDA),
              event("void at::native::vectorized_elementwise_kernel<4, Add>(int)", 50.0, DeviceType.CUDA)]  # fmt: skip
    prof = summarize(events, on_cuda=True)
    assert prof == StepProfile(kernels=3, busy_ms=0.4, top_name="_linear_bwd_kernel", top_ms=0.3)
    assert prof.cells(step_ms=1.6) == ["3", "0.40", "25%", "`_linear_bwd_kernel` (75%)"]
    assert summarize(events[:1], on_cuda=True).cells(1.0)[0].startswith("none recorded")  # not "0% busy"
