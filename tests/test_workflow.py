"""The Snakemake workflow: lint, dry runs of every config and profile, and per-ablation targets."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow" / "lib"))
import ablation_tables  # noqa: E402  (the workflow's own module, not a package)

SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def _snakemake(*args: str, env: dict | None = None, results: Path | None = None) -> subprocess.CompletedProcess:
    """Run snakemake from the repository root; outputs go to a fresh `results` dir, so the checkout's state never
    changes what a dry run plans."""
    where = []
    if results is not None:
        where = ["--config", f"results={results}/results", f"report_dir={results}/reports"]
    return subprocess.run(
        [*SNAKEMAKE, *args, *where],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, **(env or {})},
    )


def _jobs(out: str) -> dict[str, int]:
    """The 'Job stats' table of a dry run -> {rule: count}."""
    table = out.split("Job stats:", 1)[1].split("\n\n", 1)[0]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M) if m[1] != "total"}


def test_lint_is_clean():
    res = _snakemake("--lint")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "Congratulations, your workflow is in a good condition" in res.stdout + res.stderr


@pytest.mark.parametrize(
    "extra", [[], ["--configfile", "config/paper.yaml", "--replace-workflow-config"]], ids=["embedded", "paper"]
)
def test_dry_run_builds_the_whole_dag(extra, tmp_path):
    res = _snakemake("-n", *extra, results=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    jobs = _jobs(res.stdout)
    assert jobs["prepare_data"] == 1 and jobs["train"] >= 8 and jobs["report"] == 1
    assert jobs["evaluate"] >= 4 * 8


def test_the_paper_config_merged_into_the_embedded_one_fails_the_dag_build(tmp_path):
    # without --replace-workflow-config the embedded run's batch limits would reach the paper-scale recipe
    res = _snakemake("-n", "--configfile", "config/paper.yaml", results=tmp_path)
    assert res.returncode != 0
    assert "config models.transformer_pp: train.global_batch_tokens: 512 is not a multiple" in res.stderr + res.stdout


def test_cluster_profile_dry_runs_with_slurm_and_the_paper_config(tmp_path):
    env = {"ATLAS_SLURM_ACCOUNT": "acct", "ATLAS_SLURM_PARTITION": "gpu", "MLFLOW_TRACKING_URI": "http://10.0.0.5:5000"}
    res = _snakemake("--profile", "cluster", "-n", env=env, results=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "config/paper.yaml" in res.stdout + res.stderr
    assert "--tracking-uri http://10.0.0.5:5000" in res.stdout  # the shared server reaches every job
    assert "OMP_NUM_THREADS=4 torchrun --standalone --nproc_per_node=8" in res.stdout  # 32 CPUs over 8 ranks
    # the paper config replaces the embedded one: none of its test limits reaches a paper-scale job
    assert "lm-eval --checkpoint" in res.stdout and "--max-docs" not in res.stdout
    assert "--test-examples 128" not in res.stdout
    assert _jobs(res.stdout)["train"] == 13 + 3 + 4 + 6 + 4  # models + the four ablation tables
    # every train job requests its projected runtime from config/costs/paper.json (docs/costs.md), capped at the
    # config's 2 days: the cheap models ask for hours, the exact per-token Muon ones hit the cap
    blocks = [b for b in res.stdout.split("\n\n") if re.search(r"^rule train:", b, re.M)]  # one job's listing each
    runtimes = {
        re.search(r"output: \S+/runs/(\w+/[\w.~\-]+)/checkpoints", b)[1]: int(re.search(r"runtime=(\d+)", b)[1])
        for b in blocks
    }
    runtimes = {run: minutes for run, minutes in runtimes.items() if run.startswith("pretrain/")}
    assert len(runtimes) == 13
    assert runtimes["pretrain/transformer_pp"] < 2880 and runtimes["pretrain/atlas"] == 2880


def test_the_one_node_workflow_profile_overrides_only_what_one_cpu_node_lacks(tmp_path):
    # what tests/cluster/test_snakemake_slurm.py submits, planned without Slurm
    env = {"ATLAS_SLURM_ACCOUNT": "acct", "ATLAS_SLURM_PARTITION": "atlas"}
    local = ["--workflow-profile", "profiles/cluster-local"]
    test_config = ["--configfile", ".test/config/config.yaml", "--replace-workflow-config"]
    res = _snakemake("--profile", "cluster", *local, *test_config, "-n", "ablation_window", env=env, results=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    out = res.stdout + res.stderr
    assert "Using profiles cluster and workflow specific profile profiles/cluster-local" in out
    trains = re.findall(r"rule train:.*?resources: ([^\n]+)", res.stdout, re.S)
    assert len(trains) == 2 and all("gpu=0, cpus_per_task=1" in r and "slurm_partition=atlas" in r for r in trains)
    assert "config/paper.yaml" not in out and '"steps": 2' in res.stdout  # the command line's config, not the profile's


@pytest.mark.parametrize("axis,cells", [("window", 6), ("gated_mlp", 3), ("poly_degree", 4), ("optimizer", 4)])
def test_each_ablation_has_its_own_target(axis, cells, tmp_path):
    res = _snakemake("-n", f"ablation_{axis}", results=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    jobs = _jobs(res.stdout)
    assert jobs["train"] == cells and jobs["prepare_data"] == 1
    runs = set(re.findall(r"study=(\w+), run=", res.stdout))
    assert runs == {f"ablation_{axis}"}


def _train_configs(*targets: str, results: Path, config: tuple[str, ...] = (), env: dict | None = None):
    """run name -> the TrainConfig each `train` job of `targets` reads: the `train_config` jobs run (seconds, no
    training, no data) and their `train.json` files are read back."""
    where = ("--config", *config) if config else ()
    res = _snakemake("--cores", "1", *targets, "--until", "train_config", *where, env=env,
                     results=None if config else results)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    assert "rule train:" not in res.stdout, "only the configs are written"
    files = sorted((Path(ROOT) / results / "results" / "runs").glob("*/*/train.json"))
    return {cfg["tracking"]["run_name"]: cfg for cfg in (json.loads(f.read_text()) for f in files)}


def test_ablation_cells_resolve_to_memory_overrides(tmp_path):
    configs = _train_configs("ablation_optimizer", results=tmp_path)
    memory = configs["optimizer~muon__ns_steps~3"]["model"]["overrides"]["memory"]
    assert memory["expansion"] == 2 and memory["ns_steps"] == 3 and memory["optimizer"] == "muon"  # base + cell
    assert {cfg["tracking"]["experiment"] for cfg in configs.values()} == {"ablation_optimizer"}


@pytest.mark.parametrize(
    "axis,run,overrides",
    [
        ("poly_degree", "feature_map~identity", {"memory": {"feature_map": "identity"}}),
        ("gated_mlp", "memory~linear", {"memory": {"memory": "linear"}}),
        ("window", "window~4__use_gamma_gate~false", {"memory": {"window": 4}, "use_gamma_gate": False}),
    ],
    ids=["w/o polynomial map", "linear memory", "c=4 w/o gamma"],
)
def test_new_ablation_cells_are_jobs_with_their_overrides(axis, run, overrides, tmp_path):
    config = _train_configs(f"ablation_{axis}", results=tmp_path)[run]
    model = config["model"]
    assert model["preset"] == "atlas"
    # the run carries its row's settings as tags (the report reads them there, never from the run name)
    row = dict(part.split("~") for part in run.split("__"))
    assert config["tracking"]["tags"] == {f"atlas.cell.{k}": v for k, v in row.items()}
    for key, value in overrides.items():  # merged into the base overrides (num_memory_heads, expansion ...)
        assert model["overrides"][key] == ({**model["overrides"][key], **value} if key == "memory" else value)
    assert model["overrides"]["num_memory_heads"] == 8 and model["overrides"]["memory"]["expansion"] == 2


def test_a_bad_override_key_fails_the_dag_build_naming_file_row_and_key(tmp_path):
    table = tmp_path / "window.tsv"
    table.write_text("window\tuse_gama_gate\n1\t\n4\tfalse\n")
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    cfg["ablations"]["tables"]["window"] = str(table)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    res = _snakemake("-n", "--configfile", str(tmp_path / "config.yaml"), results=tmp_path)
    assert res.returncode != 0
    assert f"{table}, row 2 (line 3): key 'use_gama_gate' is not a model setting" in res.stdout + res.stderr


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        # a value the memory op refuses, in a table row: named by file, row, run and the package's own message
        ("table", "{table}, row 2 (line 3) (run window~0): train.model (atlas, tiny): memory: window"),
        # an option `atlas eval niah` does not have
        ("niah", "config evaluation.niah: atlas eval niah: not an option of `atlas eval niah`: 'samplez'"),
        # a model override that is no AtlasConfig field
        ("model", "config models.atlas: train.model.overrides.memory.windw: not a MemoryConfig field"),
        # a task the registry does not have, and a registered task in the wrong section
        ("task", "config evaluation: 'niha' is not a task of this section (its tasks: ppl, lm_eval, niah, babilong)"),
        ("section", "config synthetic: 'ppl' is not a task of this section (its tasks: mqar, mad, learnability)"),
    ],
)
def test_bad_values_and_options_fail_the_dag_build_through_the_package(edit, message, tmp_path):
    table = tmp_path / "window.tsv"
    table.write_text("window\n1\n0\n")
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    if edit == "table":
        cfg["ablations"]["tables"]["window"] = str(table)
    elif edit == "niah":
        cfg["evaluation"]["niah"]["samplez"] = cfg["evaluation"]["niah"].pop("samples")
    elif edit == "task":
        cfg["evaluation"]["tasks"] = ["ppl", "niha"]
    elif edit == "section":
        cfg["synthetic"]["ppl"] = {"lengths": [64]}
    else:
        cfg["models"]["atlas"]["overrides"] = {"memory": {"windw": 4}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    res = _snakemake("-n", "--configfile", str(tmp_path / "config.yaml"), results=tmp_path)
    assert res.returncode != 0
    assert message.format(table=table) in res.stdout + res.stderr


def test_ablation_table_rows_become_cells(tmp_path):
    fields = ablation_tables.ModelFields.from_classes()
    table = tmp_path / "t.tsv"
    table.write_text("window\teta_max\n1\t\n2\t0.5\nglobal\t\n")
    cells = ablation_tables.read_table(table, fields)
    assert cells == {
        "window~1": {"memory": {"window": 1}},
        "window~2__eta_max~0.5": {"memory": {"window": 2}, "eta_max": 0.5},
        "window~global": {"memory": {"window": "global"}},
    }
    assert cells.values["window~2__eta_max~0.5"] == {"window": "2", "eta_max": "0.5"}  # the row as written
    for text, message in [
        ("window\n1\n1\n", "row 2 (line 3): the same cell as line 2"),
        ("window\tvocab_size\n1\t8\n", "row 1 (line 2): key 'vocab_size' is not a model setting"),
        ("window\tpreset\n1\t\n", "header (line 1): key 'preset'"),
        ("window\n1 2\n", "row 1 (line 2): key 'window': value '1 2'"),
    ]:
        table.write_text(text)
        with pytest.raises(ablation_tables.AblationTableError, match=re.escape(message)):
            ablation_tables.read_table(table, fields)


def test_the_model_fields_are_the_classes_own():
    """A cell may name a MemoryConfig field or a field AtlasConfig declares, never a Hugging Face base field."""
    from atlas_model import AtlasConfig

    read = ablation_tables.ModelFields.from_classes()
    assert {"window", "poly_degree", "memory", "muon_polynomial"} <= read.memory
    assert {"eta_max", "use_gamma_gate", "memory_backend"} <= read.model
    assert not read.model & {"output_attentions", "return_dict", "dtype"}  # the base class's
    assert "window" in read.memory and read.section("window") == "memory"
    assert read.model == set(AtlasConfig.__annotations__) - ablation_tables.RESERVED


def test_the_report_lists_the_current_ablation_cells(tmp_path):
    res = _snakemake("-n", "-p", "report", results=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    cells = json.loads(re.search(r"--ablation-cells '(\{.*\})' >", res.stdout)[1])
    assert list(cells["window"]) == ["window~1", "window~2", "window~4", "window~4__use_gamma_gate~false", "window~8",
                                     "window~16"]  # fmt: skip
    assert cells["window"]["window~4__use_gamma_gate~false"] == {"window": "4", "use_gamma_gate": "false"}
    assert cells["poly_degree"]["feature_map~identity"] == {"feature_map": "identity"}
    assert cells["gated_mlp"]["memory~linear"] == {"memory": "linear"}


@pytest.mark.parametrize(
    "extra,options",
    [
        ([], "--dim 64 --seq-len 1024 --rank 8 --window 128"),
        (
            ["--configfile", "config/paper.yaml", "--replace-workflow-config"],
            "--dim 256 --seq-len 2048 --rank 16 --window 512 --memories 2x1,2x4,3x1,3x4 --optimizer adam --lr 0.0003 "
            "--repeats 5 --device cuda",
        ),
    ],
    ids=["embedded", "paper"],
)
def test_learnability_is_one_tracked_synthetic_job_before_the_report(extra, options, tmp_path):
    res = _snakemake("report", "-n", "-p", *extra, results=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    assert _jobs(res.stdout)["standalone"] == 1  # the registry's one task of kind standalone
    command = next(line for line in res.stdout.splitlines() if " eval learnability " in line)
    assert f"--out {tmp_path}/results/synthetic/learnability/result.json" in command
    assert "--experiment eval_learnability" in command and "--tracking-uri sqlite:///" in command
    assert command.endswith(f"--no-progress {options} > {tmp_path}/results/logs/synthetic/learnability.log 2>&1")


def test_tracking_uri_params_hold_no_absolute_path(tmp_path):
    """Every job gets the tracking URI as the relative SQLite path under `results` (the job resolves it in its
    working directory), and no TrainConfig carries one: moving the checkout changes none of these parameters."""
    results = os.path.relpath(tmp_path, ROOT)  # relative, and still outside the checkout
    res = _snakemake(
        "-n", "-p", "--config", f"results={results}/results", f"report_dir={results}/reports",
        env={"MLFLOW_TRACKING_URI": ""},  # unset: the default store, not the caller's server
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    uris = []
    for line in res.stdout.splitlines():
        if "--tracking-uri" in line:
            words = shlex.split(line)
            uris.append(words[words.index("--tracking-uri") + 1])
    jobs = _jobs(res.stdout)
    tracked = ("train", "ablation_parent", "evaluate", "synthetic", "standalone", "report")
    assert len(uris) == sum(jobs.get(rule, 0) for rule in tracked) and jobs["train"] >= 8
    assert set(uris) == {f"sqlite:///{results}/results/mlflow.db"}
    # nor do the TrainConfigs (data, parent record) or the ablation tables name the checkout's absolute path
    configs = _train_configs(
        config=(f"results={results}/results", f"report_dir={results}/reports"), results=Path(results),
        env={"MLFLOW_TRACKING_URI": ""},
    )  # fmt: skip
    assert configs and not any(str(ROOT) in json.dumps(cfg) for cfg in configs.values())
    assert configs["window~4"]["data"]["path"] == f"{results}/results/data/embedded"
    tables = [line for line in res.stdout.splitlines() if " track parent " in line and "--artifact" in line]
    assert tables and not any(
        str(ROOT) in shlex.split(line)[shlex.split(line).index("--artifact") + 1] for line in tables
    )
    assert all("uri" not in cfg["tracking"] for cfg in configs.values())


def test_the_study_target_plans_a_pilot_then_one_job_per_arm_and_seed(tmp_path):
    res = _snakemake("-n", "-p", "study", results=tmp_path)  # committed verdicts, fresh results: the whole study
    assert res.returncode == 0, res.stderr[-3000:]
    jobs = _jobs(res.stdout)
    assert jobs["study_pilot"] == 1 and jobs["study_parent"] == 1 and jobs["study_report"] == 1
    # config/study/claims.yaml at cpu scale: 8 + 4 MQAR arms x 3 seeds, 5 learnability, 2 x 17 learnability v2, the
    # MQAR v2 protocols (96) and the MAD v2 ones (2 protocols x 3 arms x 6 seeds), MQAR extrapolation (3 x 6)
    assert jobs["study_job"] == 225  # every registered CPU job (docs/study.md)
    assert "study pilot --claims config/study/claims.yaml --scale cpu" in res.stdout
    assert "--budget-minutes 450 --cores 2" in res.stdout
    assert re.search(r"study run .* --job mqar_cpu/atlas_c1/seed11 --parent \S+/study/parent\.json", res.stdout)


def test_the_gpu_panel_config_plans_lm_jobs_on_the_prepared_corpus(tmp_path):
    res = _snakemake("-n", "-p", "-F", "study", "--configfile", "config/study-gpu.yaml", results=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    jobs = _jobs(res.stdout)
    assert jobs["study_job"] == 115 and jobs["prepare_data"] == 1  # lm_gpu_v2 20 x 5, lm_gpu_hybrid_v2 3 x 5
    assert "--budget-minutes 8 --cores 1" in res.stdout and "--drop-by-priority" in res.stdout
    assert re.search(r"--job lm_gpu_v2/dot/seed24 .* --data \S+/data/embedded", res.stdout)


def test_the_cost_table_rule_counts_every_train_job_and_sets_their_runtimes(tmp_path):
    """`snakemake cost_table` on the embedded config (tiny models: seconds), then `runtime: cost` reads it: every
    train job requests its projected runtime (10 minutes, the floor, at these sizes); a model changed after the
    table was written stops the DAG build naming the job and the command (docs/costs.md). One ablation table of the
    four: every model and an ablation's cells, at 10 jobs instead of 24 (each Atlas cell is a second of counting)."""
    table = tmp_path / "costs.json"
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    cfg["resources"]["train"]["cost"] = {"table": str(table)}
    cfg["ablations"]["tables"] = {"gated_mlp": cfg["ablations"]["tables"]["gated_mlp"]}
    config = ["--configfile", str(tmp_path / "config.yaml"), "--replace-workflow-config"]  # not merged into the default
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    res = _snakemake("--cores", "1", "cost_table", *config, results=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    rows = json.loads(table.read_text())["jobs"]
    planned = _snakemake("-n", *config, results=tmp_path)
    assert len(rows) == _jobs(planned.stdout)["train"] >= 8
    assert (tmp_path / "results" / "costs" / "train.md").read_text().count("| pretrain/") == len(cfg["models"])

    cfg["resources"]["train"]["runtime"] = "cost"
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    res = _snakemake("-n", *config, results=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    runtimes = re.findall(r"rule train:.*?runtime=(\d+)", res.stdout, re.S)
    assert len(runtimes) == len(rows) and set(runtimes) == {"10"}

    cfg["models"]["omeganet"]["overrides"] = {"memory": {"window": 2}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    res = _snakemake("-n", *config, results=tmp_path)
    assert res.returncode != 0
    assert "the row of job 'pretrain/omeganet' is stale" in res.stdout + res.stderr
    assert "snakemake cost_table" in res.stdout + res.stderr
