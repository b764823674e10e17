"""The cost model (docs/costs.md): counts against formulas and against real tensors, the projection's arithmetic,
the table's reuse and refusals, and the CLI."""

from __future__ import annotations

import json
import math

import pytest

from atlas_experiments.cli import main
from atlas_experiments.cost import GpuAssumptions, JobSpec, count_step, project, read_table
from atlas_experiments.cost import table as cost_table
from atlas_model import AtlasConfig


def test_transformer_layer_gemm_flops_match_the_formula():
    """One Transformer++ block: 6 FLOPs per weight per token (q, k, v, o and the SwiGLU MLP) plus causal
    attention, 2 T d forward per token for a flash kernel and 2.5 times that backward."""
    cfg = AtlasConfig.from_preset("transformer_pp", "tiny")
    T, d, inner = 33, cfg.hidden_size, cfg.intermediate_size
    step = count_step(cfg, T)
    weights = 4 * d * d + 3 * d * inner
    attention = 2 * T * d * 3.5
    assert step.layer.gemm_flops / T == pytest.approx(6 * weights + attention, rel=1e-12)
    # the rest is the LM head: 6 V d per token
    assert step.rest.gemm_flops / T == pytest.approx(6 * cfg.vocab_size * d, rel=1e-12)


@pytest.mark.parametrize("preset", ["omeganet", "titans_lmm", "gated_deltanet", "atlas_mag"])
def test_meta_count_equals_the_count_on_real_tensors(preset):
    """Counting on `meta` dispatches the same GEMMs as a CPU run with values (Atlas's Muon form is fixed, since
    "auto" picks by device)."""
    overrides = {"memory": {"ns_form": "lowrank", "ns_eval": "matmul"}} if preset.startswith("atlas") else {}
    cfg = AtlasConfig.from_preset(preset, "tiny", **overrides)
    meta, cpu = count_step(cfg, 13), count_step(cfg, 13, device="cpu")
    assert meta.layer.gemm_flops == cpu.layer.gemm_flops > 0
    assert meta.rest.gemm_flops == cpu.rest.gemm_flops
    # the CPU-only finite checks of the gates are the only calls a real CPU run adds, a few per memory call: at most
    # 2% of the kernels, or 12 where the chunks are batched and few kernels remain (Gated DeltaNet: 12 of 461)
    extra = cpu.layer.kernels - meta.layer.kernels
    assert 0 <= extra <= max(0.02 * meta.layer.kernels, 12)


def test_layers_add_up():
    cfg = AtlasConfig.from_preset("omeganet", "tiny")
    one, two = count_step(cfg, 9), count_step(cfg, 9, layers=2)
    assert two.layer.gemm_flops == pytest.approx(2 * one.layer.gemm_flops, rel=1e-12)
    assert two.rest.gemm_flops == one.rest.gemm_flops


def test_atlas_costs_more_than_its_gd_twin():
    atlas = count_step(AtlasConfig.from_preset("atlas", "tiny"), 16)
    twin = count_step(AtlasConfig.from_preset("atlas", "tiny", memory={"optimizer": "gd"}), 16)
    assert atlas.layer.flops > 3 * twin.layer.flops


def test_float64_gemms_are_tallied_apart():
    """Atlas's factored Muon path builds its polynomials in float64 (muon_float64, the default): those GEMM FLOPs
    are counted apart, most of the layer's; in float32 (muon_float64=False) and without Muon there are none."""
    muon = {"ns_form": "lowrank", "ns_eval": "matmul"}
    atlas = count_step(AtlasConfig.from_preset("atlas", "tiny", memory=muon), 16).layer
    f32 = count_step(AtlasConfig.from_preset("atlas", "tiny", memory={**muon, "muon_float64": False}), 16).layer
    omega = count_step(AtlasConfig.from_preset("omeganet", "tiny"), 16).layer
    assert 0.5 * atlas.gemm_flops < atlas.gemm_flops_fp64 < atlas.gemm_flops
    assert f32.gemm_flops_fp64 == omega.gemm_flops_fp64 == 0
    assert f32.gemm_flops == pytest.approx(atlas.gemm_flops, rel=1e-12)  # same products, other precision


def test_float64_flops_are_projected_at_the_float64_peak():
    from atlas_experiments.cost.count import Tally
    from atlas_experiments.cost.projection import compute_seconds_per_token

    gpu = GpuAssumptions(peak_tflops=100.0, fp64_tflops=10.0, mfu=0.5)
    tally = Tally(gemm_flops=3e12, gemm_flops_fp64=1e12, pointwise_ops=1e12)
    assert compute_seconds_per_token(tally, gpu) == pytest.approx((3e12 / 100e12 + 1e12 / 10e12) / 0.5)
    with pytest.raises(ValueError, match="cost.fp64_tflops"):
        GpuAssumptions(fp64_tflops=0.0)


def _job(**kw) -> JobSpec:
    data = {"recipe": "paper-340M", "model": {"preset": "transformer_pp", "size": "340M"}, "data": {"seq_len": 64}}
    data.update(kw)
    return JobSpec.from_train_config("pretrain/transformer_pp", data)


def test_job_spec_from_train_config():
    job = _job()
    assert (job.preset, job.size, job.seq_len, job.tokens) == ("transformer_pp", "340M", 64, 15_000_000_000)
    steps = JobSpec.from_train_config(
        "x", {"model": {"preset": "omeganet"}, "data": {"seq_len": 8}, "steps": 10, "global_batch_tokens": 64}
    )
    assert steps.tokens == 640 and steps.size == "tiny"
    assert steps.key() != _job().key() and _job().key() == _job().key()
    with pytest.raises(ValueError, match="x: train.data.seq_len"):
        JobSpec.from_train_config("x", {"model": {"preset": "omeganet"}, "data": {}, "tokens": 5})
    with pytest.raises(ValueError, match="train.tokens, or train.steps"):
        JobSpec.from_train_config("x", {"model": {"preset": "omeganet"}, "data": {"seq_len": 8}})
    with pytest.raises(ValueError, match="train.model.preset"):
        JobSpec.from_train_config("x", {"model": {}, "data": {"seq_len": 8}, "tokens": 5})


def test_projection_arithmetic():
    job = JobSpec("j", "transformer_pp", "tiny", {}, 16, 10**12)
    gpu = GpuAssumptions(peak_tflops=100.0, mfu=0.5, hbm_tbps=1.0, margin=2.0)
    cost = project(job, gpu)
    cfg = AtlasConfig.from_preset("transformer_pp", "tiny")
    assert cost.per_token.flops == pytest.approx(
        cost.layer_per_token.flops * cfg.num_hidden_layers + count_step(cfg, 16).rest.flops / 16
    )
    assert cost.compute_hours == pytest.approx(10**12 * cost.per_token.flops / 50e12 / 3600)
    assert cost.bandwidth_hours == pytest.approx(10**12 * cost.per_token.bytes_unfused / 1e12 / 3600)
    assert cost.gpu_hours == max(cost.compute_hours, cost.bandwidth_hours)
    assert cost.runtime_minutes(4, gpu) == max(10, math.ceil(cost.gpu_hours / 4 * 60 * 2))
    for bad in ({"mfu": 0.0}, {"mfu": 1.5}, {"peak_tflops": -1.0}, {"margin": 0.5}):
        with pytest.raises(ValueError, match="cost."):
            GpuAssumptions(**bad)


def test_table_reuses_matching_rows_and_refuses_foreign_files(tmp_path, monkeypatch):
    out = tmp_path / "costs.json"
    gpu = GpuAssumptions()
    jobs = [JobSpec("a", "omeganet", "tiny", {}, 16, 10**9), JobSpec("b", "omeganet", "tiny", {}, 16, 10**9)]
    first = cost_table.cost_jobs(jobs, gpu, out, gpus=2, progress=False)
    rows = read_table(out)
    assert set(rows) == {"a", "b"} and rows["a"]["key"] == rows["b"]["key"]
    assert rows["a"]["runtime_minutes"] == first[0].runtime_minutes(2, gpu)

    def refuse(*a, **k):
        raise AssertionError("counted again")

    monkeypatch.setattr("atlas_experiments.cost.projection.count_step", refuse)
    again = cost_table.cost_jobs(jobs, GpuAssumptions(mfu=0.2), out, gpus=2, progress=False)
    assert again[0].per_token == first[0].per_token
    assert again[0].compute_hours == pytest.approx(2 * first[0].compute_hours)
    with pytest.raises(AssertionError, match="counted again"):
        cost_table.cost_jobs([JobSpec("c", "omeganet", "tiny", {}, 32, 10**9)], gpu, out, gpus=2, progress=False)

    # a table of the format before float64 GEMMs were counted: refused by name, and counted again over
    old = json.loads(out.read_text())
    old["format"] = "atlas-cost-table/1"
    out.write_text(json.dumps(old))
    with pytest.raises(cost_table.OldCostTable, match="atlas-cost-table/1"):
        read_table(out)
    with pytest.raises(AssertionError, match="counted again"):
        cost_table.cost_jobs(jobs, gpu, out, gpus=2, progress=False)

    foreign = tmp_path / "foreign.json"
    foreign.write_text(json.dumps({"jobs": []}))
    with pytest.raises(ValueError, match=str(foreign)):
        read_table(foreign)
    foreign.write_text("{")
    with pytest.raises(ValueError, match="not a cost table"):
        read_table(foreign)


def test_cli_one_config_and_a_job_file(tmp_path, capsys):
    config = tmp_path / "train.json"
    config.write_text(json.dumps({"model": {"preset": "gated_deltanet"}, "data": {"seq_len": 16}, "tokens": 10**9}))
    assert main(["cost", "--config", str(config), "--gpus", "2"]) == 0
    assert "| train | gated_deltanet | tiny | 16 |" in capsys.readouterr().out
    jobs = tmp_path / "jobs.json"
    jobs.write_text(json.dumps({"pretrain/x": json.loads(config.read_text())}))
    out, md = tmp_path / "c.json", tmp_path / "c.md"
    assert main(["cost", "--jobs", str(jobs), "--out", str(out), "--markdown", str(md)]) == 0
    assert "pretrain/x" in read_table(out) and "| pretrain/x |" in md.read_text()
    jobs.write_text(json.dumps({"pretrain/x": 3}))
    assert main(["cost", "--jobs", str(jobs)]) == 2
    assert "job 'pretrain/x' is not a TrainConfig mapping" in capsys.readouterr().err
