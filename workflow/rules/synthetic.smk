# Synthetic benchmarks (the registry's tasks of kind per_preset and standalone): those that train their own small
# models from scratch, MQAR (Fig. 7) and MAD (Table 4), one job per (task, preset); those that train no language
# model, learnability (Section 6, Fig. 6: memory MLPs trained online on five streams), one job.
# Options per task come from config["synthetic"]; results JSON + figure + MLflow run under the experiment
# eval_<task>. The shell names a task by its config key, which `atlas eval` takes as well as its command (their
# parameters stay those of before the task registry, so finished jobs are not rerun).


rule synthetic:
    output:
        result=f"{RESULTS}/synthetic/{{synthetic}}/{{preset}}.json",
    params:
        atlas=ATLAS,
        args=lambda wc: eval_args(wc.synthetic, section="synthetic"),
        uri=tracking_uri(),
    threads: config["resources"]["eval"]["threads"]
    resources:
        gpu=config["resources"]["eval"]["gpu"],
        mem_mb=config["resources"]["eval"]["mem_mb"],
        runtime=config["resources"]["eval"]["runtime"],
    conda:
        "../envs/atlas.yaml"
    log:
        f"{RESULTS}/logs/synthetic/{{synthetic}}/{{preset}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/synthetic/{{synthetic}}/{{preset}}.tsv"
    shell:
        "OMP_NUM_THREADS={threads} {params.atlas} eval {wildcards.synthetic} --models {wildcards.preset} "
        "--out {output.result} --threads {threads} --tracking-uri {params.uri:q} "
        "--experiment eval_{wildcards.synthetic} --no-progress {params.args} > {log} 2>&1"


rule standalone:
    output:
        result=f"{RESULTS}/synthetic/{{standalone}}/result.json",
    params:
        atlas=ATLAS,
        args=lambda wc: eval_args(wc.standalone, section="synthetic"),
        uri=tracking_uri(),
    threads: config["resources"]["eval"]["threads"]
    resources:
        gpu=config["resources"]["eval"]["gpu"],
        mem_mb=config["resources"]["eval"]["mem_mb"],
        runtime=config["resources"]["eval"]["runtime"],
    conda:
        "../envs/atlas.yaml"
    log:
        f"{RESULTS}/logs/synthetic/{{standalone}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/synthetic/{{standalone}}.tsv"
    shell:
        "OMP_NUM_THREADS={threads} {params.atlas} eval {wildcards.standalone} --out {output.result} "
        "--threads {threads} --tracking-uri {params.uri:q} --experiment eval_{wildcards.standalone} --no-progress "
        "{params.args} > {log} 2>&1"


rule synthetics:
    input:
        synthetic_targets(),
