# The pre-registered claims study: pilot (budget check) -> one job per (protocol, arm, seed) -> verdicts.
# Jobs are `atlas study run` (the product's `atlas eval` of the protocol), tracked in the MLflow experiment
# `study` under one parent run; the verdicts apply the registered decision rule (atlas_experiments.study).
# Settings, jobs and the corpus of the language-model protocols: workflow/lib/study_jobs.py (through common.smk).


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
        scale=STUDY["scale"],
        uri=tracking_uri(),
        spec=json.dumps({"claims": STUDY["claims"], "scale": STUDY["scale"]}, sort_keys=True),
        claims=STUDY["claims"],
    log:
        f"{RESULTS}/logs/study/parent.log",
    conda:
        "../envs/atlas.yaml"
    shell:
        "{params.atlas} track parent --experiment study --name study:{params.scale} --record {output.record} "
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
        STUDY_PLAN.results_files(),
    output:
        verdicts=f"{STUDY['report_dir']}/verdicts.md",
        # results/ is not committed, reports/ is: without this stamp a fresh clone's committed verdicts would make
        # `snakemake study` a no-op instead of the run that reproduces them
        stamp=f"{STUDY_ROOT}/report.stamp",
    params:
        atlas=ATLAS,
        args=STUDY_ARGS,
        v1=f"--v1-record {STUDY['v1_record']}" if STUDY.get("v1_record") else "",
    log:
        f"{RESULTS}/logs/study/report.log",
    conda:
        "../envs/atlas.yaml"
    shell:
        "{params.atlas} study report {params.args} {params.v1} --out $(dirname {output.verdicts}) > {log} 2>&1 "
        "&& date -u +%Y-%m-%dT%H:%M:%SZ > {output.stamp}"


rule study:
    input:
        f"{STUDY['report_dir']}/verdicts.md",
        f"{STUDY_ROOT}/report.stamp",


wildcard_constraints:
    protocol=r"[a-z0-9_]+",
    arm=r"[a-z0-9_]+",
    seed=r"\d+",
