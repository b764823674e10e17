# One generic pretraining rule for every model and every ablation cell.


# The run's resolved TrainConfig, written by its own rule (job_files.py): a changed hyperparameter rewrites it
# (the params trigger) and the newer file reruns the train job.
rule train_config:
    output:
        config=f"{RESULTS}/runs/{{study}}/{{run}}/train.json",
    params:
        text=lambda wc: json.dumps(train_config(wc.study, wc.run), sort_keys=True),
    log:
        f"{RESULTS}/logs/train_config/{{study}}/{{run}}.log",
    conda:
        "../envs/atlas.yaml"
    script:
        "../scripts/write_job_file.py"


rule train:
    input:
        unpack(train_inputs),
    output:
        done=f"{RESULTS}/runs/{{study}}/{{run}}/checkpoints/final/COMPLETE",
    params:
        atlas=ATLAS,
        uri=tracking_uri(),
        out=lambda wc: run_dir(wc.study, wc.run),
        launcher=config["train"]["launcher"],
        # torchrun starts one process per GPU: split the job's CPU threads between them (from the config, since a
        # local dry run caps `threads` at its own --cores)
        omp=max(1, config["resources"]["train"]["threads"] // max(1, config["resources"]["train"]["gpu"])),
    threads: config["resources"]["train"]["threads"]
    resources:
        gpu=config["resources"]["train"]["gpu"],
        mem_mb=config["resources"]["train"]["mem_mb"],
        runtime=train_runtime,
    conda:
        "../envs/atlas.yaml"
    log:
        f"{RESULTS}/logs/train/{{study}}/{{run}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/train/{{study}}/{{run}}.tsv"
    shell:
        "OMP_NUM_THREADS={params.omp} {params.launcher} {params.atlas} train --config {input.config} --out {params.out} --resume auto "
        "--tracking-uri {params.uri:q} > {log} 2>&1"


rule pretrain:
    input:
        pretrain_targets(),


# The cost table of every pretraining job (docs/costs.md): FLOPs and bytes per token counted on the meta device,
# projected GPU-hours, and the runtimes that `resources.train.runtime: cost` requests. Counting needs no GPU.
rule cost_jobs:
    output:
        jobs=f"{RESULTS}/costs/train_jobs.json",
    params:
        text=lambda wc: json.dumps(train_jobs(), sort_keys=True),
    log:
        f"{RESULTS}/logs/cost_jobs.log",
    conda:
        "../envs/atlas.yaml"
    script:
        "../scripts/write_job_file.py"


rule cost_table:
    input:
        jobs=rules.cost_jobs.output.jobs,
    output:
        table=COST_TABLE,
        markdown=f"{RESULTS}/costs/train.md",
    params:
        atlas=ATLAS,
        # not an output, so it survives a rerun (snakemake removes a job's outputs first): rows whose key still
        # matches are reused and only changed jobs are counted again
        counted=f"{RESULTS}/costs/counted.json",
        gpus=max(1, config["resources"]["train"]["gpu"]),
        cost=config["resources"]["train"]["cost"],
    log:
        f"{RESULTS}/logs/cost_table.log",
    conda:
        "../envs/atlas.yaml"
    shell:
        "{params.atlas} cost --jobs {input.jobs} --out {params.counted} --markdown {output.markdown} "
        "--gpus {params.gpus} --mfu {params.cost[mfu]} --peak-tflops {params.cost[peak_tflops]} "
        "--fp64-tflops {params.cost[fp64_tflops]} --hbm-tbps {params.cost[hbm_tbps]} --margin {params.cost[margin]} > {log} 2>&1 && "
        "cp {params.counted} {output.table}"


localrules:
    train_config,
    cost_jobs,
    cost_table,
    ablation_parent,
    ablation_summary,


rule ablation_parent:
    output:
        record=parent_record("{axis}"),
    params:
        atlas=ATLAS,
        uri=tracking_uri(),
        spec=lambda wc: json.dumps(parent_params(wc.axis), sort_keys=True),
        # relative to the working directory: a moved checkout (with its results) keeps the same parameter
        table=lambda wc: os.path.relpath(ROOT / config["ablations"]["tables"][wc.axis]),
    log:
        f"{RESULTS}/logs/ablation/{{axis}}_parent.log",
    benchmark:
        f"{RESULTS}/benchmarks/ablation/{{axis}}_parent.tsv"
    conda:
        "../envs/atlas.yaml"
    shell:
        "{params.atlas} track parent --tracking-uri {params.uri:q} --experiment ablation_{wildcards.axis} "
        "--name {wildcards.axis} --record {output.record} --params {params.spec:q} --artifact {params.table:q} "
        "> {log} 2>&1"


rule ablation_summary:
    input:
        cells=lambda wc: ablation_cells(wc.axis),
        record=lambda wc: parent_record(wc.axis),
    output:
        summary=ablation_summary("{axis}"),
    params:
        atlas=ATLAS,
    log:
        f"{RESULTS}/logs/ablation/{{axis}}_summary.log",
    benchmark:
        f"{RESULTS}/benchmarks/ablation/{{axis}}_summary.tsv"
    conda:
        "../envs/atlas.yaml"
    shell:
        "{params.atlas} track summarize --record {input.record} --out {output.summary} > {log} 2>&1"


for _axis in ABLATIONS:

    rule:
        name:
            f"ablation_{_axis}"
        input:
            ablation_summary(_axis),
