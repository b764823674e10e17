"""`atlas study`: run the pre-registered claims study (packages/atlas-experiments/docs/study.md).

- `plan`: list the jobs (protocol/arm/seed) the testable claims need at a scale.
- `pilot`: time two short runs of every (protocol, arm), project the plan on the given cores and refuse it, with
  the numbers, when it exceeds the budget; writes the projection (JSON).
- `run`: one job: `atlas eval <task>` of the protocol for the arm and seed, its result tracked in the `study`
  experiment under the study's parent run; `--arm` every seed of one arm in one process; `--pending` every job
  without a result, one process per job (or per arm with `--per-arm`).
- `track`: register the finished results that have no MLflow run yet (runs made with `--no-track`, or returned
  from another machine) as runs of the `study` experiment, learning curves and figures included.
- `report`: judge every claim by the pre-registered rule on the results that exist; verdicts.md + verdicts.json.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

DEFAULT_CLAIMS = "config/study/claims.yaml"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("study", help="the pre-registered claims study: plan, pilot, run, track, report")
    inner = p.add_subparsers(dest="study_command", metavar="<step>", required=True)

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument("--claims", default=DEFAULT_CLAIMS, help=f"claims file (default {DEFAULT_CLAIMS})")
        q.add_argument("--scale", default="cpu", help="comma-separated scales to run: cpu, gpu (default cpu)")
        q.add_argument("--root", default="results/study", help="the study's results folder (default results/study)")

    q = inner.add_parser("plan", help="list the jobs of the claims testable at the scale")
    common(q)
    q.add_argument(
        "--pilot",
        help="a report's verdicts.json whose seed sd per claim sets the seeds rule v2 needs (2 x delta at 80%% power, "
        "at least 5); pilot data choose seeds, they never judge",
    )
    q.add_argument(
        "--costs",
        help="a pilot's projection (plan.json or plan.measured.json): print the CPU-hours of each claim's jobs; with "
        "--progress, the price of arms with no finished job",
    )
    q.add_argument(
        "--progress",
        action="store_true",
        help="per claim: jobs done of planned under --root, CPU-hours spent, and CPU-hours left as the finished "
        "jobs of each arm predict (or, for an arm with none, --costs)",
    )
    q.add_argument(
        "--schedule",
        action="store_true",
        help="the order `run --pending --order verdicts-first` takes: claim by claim, least work left first, with "
        "each claim's CPU-hours and when its last job ends (priced as --progress prices)",
    )
    q.add_argument("--workers", type=int, default=2, help="with --schedule: jobs side by side (default 2)")
    claim_option(q)
    q.set_defaults(handler=plan_command)

    q = inner.add_parser("pilot", help="time every arm briefly, project the plan, refuse it over the budget")
    common(q)
    q.add_argument("--budget-minutes", type=float, required=True, help="wall-clock budget of the whole plan")
    q.add_argument("--cores", type=int, default=2, help="single-threaded jobs that run side by side (default 2)")
    q.add_argument("--out", required=True, help="the projection (JSON)")
    q.add_argument("--data", help="prepared corpus of the lm protocols (`atlas data prepare` output)")
    q.add_argument(
        "--only",
        help="comma-separated protocol or protocol/arm: time only these (the projection covers their jobs only)",
    )
    q.add_argument(
        "--unstarted",
        action="store_true",
        help="time only the (protocol, arm)s with no finished job under --root (to price what is left of a study)",
    )
    q.add_argument(
        "--drop-by-priority",
        action="store_true",
        help="over budget, drop whole claims by their registered priority (highest number first) instead of refusing",
    )
    q.set_defaults(handler=pilot_command)

    q = inner.add_parser("run", help="one job of the plan, or (--pending) every job without a result")
    common(q)
    which = q.add_mutually_exclusive_group(required=True)
    which.add_argument("--job", help="protocol/arm/seedN, as `atlas study plan` lists it")
    which.add_argument(
        "--pending",
        action="store_true",
        help="run every planned job that has no result yet, each in its own process (safe to kill and restart)",
    )
    which.add_argument(
        "--arm",
        help="protocol/arm: every seed of that arm without a result, in sequence in this process (a failed seed "
        "does not stop the next)",
    )
    q.add_argument("--workers", type=int, default=1, help="with --pending: jobs (or arms) side by side (default 1)")
    q.add_argument(
        "--per-arm",
        action="store_true",
        help="with --pending: one process per (protocol, arm) running its seeds in sequence (`--arm`) instead of "
        "one per job",
    )
    q.add_argument("--parent", help="parent-run record (`atlas track parent`): the run nests under it")
    q.add_argument("--plan", help="the pilot's accepted plan: a job it dropped records that and does not run")
    q.add_argument("--data", help="prepared corpus of the lm protocols (`atlas data prepare` output)")
    q.add_argument("--tracking-uri", help="MLflow URI (default $MLFLOW_TRACKING_URI or sqlite under --root)")
    q.add_argument("--no-track", action="store_true", help="write the results JSON only, no MLflow run")
    q.add_argument(
        "--no-share",
        action="store_true",
        help="train every job even where a finished job of another protocol computed the same run (by default its "
        "result is shared: docs/study.md, Shared runs)",
    )
    q.add_argument(
        "--order",
        choices=("plan", "verdicts-first"),
        default="plan",
        help="with --pending: `plan` (as `atlas study plan` lists the jobs) or `verdicts-first` (claim by claim, the "
        "claim with the least work left first, so verdicts arrive soonest; `atlas study plan --schedule` shows it)",
    )
    q.add_argument(
        "--costs",
        help="with --order verdicts-first: a pilot's projection pricing the arms with no finished job",
    )
    claim_option(q)
    q.set_defaults(handler=run_command)

    q = inner.add_parser(
        "track",
        help="register every finished result under --root that has no MLflow run yet (results of --no-track "
        "stretches or of a GPU machine's call); safe to rerun",
    )
    common(q)
    q.add_argument("--tracking-uri", help="MLflow URI (default $MLFLOW_TRACKING_URI or sqlite under --root)")
    q.add_argument("--parent", help="parent-run record (`atlas track parent`): the runs nest under it")
    q.add_argument("--no-progress", action="store_true", help="no progress bar")
    q.set_defaults(handler=track_command)

    q = inner.add_parser("report", help="judge every claim on the results that exist")
    common(q)
    q.add_argument("--out", default="reports/study", help="folder of verdicts.md / verdicts.json")
    q.add_argument(
        "--v1-record",
        help="the rule v1 report's verdicts.json (reports/study/v1/verdicts.json): its data judged again under rule "
        "v2, labelled as not new evidence",
    )
    q.set_defaults(handler=report_command)


def claim_option(q: argparse.ArgumentParser) -> None:
    q.add_argument(
        "--claim",
        help="comma-separated claim ids or globs (`mqar_v2.deep_memory`, `mqar_v2.*`): only the jobs these claims "
        "need (to rerun one ablation)",
    )


def _registry_and_jobs(args: argparse.Namespace):
    from atlas_experiments.study.claims import load_claims
    from atlas_experiments.study.plan import plan_jobs

    registry = load_claims(args.claims)
    scales = [s.strip() for s in args.scale.split(",") if s.strip()]
    return registry, scales, plan_jobs(registry, scales)


def _selected(args: argparse.Namespace, registry, scales, jobs):
    """(the planned claims `--claim` selects, the plan's jobs they need)."""
    from atlas_experiments.study.plan import jobs_of_claims, planned_claims, select_claims

    claims = select_claims(planned_claims(registry, scales), args.claim)
    return claims, jobs_of_claims(claims, registry, jobs)


def _pilot(args: argparse.Namespace):
    """{(protocol, arm): projected job seconds} of `--costs`, or None."""
    from atlas_experiments.study.progress import pilot_times

    return pilot_times(json.loads(Path(args.costs).read_text())) if args.costs else None


def _schedule(args: argparse.Namespace, registry, jobs, claims):
    """The verdicts-first schedule of `claims` (study/schedule.py), priced from `--root` and `--costs`."""
    from atlas_experiments.study import progress, schedule

    return schedule.verdicts_first(claims, registry, jobs, progress.measure(jobs, args.root), _pilot(args))


def plan_command(args: argparse.Namespace) -> int:
    registry, scales, jobs = _registry_and_jobs(args)
    claims, mine = _selected(args, registry, scales, jobs)
    if args.schedule:
        from atlas_experiments.study.schedule import format_schedule

        print(format_schedule(_schedule(args, registry, jobs, claims), args.workers))
        return 0
    if args.progress:
        from atlas_experiments.study import progress

        pilot = _pilot(args)
        seconds = progress.measure(jobs, args.root)
        rows = progress.study_progress(registry, scales, jobs, args.root, pilot, seconds, claims=claims)
        print(progress.format_progress(rows))
        if pilot:
            print(progress.pace_note(progress.pilot_pace(mine, seconds, pilot), rows[-1]))
        return 0
    if args.pilot:
        from atlas_experiments.study.power import seeds_for_power

        data = json.loads(Path(args.pilot).read_text())
        records = data.get("rule_v1", []) if isinstance(data, dict) else data
        sd = {r["claim"]: max((c["sd"] for c in r.get("comparisons", {}).values() if c.get("sd") is not None),
                              default=float("nan")) for r in records}  # fmt: skip
        print(f"{'claim':<42} {'K':>2} {'pilot sd':>9} {'delta':>6} {'seeds':>5} {'power':>6}  note")
        for claim in claims:
            plan = seeds_for_power(sd.get(claim.id, float("nan")), claim.delta, len(claim.comparisons))
            print(f"{claim.id:<42} {plan.comparisons:>2} {plan.sd:>9.4g} {plan.delta:>6g} {plan.n:>5} "
                  f"{plan.power:>6.2f}  {plan.note}")  # fmt: skip
        return 0
    if args.costs:
        from atlas_experiments.study.plan import claim_jobs

        timings = {(t["protocol"], t["arm"]): t["job_s"] for t in json.loads(Path(args.costs).read_text())["timings"]}

        def hours(some) -> float:
            return sum(timings.get((j.protocol.name, j.arm.name if j.arm else "all"), 0.0) for j in some) / 3600

        print(f"{'claim':<42} {'jobs':>5} {'CPU-hours':>9}  (jobs shared between claims count for each)")
        for claim in claims:
            needed = claim_jobs(claim, registry)
            print(f"{claim.id:<42} {len(needed):>5} {hours(needed):>9.2f}")
        print(f"{'all jobs (each once)':<42} {len(mine):>5} {hours(mine):>9.2f}")
        return 0
    for job in mine:
        print(job.name)
    return 0


def pilot_command(args: argparse.Namespace) -> int:
    from functools import partial

    from atlas_experiments.study.pilot import check_budget, fit_by_priority, measure, project, write_plan
    from atlas_experiments.study.plan import planned_claims

    registry, scales, jobs = _registry_and_jobs(args)
    jobs = _pilot_jobs(jobs, args)
    timings = measure(jobs, partial(_pilot_runner, data=args.data))
    plan = project(timings, args.cores)
    plan.update(budget_minutes=args.budget_minutes, accepted_jobs=[j.name for j in jobs], dropped_claims=[])
    write_plan(plan, Path(args.out).with_name(Path(args.out).stem + ".measured.json"))
    if args.drop_by_priority:
        needs = []
        for claim in planned_claims(registry, scales):
            protocol = registry.protocol_of(claim)
            names = {j.name for j in jobs if j.protocol.name == protocol.name
                     and (j.arm is None or j.arm.name in {a.name for a in claim.arms})}  # fmt: skip
            needs.append((claim.id, claim.priority, names))
        accepted, dropped = fit_by_priority(timings, jobs, needs, args.budget_minutes, args.cores)
        plan.update(accepted_jobs=accepted, dropped_claims=dropped)
        print(f"dropped by priority: {', '.join(dropped) or 'none'}")
    else:
        check_budget(plan, args.budget_minutes)  # a refused plan leaves no `--out`, so no job starts
    write_plan(plan, args.out)
    print(f"plan: {len(plan['accepted_jobs'])} of {plan['jobs']} jobs, about {plan['projected_wall_s'] / 60:.1f} min "
          f"on {args.cores} cores for all of them")  # fmt: skip
    return 0


def _pilot_jobs(jobs, args: argparse.Namespace):
    """The jobs whose (protocol, arm) the pilot times: `--only` and `--unstarted` narrow the plan."""
    from atlas_experiments.study.pending import arm_key
    from atlas_experiments.study.progress import measure

    if args.only:
        wanted = [w.strip() for w in args.only.split(",") if w.strip()]
        known = {j.protocol.name for j in jobs} | {arm_key(j) for j in jobs}
        unknown = [w for w in wanted if w not in known]
        if unknown:
            raise ValueError(f"--only: not a protocol or protocol/arm of the plan: {', '.join(unknown)}")
        jobs = [j for j in jobs if j.protocol.name in wanted or arm_key(j) in wanted]
    if args.unstarted:
        finished = measure(jobs, args.root)
        started = {arm_key(j) for j in jobs if j.name in finished}
        jobs = [j for j in jobs if arm_key(j) not in started]
    if not jobs:
        raise ValueError("the pilot has no job to time (--only / --unstarted left none)")
    return jobs


def _pilot_runner(job, root, overrides, *, data):
    from atlas_experiments.study.execute import run_job

    return run_job(job, root, overrides=overrides, data_dir=data)


def run_command(args: argparse.Namespace) -> int:
    registry, scales, jobs = _registry_and_jobs(args)
    if args.per_arm and not args.pending:
        raise ValueError("--per-arm: only with --pending")
    if (args.order != "plan" or args.costs or args.claim) and not args.pending:
        raise ValueError("--order, --costs and --claim: only with --pending")
    if args.pending:
        from atlas_experiments.study.pending import run_pending

        todo = _pending_order(args, registry, scales, jobs)

        child = ["--claims", args.claims, "--scale", args.scale, "--root", args.root]
        for flag, value in (("--parent", args.parent), ("--plan", args.plan), ("--data", args.data),
                            ("--tracking-uri", args.tracking_uri)):  # fmt: skip
            if value:
                child += [flag, value]
        child += [flag for flag, on in (("--no-track", args.no_track), ("--no-share", args.no_share)) if on]
        if args.plan:  # the plan's dropped jobs are recorded here: no process starts only to write that
            from atlas_experiments.study.pending import pending_jobs

            accepted = set(json.loads(Path(args.plan).read_text())["accepted_jobs"])
            for job in pending_jobs([j for j in todo if j.name not in accepted], args.root)[0]:
                _run_one(job, args, jobs)
        return 1 if run_pending(todo, args.root, child, args.workers, per_arm=args.per_arm) else 0
    if args.arm:
        return _run_arm(jobs, args)
    job = next((j for j in jobs if j.name == args.job), None)
    if job is None:
        raise ValueError(f"--job: {args.job!r} is not a job of the plan (see `atlas study plan`)")
    return _run_one(job, args, jobs)


def _pending_order(args: argparse.Namespace, registry, scales, jobs):
    """The jobs `--pending` runs, in the order it starts them: `--claim`'s selection, in plan order or (`--order
    verdicts-first`) as `atlas study plan --schedule` lists them."""
    claims, mine = _selected(args, registry, scales, jobs)
    if args.order == "plan":
        return mine
    from atlas_experiments.study.schedule import format_schedule, ordered_jobs

    steps = _schedule(args, registry, jobs, claims)
    print(format_schedule(steps, args.workers), flush=True)  # the log shows the order it then follows
    return ordered_jobs(steps, mine)


def _run_arm(jobs, args: argparse.Namespace) -> int:
    """Every seed of one (protocol, arm) that has no result, in plan order; each result is final as soon as its seed
    ends, and a seed that raises is reported and the next one runs. Each seed is looked up again just before it
    starts: one that another process finished meanwhile (a second worker given that job) is skipped, not rerun."""
    import sys
    import traceback

    from atlas_experiments.study.pending import arm_key, pending_jobs

    mine = [j for j in jobs if arm_key(j) == args.arm]
    if not mine:
        known = sorted({arm_key(j) for j in jobs})
        raise ValueError(f"--arm: {args.arm!r} is not a (protocol, arm) of the plan (known: {', '.join(known)})")
    todo, refused = pending_jobs(mine, args.root)
    for why in refused:
        print(f"refused (left alone, remove it to rerun the job): {why}", file=sys.stderr)
    print(f"study arm {args.arm}: {len(mine) - len(todo) - len(refused)} of {len(mine)} seeds done, {len(todo)} to run",
          flush=True)  # fmt: skip
    failed = 0
    for job in todo:
        still, _ = pending_jobs([job], args.root)
        if not still:
            print(f"study job {job.name}: finished by another process meanwhile, skipped", flush=True)
            continue
        try:
            _run_one(job, args, jobs)
        except Exception:  # the next seed runs all the same; the runner counts the missing result
            failed += 1
            print(f"study job {job.name} failed:", file=sys.stderr)
            traceback.print_exc()
        sys.stdout.flush()
    return 1 if failed or refused else 0


def _run_one(job, args: argparse.Namespace, jobs) -> int:
    from atlas_experiments import tracking
    from atlas_experiments._io import write_json_atomic
    from atlas_experiments.study.execute import run_job
    from atlas_experiments.study.shared import find_twin, share
    from atlas_experiments.study.tracked import track_job

    if args.plan and job.name not in json.loads(Path(args.plan).read_text())["accepted_jobs"]:
        write_json_atomic(job.result(args.root), {"skipped": f"dropped by the pilot to fit its budget ({args.plan})"})
        print(f"study job {job.name}: dropped by the pilot")
        return 0
    twin = None if args.no_share else find_twin(job, jobs, args.root)
    if twin is not None:
        out = share(job, twin, args.root)
        print(f"study job {job.name}: the same run as the finished {twin.name}, its result shared", flush=True)
    else:
        out = run_job(job, args.root, data_dir=args.data)
    if args.no_track:
        print(f"study job {job.name}: {out}")
        return 0
    parent = tracking.read_parent(args.parent) if args.parent else None
    run_id = track_job(job, json.loads(out.read_text()), args.root, args.tracking_uri, parent)
    print(f"study job {job.name}: {out}" + (f" (mlflow run {run_id})" if run_id else ""))
    return 0


def track_command(args: argparse.Namespace) -> int:
    from atlas_experiments import tracking
    from atlas_experiments.study.tracked import track_finished

    _, _, jobs = _registry_and_jobs(args)
    uri = tracking.resolve_tracking_uri(args.tracking_uri, args.root)
    parent = tracking.read_parent(args.parent) if args.parent else None
    summary = track_finished(jobs, args.root, uri, parent, progress=not args.no_progress)
    for why in summary.refused:
        print(f"refused (not registered): {why}")
    for name in summary.failed:
        print(f"not registered (the store did not take the run): {name}")
    print(summary.line(uri))
    return 1 if summary.refused or summary.failed else 0


def report_command(args: argparse.Namespace) -> int:
    from atlas_experiments.study import report_v2
    from atlas_experiments.study.report import judge_all, provenance, write_report
    from atlas_experiments.study.shared import shared_from

    registry, scales, jobs = _registry_and_jobs(args)
    records = judge_all(registry, args.root, scales)
    done = [j for j in jobs if j.result(args.root).is_file() and "skipped" not in j.result(args.root).read_text()]
    protocols = sorted({j.protocol.name for j in done})
    shared = [j.name for j in done if shared_from(json.loads(j.result(args.root).read_text()))]
    coverage = (
        f"Results present for {len(done)} of the {len(jobs)} planned jobs (protocols with results: "
        f"{', '.join(protocols) or 'none'}); a claim is judged only when all its registered seeds ran."
    )
    if shared:
        coverage += (
            f" {len(shared)} of them share the run of a finished job that computes the same numbers (its result file "
            f"names it under `study.shared`; docs/study.md, Shared runs): {', '.join(shared)}."
        )
    baselines = report_v2.Baselines(registry)
    v2 = report_v2.judge_v2(registry, scales, root=args.root, baselines=baselines)
    fresh = [r for r in v2 if registry.protocols[r["protocol"]].registered >= registry.rule_v2_registered]
    # rule v1 and the re-reading speak of the claims whose protocols were registered before rule v2, only
    v2_only = {r["claim"] for r in fresh}
    records = [r for r in records if r["claim"] not in v2_only]
    seen = [r for r in v2 if r not in fresh and "comparisons" in r]
    rejudged, v1, v1_source = (seen or None), records, "the results present"
    if args.v1_record:
        record = json.loads(Path(args.v1_record).read_text())
        rejudged = [r for r in report_v2.judge_v2(registry, scales, record=record, baselines=baselines)
                    if r["claim"] not in v2_only]  # fmt: skip
        if not any(j.protocol.registered < registry.rule_v2_registered for j in done):
            v1, v1_source = record, f"from `{args.v1_record}`"  # no fresh v1-protocol results: the record's
    header = "\n\n".join(x for x in (provenance(args.root, done, args.out), coverage) if x)
    others = [r for r in records if r["verdict"] in ("other scale", "not testable")]
    text = report_v2.render(registry, scales, fresh=fresh, rejudged=rejudged, v1=v1, v1_source=v1_source,
                            others=others, header=header)  # fmt: skip
    from atlas_experiments.study.curves import curves_section, mqar_curves
    from atlas_experiments.study.lengths import lengths_section, mqar_lengths

    for section in (curves_section(mqar_curves(done, args.root), args.out),
                    lengths_section(mqar_lengths(done, args.root), args.out)):  # fmt: skip
        text = f"{text}\n{section}" if section else text
    data = {"rule_v2": fresh, "v1_data_rule_v2": rejudged, "rule_v1": v1}
    path = write_report([*fresh, *(rejudged or [])], text, args.out, data)
    report_v2.write_figures(registry, fresh, rejudged, args.out)
    for r in rejudged or v2:
        print(f"{r['claim']:<40} {r.get('label', r['verdict'])}")
    print(f"verdicts: {path}")
    return 0
