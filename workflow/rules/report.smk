# MLflow -> reports/*.md + figures: a pure function of the tracked runs (cheap, so it runs on the head node).


localrules:
    report,


rule report:
    input:
        runs=all_targets(),
        evals=eval_targets(),
        synthetic=synthetic_targets(),
    output:
        index=report(f"{config['report_dir']}/README.md", caption="../report/index.rst", category="Overview"),
        pretrain=report(f"{config['report_dir']}/pretrain.md", caption="../report/pretrain.rst", category="Tables"),
        ablations=report(f"{config['report_dir']}/ablations.md", caption="../report/ablations.rst", category="Tables"),
        evaluations=report(
            f"{config['report_dir']}/evaluations.md", caption="../report/evaluations.rst", category="Tables"
        ),
        figures=report(
            directory(f"{config['report_dir']}/figures"),
            patterns=["{name}.png"],
            caption="../report/figures.rst",
            category="Figures",
        ),
    params:
        atlas=ATLAS,
        uri=tracking_uri(),
        out=lambda wc, output: os.path.dirname(output.index),
        title=config.get("report_title", "ATLAS reproduction"),
        # MLflow keeps every cell an axis ever had: the report lists the rows of today's tables
        cells=json.dumps({axis: {run: cells.values[run] for run in cells} for axis, cells in ABLATIONS.items()}),
    conda:
        "../envs/atlas.yaml"
    log:
        f"{RESULTS}/logs/report.log",
    benchmark:
        f"{RESULTS}/benchmarks/report.tsv"
    shell:
        "{params.atlas} report --tracking-uri {params.uri:q} --out {params.out} --title {params.title:q} "
        "--ablation-cells {params.cells:q} > {log} 2>&1"
