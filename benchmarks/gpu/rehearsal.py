"""Rehearse the scripted GPU call on a CPU: `session.sh` with SMOKE=1 and stub `nvidia-smi` / `compute-sanitizer`,
then `collect.py` on what it returned.

    python benchmarks/gpu/rehearsal.py [DIR]     # DIR (default: a temporary folder) keeps out/, res/, summary.md

SMOKE=1 makes every step run its tiny CPU version (Triton interpreter, tiny shapes); the panel trains two cheap
arms for 2 steps x 5 seeds on a 160-document corpus (prepared here in seconds) under a one-claim claims file. The
stub sanitizer takes the real tool's options, runs the program after them and prints the summary line the real one
ends with. tests/test_gpu_rehearsal.py runs the same and checks it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for _pkg in ("atlas-kernels", "atlas-model", "atlas-data", "atlas-experiments"):
    sys.path.insert(0, str(ROOT / "packages" / _pkg / "src"))

NVIDIA_SMI = """#!/usr/bin/env bash
echo "name, memory.total [MiB], driver_version, clocks.max.sm [MHz]"
echo "stub GPU, 0 MiB, 0, 0 MHz"
"""
COMPUTE_SANITIZER = """#!/usr/bin/env bash
if [ "${1:-}" = --help ]; then echo "  --kernel-name <filter>"; exit 0; fi
echo "$*" > "$(dirname "$0")/sanitizer-args"
while [ $# -gt 0 ] && [[ "$1" == --* ]]; do
  case "$1" in --tool|--error-exitcode|--kernel-name) shift 2 ;; *) shift ;; esac
done
"$@"; rc=$?
echo "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"
exit $rc
"""


def rehearsal_claims() -> dict:
    """One lm claim at the gpu scale on two cheap arms, 5 seeds (rule v2's minimum), 2 CPU steps each."""
    return {
        "schema": 2, "registered": "2026-12-01", "rule": {"alpha": 0.05, "ci_level": 0.90, "min_seeds": 3},
        "paper": {"version": "v1", "note": "x"},
        "rule_v2": {"registered": "2026-12-03", "alpha": 0.05, "ci_level": 0.90, "exact_max_n": 12,
                    "correction": "holm", "power": {"effect": 2.0, "target": 0.8, "min_seeds": 5}},
        "amendments": [], "tuning_history": [], "not_registered": [],
        "protocols": {"lm_tiny": {
            "task": "lm", "scale": "gpu", "size": "tiny", "registered": "2026-12-03", "seeds": [1, 2, 3, 4, 5],
            "model_overrides": {"hidden_size": 32, "intermediate_size": 64},
            "args": {"data": "embedded", "seq_len": 32, "global_batch_tokens": 64, "micro_batch": 2, "steps": 2,
                     "optim": {"lr": 1e-3}, "eval_batches": 1, "precision": "fp32", "device": "cpu"},
            "gate": {"kind": "unigram", "margin": 0.02}}},
        "arms": {"tpp": {"preset": "transformer_pp"}, "la": {"preset": "linear_attention"}},
        "claims": [{
            "id": "tpp.beats_la", "statement": "tpp beats la", "arms": ["tpp", "la"],
            "predicted": {"order": ["tpp", "la"]}, "paper": {"source": "Table 6", "value": "x"},
            "delta": {"value": 0.01, "unit": "nats"}, "metric": {"task": "lm", "name": "val_loss", "better": "lower"},
            "test": {"scale": "gpu", "testable": True, "protocol": "lm_tiny", "evidence": "direct", "priority": 1},
            "outcome_seen": "no: never run"}],
    }  # fmt: skip


def prepare(work: Path) -> dict[str, str]:
    """Stubs, claims file and corpus under `work`; returns the environment `session.sh` runs with."""
    import yaml

    from atlas_experiments.train import golden

    stubs = work / "bin"
    stubs.mkdir(parents=True, exist_ok=True)
    for name, text in (("nvidia-smi", NVIDIA_SMI), ("compute-sanitizer", COMPUTE_SANITIZER)):
        (stubs / name).write_text(text)
        (stubs / name).chmod(0o755)
    claims = work / "claims.yaml"
    claims.write_text(yaml.safe_dump(rehearsal_claims()))
    data = golden.prepare_data(work / "corpus")
    return {**os.environ, "PATH": f"{stubs}:{os.environ['PATH']}", "OUT": str(work / "out"), "RES": str(work / "res"),
            "PYTHON": sys.executable, "SMOKE": "1", "CLAIMS": str(claims), "DATA": str(data), "PLAN": "",
            "GROUPING": "per-arm", "WORKERS": "2", "OMP_NUM_THREADS": "1"}  # fmt: skip


def main() -> int:
    work = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="gpu-rehearsal-"))
    env = prepare(work)
    code = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu" / "session.sh")], cwd=ROOT, env=env).returncode
    from collect import summarize

    print(summarize(work / "out", Path(env["CLAIMS"])))
    print(f"rehearsal in {work}: session.sh exited with {code}")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
