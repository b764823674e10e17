"""`make mutants`: mutation testing (mutmut 2) of the modules whose bugs would silently change a result.

Each module is mutated with its own test selection (the tests that exercise it, never the whole suite), one module
at a time, in a copy of the working tree under `mutants/`: mutmut rewrites the file it mutates, and the checkout
must stay importable for everyone else while it does. The copy's `src` directories go first on PYTHONPATH, ahead
of the editable installs, so the tests import the mutated file.

    python scripts/mutants/run.py                    # every module, in the order of MODULES
    python scripts/mutants/run.py optim decision     # some of them
    python scripts/mutants/run.py --survivors optim  # retest only the survivors (after adding tests)
    python scripts/mutants/run.py --minutes 20 chunk # stop after 20 min; a rerun continues with the untested
    python scripts/mutants/run.py --report           # counts and survivors from the last runs, no test run
    python scripts/mutants/run.py --list             # modules and their tests

Results accumulate in `mutants/caches/<module>.sqlite` (mutmut's cache): a rerun tests only mutants that are new,
or all of a module's mutants again when a file of its tests directory changed. `mutants/report.md` gets the counts,
timings and every survivor's diff; the triage of survivors is docs/testing.md.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import difflib
import json
import os
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORK = ROOT / "mutants"
KEEP = {"caches", "report.md", "timings.json"}  # survive the re-copy of the working tree
PACKAGES = ("atlas_kernels", "atlas_model", "atlas_data", "atlas_experiments")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mutation_targets import MODULES, Module  # noqa: E402  (this folder is not a package)

_LOGGERS = {"log", "logger", "logging", "warnings"}


def message_lines(source: str) -> set[int]:
    """Lines holding only the text of an exception or a log record: a mutant there changes a message, no result."""
    lines: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        parts: list[ast.AST] = []
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
            parts = [*node.exc.args, *(k.value for k in node.exc.keywords)]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in _LOGGERS
        ):
            parts = [node]
        for part in parts:
            lines.update(range(part.lineno, part.end_lineno + 1))
    return lines


def scope_lines(source: str, scope: tuple[tuple[str, str], ...]) -> set[int] | None:
    """1-based lines inside the module's scope ranges (None: the whole file)."""
    if not scope:
        return None
    text = source.splitlines()
    keep: set[int] = set()
    for first, last in scope:
        start = next((i for i, line in enumerate(text, 1) if first in line), None)
        if start is None:
            raise SystemExit(f"scope marker {first!r} not found; update MODULES in mutation_targets.py")
        end = next((i for i, line in enumerate(text[start - 1 :], start) if last in line), None)
        if end is None:
            raise SystemExit(f"scope marker {last!r} not found after {first!r}")
        keep.update(range(start, end + 1))
    return keep


def skipped_lines(module: Module) -> list[int]:
    source = (WORK / module.path).read_text()
    skip = message_lines(source)
    inside = scope_lines(source, module.scope)
    if inside is not None:
        skip |= set(range(1, len(source.splitlines()) + 1)) - inside
    return sorted(skip)


def sync_copy() -> None:
    """Refresh `mutants/` from the working tree (tracked and untracked, not ignored files), keeping results."""
    WORK.mkdir(exist_ok=True)
    for child in WORK.iterdir():
        if child.name in KEEP:
            continue
        shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, check=True, capture_output=True,
    ).stdout.decode().split("\0")  # fmt: skip
    for rel in filter(None, listed):
        src = ROOT / rel
        if rel.startswith("mutants/") or not src.is_file():
            continue
        dst = WORK / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)
    shutil.copy2(Path(__file__).with_name("mutmut_config.py"), WORK / "mutmut_config.py")


def environment(skip: dict[str, list[int]]) -> dict[str, str]:
    src = [str(p) for p in sorted((WORK / "packages").glob("*/src"))]
    env = dict(os.environ)
    env.update(
        PYTHONPATH=os.pathsep.join(src + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])),
        PYTHONDONTWRITEBYTECODE="1",  # a same-size mutant written within a second must not reuse a stale .pyc
        ATLAS_MUTANTS_SKIP=json.dumps(skip),
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        CI="",  # mutmut's --CI semantics are not wanted; golden refuses updates anyway
    )
    return env


def check_imports(env: dict[str, str]) -> None:
    """The tests must import the copy, or every mutant would survive for the wrong reason."""
    code = f"import importlib; print(' '.join(importlib.import_module(m).__file__ for m in {PACKAGES!r}))"
    out = subprocess.run([sys.executable, "-c", code], cwd=WORK, env=env, check=True, capture_output=True, text=True)
    stray = [f for f in out.stdout.split() if not Path(f).resolve().is_relative_to(WORK.resolve())]
    if stray:
        raise SystemExit(f"imports do not come from {WORK}: {stray}")


def runner(module: Module) -> str:
    args = ["scripts/mutants/pytest_status.py", "-x", "-q", "-p", "no:cacheprovider", *module.pytest_args]
    return shlex.join([sys.executable, *args, *module.tests])


@contextlib.contextmanager
def module_cache(name: str):
    """mutmut keeps one `.mutmut-cache` per directory, and with it one baseline test time, which sets the timeout
    of every mutant: each module gets its own cache, moved into place while it is used."""
    stored, active = WORK / "caches" / f"{name}.sqlite", WORK / ".mutmut-cache"
    stored.parent.mkdir(parents=True, exist_ok=True)
    active.unlink(missing_ok=True)
    if stored.is_file():
        shutil.copy2(stored, active)
    try:
        yield active
    finally:
        if active.is_file():
            shutil.move(active, stored)


def _run_with_budget(cmd: list[str], env: dict[str, str], minutes: float | None) -> int:
    """Run mutmut; past the budget, interrupt it (mutmut restores the file it mutated and keeps the results so far:
    the rest stay untested, and the next run continues with them)."""
    proc = subprocess.Popen(cmd, cwd=WORK, env=env, start_new_session=True)
    try:
        return proc.wait(timeout=None if minutes is None else minutes * 60)
    except subprocess.TimeoutExpired:
        print(f"\n    budget of {minutes:g} min spent: stopping, the remaining mutants stay untested", flush=True)
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        return 0


def run_module(name: str, module: Module, survivors_only: bool = False, minutes: float | None = None) -> float:
    skip = {module.path: skipped_lines(module)}
    env = environment(skip)
    check_imports(env)
    options = ["--paths-to-mutate", module.path, "--tests-dir", module.tests_dir, "--runner", runner(module)]
    mutmut = [str(Path(sys.executable).with_name("mutmut")), "run", *options, "--simple-output"]
    print(f"\n=== {name}: {module.path}\n    tests: {' '.join(module.tests)}", flush=True)
    start = time.monotonic()
    with module_cache(name) as cache:
        if not survivors_only:
            rc = _run_with_budget(mutmut, env, minutes)
        else:
            # Tests were only added since the last full run, so a killed mutant stays killed, and a timed-out one
            # (an endless loop) stays detected: retest the survivors. mutmut skips a mutant already tested against
            # the same test files, which a changed selection alone does not change: mark each untested first.
            ids = [m[0] for m in mutants_of(module.path, cache) if m[1] == "bad_survived"]
            print(f"    retesting {len(ids)} survivors", flush=True)
            rc = 0
            for mid in ids:
                with sqlite3.connect(cache) as db:
                    db.execute("UPDATE Mutant SET status = 'untested' WHERE id = ?", (mid,))
                rc |= subprocess.run([*mutmut, str(mid)], cwd=WORK, env=env, stdout=subprocess.DEVNULL).returncode
    elapsed = time.monotonic() - start
    if rc & 1:
        raise SystemExit(f"mutmut failed on {name} (exit {rc}): the unmutated tests must pass first")
    return elapsed


STATUSES = ("ok_killed", "bad_survived", "bad_timeout", "ok_suspicious", "skipped", "untested")


def mutants_of(path: str, cache: Path) -> list[tuple[int, str, int, int, str]]:
    """(id, status, 0-based line, index on the line, line text) of every mutant of `path` in `cache`."""
    if not cache.is_file():
        return []
    with sqlite3.connect(f"file:{cache}?mode=ro", uri=True) as db:
        return db.execute(
            'SELECT m.id, m.status, l.line_number, m."index", l.line FROM Mutant m JOIN Line l ON m.line = l.id '
            'JOIN SourceFile s ON l.sourcefile = s.id WHERE s.filename = ? ORDER BY l.line_number, m."index"',
            (path,),
        ).fetchall()


def survivors(name: str, path: str, rows) -> list[str]:
    """The diff of every surviving or timed-out mutant, regenerated from the checkout's source (the copy's file may
    hold a mutant right now)."""
    from mutmut import Context, RelativeMutationID, mutate

    source = (ROOT / path).read_text()
    out = []
    for mid, status, line_number, index, line in rows:
        if status not in ("bad_survived", "bad_timeout"):
            continue
        mutant_id = RelativeMutationID(line=line, index=index, line_number=line_number, filename=path)
        mutated, _ = mutate(Context(source=source, mutation_id=mutant_id, filename=path))
        diff = "".join(difflib.unified_diff(source.splitlines(True), mutated.splitlines(True), n=1))
        diff = diff.split("\n", 2)[2] if diff else f"(line {line!r} has changed since the run)"
        out.append(f"### {name} #{mid} ({status}), line {line_number + 1}\n\n```diff\n{diff.rstrip()}\n```\n")
    return out


def report() -> str:
    timings = json.loads((WORK / "timings.json").read_text()) if (WORK / "timings.json").is_file() else {}
    out = [
        "# Mutation testing report (`make mutants`)",
        "",
        "| module | mutants | killed | survived | timeout | suspicious | skipped (out of scope) | untested | took |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    details = []
    for name, module in MODULES.items():
        rows = mutants_of(module.path, WORK / "caches" / f"{name}.sqlite")
        if not rows:
            continue
        details += survivors(name, module.path, rows)
        counts = {s: sum(r[1] == s for r in rows) for s in STATUSES}
        took = [f"{timings[k] / 60:.1f} min{k[len(name) :]}" for k in (name, name + " (survivors)") if k in timings]
        out.append(
            f"| {name} | {len(rows)} | " + " | ".join(str(counts[s]) for s in STATUSES)
            + f" | {', '.join(took) or '-'} |"
        )  # fmt: skip
    return "\n".join(out + ["", "## Survivors", ""] + (details or ["none"])) + "\n"


@contextlib.contextmanager
def exclusive():
    """One run at a time: two would share the copy and its `.mutmut-cache`."""
    WORK.mkdir(exist_ok=True)
    lock = WORK / "caches" / "running.pid"
    lock.parent.mkdir(exist_ok=True)
    if lock.is_file():
        pid = int(lock.read_text() or 0)
        try:
            os.kill(pid, 0)
        except (ProcessLookupError, ValueError):
            pass
        else:
            raise SystemExit(f"another `make mutants` (pid {pid}) is running; wait for it or use --report")
    lock.write_text(str(os.getpid()))
    try:
        yield
    finally:
        lock.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("modules", nargs="*", metavar="MODULE", help=", ".join(MODULES))
    parser.add_argument("--report", action="store_true", help="print the report of the last runs only")
    parser.add_argument(
        "--survivors", action="store_true", help="retest only the surviving mutants (after adding tests)"
    )
    parser.add_argument("--minutes", type=float, help="stop each module after this many minutes (rest untested)")
    parser.add_argument("--list", action="store_true", help="list the modules and their tests")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.modules) - set(MODULES))
    if unknown:
        parser.error(f"unknown module(s) {', '.join(unknown)}; choose from {', '.join(MODULES)}")
    names = args.modules or list(MODULES)
    if args.list:
        for name in names:
            print(f"{name}: {MODULES[name].path}\n  " + "\n  ".join(MODULES[name].tests))
        return 0
    if not args.report:
        with exclusive():
            sync_copy()
            timings_file = WORK / "timings.json"
            for name in names:
                elapsed = run_module(name, MODULES[name], args.survivors, args.minutes)
                timings = json.loads(timings_file.read_text()) if timings_file.is_file() else {}
                timings[name + (" (survivors)" if args.survivors else "")] = elapsed
                timings_file.write_text(json.dumps(timings, indent=2))
    text = report()
    (WORK / "report.md").write_text(text)
    print("\n" + text.split("\n## Survivors")[0])
    print(f"survivors' diffs: {WORK / 'report.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
