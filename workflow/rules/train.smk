# One generic pretraining rule for every model and every ablation cell.


rule train:
    input:
        manifest=f"{RESULTS}/data/{config['train']['data']}/manifest.json",
    output:
        done=f"{RESULTS}/runs/{{study}}/{{run}}/checkpoints/final/COMPLETE",
    params:
        atlas=ATLAS,
        # the whole resolved TrainConfig: any changed hyperparameter reruns the job
        config=lambda wc: json.dumps(train_config(wc.study, wc.run), sort_keys=True),
        out=lambda wc: run_dir(wc.study, wc.run),
        launcher=config["train"]["launcher"],
    threads: config["resources"]["train"]["threads"]
    resources:
        gpu=config["resources"]["train"]["gpu"],
        mem_mb=config["resources"]["train"]["mem_mb"],
        runtime=config["resources"]["train"]["runtime"],
    conda:
        "../envs/atlas.yaml"
    log:
        f"{RESULTS}/logs/train/{{study}}/{{run}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/train/{{study}}/{{run}}.tsv"
    shell:
        "mkdir -p {params.out} && printf '%s' {params.config:q} > {params.out}/train.json && "
        "{params.launcher} {params.atlas} train --config {params.out}/train.json --out {params.out} --resume auto "
        "> {log} 2>&1"


rule pretrain:
    input:
        pretrain_targets(),


for _axis in ABLATIONS:

    rule:
        name:
            f"ablation_{_axis}"
        input:
            ablation_targets(_axis),
