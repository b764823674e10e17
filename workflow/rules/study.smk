# The pre-registered claims study: pilot (budget check) -> one job per (protocol, arm, seed) -> verdicts.
# Jobs are `atlas study run` (the product's `atlas eval` of the protocol), tracked in the MLflow experiment
# `study` under one parent run; the verdicts apply the registered decision rule (atlas_experiments.study).
import yaml

STUDY = config.get("study") or yaml.safe_load((ROOT / "config" / "study.yaml").read_text())["study"]
STUDY_ROOT = f"{RESULTS}/study"
STUDY_ARGS = f"--claims {STUDY['claims']} --scale {STUDY['scale']} --root {STUDY_ROOT}"


def study_plan():
    from atlas_experiments.study.claims import load_claims
    from atlas_experiments.study.plan import plan_jobs

    registry = load_claims(ROOT / STUDY["claims"])
    return plan_jobs(registry, STUDY["scale"].split(","))


_PLAN = study_plan()
STUDY_JOBS = [job.name for job in _PLAN]
# language-model protocols train on a prepared corpus (`args.data`: a dataset of the `data` section)
LM_PROTOCOLS = {job.protocol.name: job.protocol.args["data"] for job in _PLAN if job.protocol.task == "lm"}
if len(set(LM_PROTOCOLS.values())) > 1:
    raise ValueError(f"study: the lm protocols use several corpora {sorted(set(LM_PROTOCOLS.values()))}; one at a time")
STUDY_DATA = next(iter(LM_PROTOCOLS.values()), None)
STUDY_MANIFEST = [f"{RESULTS}/data/{STUDY_DATA}/manifest.json"] if STUDY_DATA else []
STUDY_DATA_ARG = f"--data {RESULTS}/data/{STUDY_DATA}" if STUDY_DATA else ""


def study_job_inputs(wc):
    inputs = {"plan": f"{STUDY_ROOT}/plan.json", "parent": ancient(f"{STUDY_ROOT}/parent.json")}
    if wc.protocol in LM_PROTOCOLS:
        inputs["manifest"] = STUDY_MANIFEST[0]
    return inputs


localrules:
    study,
    study_parent,
    study_report,


rule study_pilot:
    input:
        STUDY_MANIFEST,
    output:
        plan=f"{STUDY_ROOT}/plan.json",
    params:
        atlas=ATLAS,
        args=STUDY_ARGS,
        budget=STUDY["budget_minutes"],
        cores=STUDY["cores"],
        data=STUDY_DATA_ARG,
        drop="--drop-by-priority" if STUDY.get("drop_by_priority") else "",
    threads: STUDY["cores"]
    log:
        f"{RESULTS}/logs/study/pilot.log",
    conda:
        "../envs/atlas.yaml"
    shell:
        "OMP_NUM_THREADS=1 {params.atlas} study pilot {params.args} --budget-minutes {params.budget} "
        "--cores {params.cores} --out {output.plan} {params.data} {params.drop} > {log} 2>&1"


rule study_parent:
    output:
        record=f"{STUDY_ROOT}/parent.json",
    params:
        atlas=ATLAS,
        uri=tracking_uri(),
        spec=json.dumps({"claims": STUDY["claims"], "scale": STUDY["scale"]}, sort_keys=True),
        claims=STUDY["claims"],
    log:
        f"{RESULTS}/logs/study/parent.log",
    conda:
        "../envs/atlas.yaml"
    shell:
        "{params.atlas} track parent --experiment study --name study:{STUDY[scale]} --record {output.record} "
        "--tracking-uri {params.uri:q} --params {params.spec:q} --artifact {params.claims} > {log} 2>&1"


rule study_job:
    input:
        unpack(study_job_inputs),
    output:
        result=f"{STUDY_ROOT}/{{protocol}}/{{arm}}/seed{{seed}}.json",
    params:
        atlas=ATLAS,
        args=STUDY_ARGS,
        uri=tracking_uri(),
        data=lambda wc: STUDY_DATA_ARG if wc.protocol in LM_PROTOCOLS else "",
    threads: 1
    resources:
        gpu=lambda wc: 1 if wc.protocol in LM_PROTOCOLS else 0,
        mem_mb=config["resources"]["eval"]["mem_mb"],
        runtime=config["resources"]["eval"]["runtime"],
    log:
        f"{RESULTS}/logs/study/{{protocol}}/{{arm}}/seed{{seed}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/study/{{protocol}}/{{arm}}/seed{{seed}}.tsv"
    conda:
        "../envs/atlas.yaml"
    shell:
        "OMP_NUM_THREADS=1 {params.atlas} study run {params.args} --job {wildcards.protocol}/{wildcards.arm}/"
        "seed{wildcards.seed} --parent {input.parent} --plan {input.plan} --tracking-uri {params.uri:q} {params.data} "
        "> {log} 2>&1"


rule study_report:
    input:
        [f"{STUDY_ROOT}/{job}.json" for job in STUDY_JOBS],
    output:
        verdicts=f"{STUDY['report_dir']}/verdicts.md",
    params:
        atlas=ATLAS,
        args=STUDY_ARGS,
        out=STUDY["report_dir"],
    log:
        f"{RESULTS}/logs/study/report.log",
    conda:
        "../envs/atlas.yaml"
    shell:
        "{params.atlas} study report {params.args} --out {params.out} > {log} 2>&1"


rule study:
    input:
        f"{STUDY['report_dir']}/verdicts.md",


wildcard_constraints:
    protocol=r"[a-z0-9_]+",
    arm=r"[a-z0-9_]+",
    seed=r"\d+",
