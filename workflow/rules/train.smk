# One generic pretraining rule for every model and every ablation cell.


rule train:
    input:
        unpack(train_inputs),
    output:
        done=f"{RESULTS}/runs/{{study}}/{{run}}/checkpoints/final/COMPLETE",
    params:
        atlas=ATLAS,
        # the whole resolved TrainConfig: any changed hyperparameter reruns the job
        config=lambda wc: json.dumps(train_config(wc.study, wc.run), sort_keys=True),
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
        "mkdir -p {params.out} && printf '%s' {params.config:q} > {params.out}/train.json && "
        "OMP_NUM_THREADS={params.omp} {params.launcher} {params.atlas} train --config {params.out}/train.json --out {params.out} --resume auto "
        "--tracking-uri {params.uri:q} > {log} 2>&1"


rule pretrain:
    input:
        pretrain_targets(),


# The cost table of every pretraining job (docs/costs.md): FLOPs and bytes per token counted on the meta device,
# projected GPU-hours, and the runtimes that `resources.train.runtime: cost` requests. Counting needs no GPU.
rule cost_table:
    output:
        table=COST_TABLE,
        markdown=f"{RESULTS}/costs/train.md",
    params:
        atlas=ATLAS,
        jobs=lambda wc: json.dumps(train_jobs(), sort_keys=True),
        jobs_file=f"{RESULTS}/costs/train_jobs.json",
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
        "mkdir -p $(dirname {params.jobs_file}) && printf '%s' {params.jobs:q} > {params.jobs_file} && "
        "{params.atlas} cost --jobs {params.jobs_file} --out {params.counted} --markdown {output.markdown} "
        "--gpus {params.gpus} --mfu {params.cost[mfu]} --peak-tflops {params.cost[peak_tflops]} "
        "--hbm-tbps {params.cost[hbm_tbps]} --margin {params.cost[margin]} > {log} 2>&1 && "
        "cp {params.counted} {output.table}"


localrules:
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
