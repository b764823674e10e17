# Corpus -> tokenizer -> packed shards, one dataset per entry of config["data"].


rule prepare_data:
    input:
        cfg=lambda wc: str(ROOT / config["data"][wc.dataset]),
    output:
        manifest=f"{RESULTS}/data/{{dataset}}/manifest.json",
    params:
        atlas=ATLAS,
        out=lambda wc: f"{RESULTS}/data/{wc.dataset}",
        workers=config["resources"]["data"]["workers"],
    threads: config["resources"]["data"]["workers"]
    resources:
        mem_mb=config["resources"]["data"]["mem_mb"],
        runtime=config["resources"]["data"]["runtime"],
    conda:
        "../envs/atlas.yaml"
    log:
        f"{RESULTS}/logs/data/{{dataset}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/data/{{dataset}}.tsv"
    shell:
        "{params.atlas} data prepare --config {input.cfg} --out {params.out} --workers {params.workers} "
        "--no-progress > {log} 2>&1"
