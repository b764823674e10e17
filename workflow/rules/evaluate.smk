# Evaluation of every pretrained model: perplexity (incl. beyond the training context), lm-eval, S-NIAH and
# BABILong-style QA. Options per task come from config["evaluation"]; results JSONs + MLflow runs (eval_<task>).

rule evaluate:
    input:
        done=lambda wc: final_checkpoint("pretrain", wc.run),
    output:
        result=f"{RESULTS}/eval/{{task}}/{{run}}.json",
    params:
        atlas=ATLAS,
        command=lambda wc: eval_jobs.command(wc.task),
        checkpoint=lambda wc, input: os.path.dirname(input.done),
        args=lambda wc: eval_args(wc.task),
        uri=tracking_uri(),
    threads: config["resources"]["eval"]["threads"]
    resources:
        gpu=config["resources"]["eval"]["gpu"],
        mem_mb=config["resources"]["eval"]["mem_mb"],
        runtime=config["resources"]["eval"]["runtime"],
    conda:
        "../envs/atlas.yaml"
    log:
        f"{RESULTS}/logs/eval/{{task}}/{{run}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/eval/{{task}}/{{run}}.tsv"
    shell:
        "OMP_NUM_THREADS={threads} {params.atlas} eval {params.command} --checkpoint {params.checkpoint} --out {output.result} "
        "--tracking-uri {params.uri:q} --experiment eval_{wildcards.task} --no-progress {params.args} > {log} 2>&1"


rule evaluation:
    input:
        eval_targets(),
