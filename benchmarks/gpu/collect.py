"""The CPU side of the scripted GPU call: what came back, turned into one report and the study's verdicts.

    python benchmarks/gpu/collect.py RETURNED [--claims config/study/claims.yaml] [--out RETURNED/summary.md]

RETURNED holds what `session.sh` left in its $OUT: `gpu-call.tar.gz` (every step's output, refreshed after each
step), `steps.tsv` and `session.log`; a folder where the archive was already unpacked works too. Writes
RETURNED/summary.md: the steps with their limits, wall times and exit codes; the tables of every step in
`benchmarks/kernels_gpu.md`'s format (MLP sweep, Newton-Schulz, timing rows, compiled rows, Atlas rows); the pytest
summary; the racecheck summary; and the panel's verdicts, judged here by `atlas study report --scale gpu` on the
returned results (RETURNED/study-report/verdicts.md), since the GPU machine's call ends with the panel, with the
panel's results registered as MLflow runs (`atlas study track`, RETURNED/study-report/mlflow.db).
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARCHIVE = "gpu-call.tar.gz"
TABLES = (
    "mlp_sweep.md",
    "newton_schulz.md",
    "compile_warm_eager.md",
    "timing.md",
    "compile_warm.md",
    "compiled.md",
    "atlas.md",
)


def unpack(returned: Path) -> Path:
    """The folder holding the step outputs: the archive unpacked into RETURNED/call, or RETURNED itself."""
    archive = returned / ARCHIVE
    if not archive.is_file():
        return returned
    dest = returned / "call"
    dest.mkdir(exist_ok=True)
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")  # the data filter refuses links and paths outside dest
    return dest


def read_steps(res: Path) -> list[dict]:
    path = res / "steps.tsv"
    if not path.is_file():
        return []
    with path.open() as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def _status(rc: str) -> str:
    return {"0": "ok", "124": "timed out", "137": "killed (timeout)", "": "not run"}.get(rc, f"exit {rc}")


def table_lines(text: str) -> list[str]:
    """The tables of a step's markdown, each under its heading (drops the device / command preamble and headings
    without a table)."""
    out: list[str] = []
    heading = None
    for ln in text.splitlines():
        if ln.startswith("## "):
            heading = ln
        elif ln.startswith("|"):
            if heading is not None:
                out += ["", heading, ""] if out else [heading, ""]
                heading = None
            out.append(ln)
    return out


def pytest_summary(log: str) -> list[str]:
    lines = [ln for ln in log.splitlines() if ln.startswith(("FAILED", "ERROR"))]
    tail = [ln for ln in log.splitlines() if re.search(r"\d+ (passed|failed|skipped|deselected|error)", ln)]
    return lines + tail[-1:]


def study_verdicts(res: Path, claims: Path, out: Path) -> list[str]:
    """`atlas study report --scale gpu` on the returned study root; the verdicts as table rows."""
    root = res / "panel" / "study"
    if not root.is_dir():
        return ["No study results came back (the panel did not run)."]
    for pkg in ("atlas-kernels", "atlas-model", "atlas-data", "atlas-experiments"):
        sys.path.insert(0, str(ROOT / "packages" / pkg / "src"))
    from atlas_experiments.cli import main as atlas

    code = atlas(["study", "report", "--claims", str(claims), "--scale", "gpu", "--root", str(root), "--out", str(out)])
    path = out / "verdicts.json"
    if code or not path.is_file():
        return [f"`atlas study report` exited with {code}; no verdicts."]
    data = json.loads(path.read_text())
    records = data.get("rule_v2") or data.get("rule_v1") or []
    lines = ["| claim | verdict (rule v2) | why |", "|---|---|---|"]
    for r in records:
        why = str(r.get("why") or r.get("reason") or "").replace("|", "/")[:160]
        lines.append(f"| {r['claim']} | {r.get('label', r.get('verdict'))} | {why} |")
    lines += ["", f"Full report: `{out / 'verdicts.md'}`."]
    # the panel ran untracked: its results become MLflow runs here, beside the report
    uri = f"sqlite:///{(out / 'mlflow.db').resolve()}"
    track = ["study", "track", "--claims", str(claims), "--scale", "gpu", "--root", str(root), "--tracking-uri", uri]
    code = atlas([*track, "--no-progress"])
    ended = f" (`atlas study track` exited with {code})" if code else "."
    lines.append(f"MLflow runs (experiment `study`): `{uri}`{ended}")
    return lines


def summarize(returned: Path, claims: Path, out: Path | None = None) -> str:
    res = unpack(returned)
    steps = read_steps(res) or read_steps(returned)
    lines = [
        "# Scripted GPU call: results",
        "",
        "## Steps",
        "",
        "| step | limit s | wall s | status |",
        "|---|---|---|---|",
    ]
    for s in steps:
        lines.append(f"| {s['step']} | {s['limit_s']} | {s['wall_s']} | {_status(s['rc'])} |")
    if steps:
        lines.append(f"\nLimits sum to {sum(int(s['limit_s']) for s in steps)} s.")
    env = res / "env.txt"
    lines += ["", "## Environment", "", "```", env.read_text().strip() if env.is_file() else "(missing)", "```"]
    for name in TABLES:
        path = res / name
        lines += ["", *(table_lines(path.read_text()) if path.is_file() else [f"## {name}: missing"])]
    log = res / "pytest_gpu.log"
    lines += ["", "## pytest -m gpu (the rest)", ""]
    lines += pytest_summary(log.read_text()) if log.is_file() else ["(missing)"]
    race = res / "racecheck.txt"
    lines += ["", "## compute-sanitizer racecheck (MLP forward, D = 64)", ""]
    if race.is_file():
        text = race.read_text()
        found = [ln for ln in text.splitlines() if "SUMMARY" in ln or ln.startswith("skipped")]
        lines += found or text.strip().splitlines()[-3:]
    else:
        lines.append("(missing)")
    lines += ["", "## Study panel", ""]
    lines += study_verdicts(res, claims, returned / "study-report")
    text = "\n".join(lines) + "\n"
    out = out or returned / "summary.md"
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(out)
    return text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("returned", type=Path)
    ap.add_argument("--claims", type=Path, default=ROOT / "config" / "study" / "claims.yaml")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    print(summarize(args.returned, args.claims, args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
