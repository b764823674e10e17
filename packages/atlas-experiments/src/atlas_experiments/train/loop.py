"""The training loop of `atlas train`, readable top to bottom.

One optimizer step = grad_accum micro-batches per rank (DDP averages across ranks). Each step appends a record
to metrics.jsonl (rank 0), updates the progress bar and MLflow; validation and checkpoints run at their
intervals. Resume restores model, optimizer, loader position, RNG states and counters from the newest complete
checkpoint, so a run killed at any point continues with exactly the loss sequence of an uninterrupted run (CPU).
A step whose loss or gradient is not finite is skipped (no update) and counted; too many in a row stop the run
with `NonFiniteLossError`, leaving the last good checkpoint as it was.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from atlas_experiments._io import write_json_atomic
from atlas_experiments.plotting import pyplot, save_figure_atomic
from atlas_experiments.train import checkpoint as ckpt
from atlas_experiments.train.config import TrainConfig
from atlas_experiments.train.distributed import DistInfo, all_reduce_mean, barrier, init_distributed, shutdown
from atlas_experiments.train.flops import flops_per_token, measure_peak_flops
from atlas_experiments.train.metrics import MetricsFile, read_metrics
from atlas_experiments.train.model_factory import build_model, full_state_dicts, load_full_state_dicts, unwrap, wrap
from atlas_experiments.train.optim import build_optimizer, lr_at, set_lr

log = logging.getLogger("atlas.train")


class NonFiniteLossError(RuntimeError):
    """Too many consecutive steps with a non-finite loss or gradient."""


@dataclass
class TrainResult:
    out_dir: Path
    steps: int
    tokens: int
    final_loss: float | None
    final_val_loss: float | None
    skipped_steps: int
    run_id: str | None


def lm_loss(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy; x, y: [B, T] (the loader already shifted the targets)."""
    logits = model(input_ids=x).logits
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))


def _autocast(cfg: TrainConfig, device: torch.device):
    bf16 = cfg.precision == "bf16" or (cfg.precision == "auto" and device.type == "cuda")
    if bf16:
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _setup_logging(out: Path, info: DistInfo) -> logging.Handler | None:
    if not info.is_main:
        return None
    handler = logging.FileHandler(out / "train.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger("atlas").addHandler(handler)
    logging.getLogger("atlas").setLevel(logging.INFO)
    return handler


@torch.no_grad()
def evaluate(model, cfg: TrainConfig, manifest, info: DistInfo) -> float:
    """Mean loss over the first `eval_batches` batches of the validation split (stream order, all ranks)."""
    from atlas_data.loader import TokenWindowLoader

    loader = TokenWindowLoader(
        manifest, cfg.data.val_split, cfg.data.seq_len, cfg.micro_batch, seed=0, rank=info.rank,
        world_size=info.world_size, shuffle=False, epochs=1, return_pairs=True,
    )  # fmt: skip
    was_training = model.training
    model.eval()
    total = torch.zeros(2, device=info.device, dtype=torch.float64)
    for i, (x, y) in enumerate(loader):
        if i >= cfg.eval_batches:
            break
        with _autocast(cfg, info.device):
            total[0] += lm_loss(model, x.to(info.device), y.to(info.device)).double() * x.shape[0]
        total[1] += x.shape[0]
    if info.enabled:
        torch.distributed.all_reduce(total)
    model.train(was_training)
    return (total[0] / total[1].clamp(min=1)).item()


@dataclass
class _Counters:
    """Where a run stands: optimizer steps, tokens, skipped steps (and the current run of them in a row)."""

    step: int = 0
    tokens: int = 0
    skipped: int = 0
    consecutive: int = 0


def train(cfg: TrainConfig, out_dir: str | Path, resume: str = "auto", config_dict: dict | None = None) -> TrainResult:
    """Run (or resume) training into `out_dir`. resume: 'auto' (newest checkpoint if any) | 'never' | a path."""
    from atlas_data.loader import TokenWindowLoader
    from atlas_data.manifest import load_manifest
    from atlas_data.tokenizer import load_tokenizer
    from atlas_experiments import tracking

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    info = init_distributed(cfg.device)
    handler = _setup_logging(out, info)
    resolved = config_dict or cfg.to_dict()
    if info.is_main:
        write_json_atomic(out / "config.json", resolved)
    tracker: tracking.Tracker = tracking.Tracker()
    status = "FAILED"
    try:
        ckpt_root = out / "checkpoints"
        finished = _finished_run(ckpt_root / "final", cfg, out) if resume == "auto" else None
        if finished is not None:
            status = "FINISHED"
            return finished
        manifest = load_manifest(cfg.data.path, verify=cfg.data.verify)
        # every checkpoint carries its tokenizer, so a checkpoint directory alone is enough for lm-eval
        tokenizer = load_tokenizer(cfg.data.path) if info.is_main else None
        accum = cfg.grad_accum(info.world_size)
        peak = cfg.peak_flops or measure_peak_flops(info.device)
        torch.manual_seed(cfg.seed)
        model = build_model(cfg.model, manifest.tokenizer.vocab_size).to(info.device)
        fpt = flops_per_token(model, cfg.data.seq_len)
        model = wrap(model, info, cfg.distributed)
        optimizer = build_optimizer(model, cfg.optim)
        loader = TokenWindowLoader(
            manifest, cfg.data.train_split, cfg.data.seq_len, cfg.micro_batch, seed=cfg.seed, rank=info.rank,
            world_size=info.world_size, return_pairs=True,
        )  # fmt: skip
        counters = _Counters()
        start = _resume(resume, ckpt_root, cfg, info, model, optimizer, loader, counters)

        metrics = MetricsFile(out / "metrics.jsonl") if info.is_main else None
        if metrics is not None:
            metrics.truncate_after(counters.step)
        if info.is_main and cfg.tracking.enabled:
            tracker = _open_tracker(cfg, resolved, out, info, resumed=start is not None)
        log.info(
            "training %s/%s: %d steps, grad_accum %d, world %d, %.3g FLOPs/token, device %s",
            cfg.model.preset, cfg.model.size, cfg.total_steps, accum, info.world_size, fpt, info.device,
        )  # fmt: skip

        def save(name: str, keep: int | None) -> None:
            model_state, optim_state = full_state_dicts(model, optimizer, cfg.distributed, info)
            if info.is_main:
                trainer_state = {
                    "step": counters.step, "tokens": counters.tokens, "skipped": counters.skipped,
                    "optimizer": optim_state, "loader": loader.state_dict(), "rng": ckpt.rng_state(),
                    "config": resolved,
                }  # fmt: skip
                ckpt.save_checkpoint(
                    ckpt_root, name, unwrap(model), trainer_state, keep, model_state=model_state, tokenizer=tokenizer
                )
            barrier(info)

        batches = iter(loader)
        progress = _progress(cfg.total_steps, counters.step, info)
        model.train()
        last_loss, last_val = None, None
        t_last, tokens_last = time.perf_counter(), counters.tokens
        while counters.step < cfg.total_steps:
            lr = lr_at(counters.step, cfg.optim, cfg.total_steps)
            loss_val, grad_norm = _optimizer_step(model, optimizer, batches, cfg, info, accum, lr, counters, ckpt_root)
            now = time.perf_counter()
            tps = (counters.tokens - tokens_last) / max(now - t_last, 1e-9)
            t_last, tokens_last = now, counters.tokens
            step = counters.step
            record: dict[str, Any] = {
                "step": step, "tokens": counters.tokens, "loss": loss_val, "lr": lr, "grad_norm": grad_norm,
                "tokens_per_s": tps, "mfu": tps * fpt / peak, "skipped_steps": counters.skipped,
            }  # fmt: skip
            if info.device.type == "cuda":
                record["max_memory_gb"] = torch.cuda.max_memory_allocated(info.device) / 2**30
            if cfg.eval_interval and (step % cfg.eval_interval == 0 or step == cfg.total_steps):
                last_val = record["val_loss"] = evaluate(model, cfg, manifest, info)
            last_loss = loss_val
            if metrics is not None:
                metrics.append(record)
                tracker.log_metrics({k: v for k, v in record.items() if k != "step"}, step)
            if progress is not None:
                progress.update(1)
                progress.set_postfix(
                    loss=f"{loss_val:.4f}", tok_s=f"{tps:,.0f}", mfu=f"{record['mfu']:.1%}", refresh=False
                )
            if step % cfg.log_interval == 0:
                log.info("step %d loss %.4f lr %.3g grad_norm %.3f tok/s %.0f", step, loss_val, lr, grad_norm, tps)
            if cfg.checkpoint_interval and step % cfg.checkpoint_interval == 0 and step < cfg.total_steps:
                save(ckpt.step_name(step), cfg.keep_checkpoints)
        if progress is not None:
            progress.close()
        save("final", None)
        if info.is_main:
            if metrics is not None:
                metrics.close()
            _close_run(out, ckpt_root, cfg, tracker)
        status = "FINISHED"
        return TrainResult(out, counters.step, counters.tokens, last_loss, last_val, counters.skipped, tracker.run_id)
    finally:
        tracker.end(status)
        if handler is not None:
            logging.getLogger("atlas").removeHandler(handler)
            handler.close()
        shutdown(info)


def _finished_run(final: Path, cfg: TrainConfig, out: Path) -> TrainResult | None:
    """The result of a run whose final checkpoint already holds every step (nothing to do), else None."""
    if not (final / "COMPLETE").is_file():
        return None
    done = ckpt.load_trainer_state(final)
    if done["step"] < cfg.total_steps:
        return None
    log.info("%s already holds a finished run (step %d); nothing to do", out, done["step"])
    return TrainResult(out, done["step"], done["tokens"], None, None, done["skipped"], None)


def _resume(resume: str, ckpt_root: Path, cfg: TrainConfig, info: DistInfo, model, optimizer, loader,
            counters: _Counters) -> Path | None:  # fmt: skip
    """Restore model, optimizer, loader position, RNG states and counters from the checkpoint `resume` names
    ('auto': the newest complete one, if any; 'never': none); the checkpoint used, or None."""
    start = None if resume == "never" else (Path(resume) if resume != "auto" else ckpt.latest_checkpoint(ckpt_root))
    if start is None:
        return None
    state = ckpt.load_trainer_state(start)
    load_full_state_dicts(model, optimizer, ckpt.load_model_state(start), state["optimizer"], cfg.distributed, info)
    loader.load_state_dict(state["loader"])
    ckpt.set_rng_state(state["rng"])
    counters.step, counters.tokens, counters.skipped = state["step"], state["tokens"], state["skipped"]
    log.info("resumed from %s at step %d", start, counters.step)
    return start


def _open_tracker(cfg: TrainConfig, resolved: dict, out: Path, info: DistInfo, *, resumed: bool):
    """The run's MLflow tracker (resumed runs continue their run and log no params again)."""
    from atlas_experiments import tracking

    tags = {
        **tracking.standard_tags(resolved, info.world_size),
        **cfg.tracking.tags,
        **({tracking.PARENT_TAG: tracking.read_parent(cfg.tracking.parent)} if cfg.tracking.parent else {}),
    }
    tracker = tracking.open_tracker(
        True,
        tracking.resolve_tracking_uri(cfg.tracking.uri, out.parent),
        cfg.tracking.experiment,
        cfg.tracking.run_name or out.name,
        out,
        tags,
        resume=resumed,
    )
    tracker.log_params(tracking.flatten(resolved) if not resumed else {})
    return tracker


def _optimizer_step(model, optimizer, batches, cfg: TrainConfig, info: DistInfo, accum: int, lr: float,
                    counters: _Counters, ckpt_root: Path) -> tuple[float, float]:  # fmt: skip
    """One optimizer step over `accum` micro-batches (DDP syncs on the last); a step whose loss or gradient is not
    finite is skipped and counted, and too many in a row raise `NonFiniteLossError`. Returns (loss, grad norm)."""
    set_lr(optimizer, lr)
    optimizer.zero_grad(set_to_none=True)
    loss_sum = torch.zeros((), device=info.device)
    for micro in range(accum):
        x, y = next(batches)
        sync = micro == accum - 1 or not hasattr(model, "no_sync")
        with contextlib.nullcontext() if sync else model.no_sync(), _autocast(cfg, info.device):
            loss = lm_loss(model, x.to(info.device), y.to(info.device)) / accum
        loss.backward()
        loss_sum += loss.detach()
    loss_val = all_reduce_mean(loss_sum, info).item()
    clip = cfg.optim.grad_clip if cfg.optim.grad_clip > 0 else float("inf")
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip).item()
    if math.isfinite(loss_val) and math.isfinite(grad_norm):
        optimizer.step()
        counters.consecutive = 0
    else:
        counters.skipped += 1
        counters.consecutive += 1
        log.warning(
            "step %d: non-finite loss %s / grad norm %s, update skipped", counters.step + 1, loss_val, grad_norm
        )
        if cfg.max_consecutive_skips and counters.consecutive >= cfg.max_consecutive_skips:
            raise NonFiniteLossError(
                f"{counters.consecutive} consecutive non-finite steps (up to step {counters.step + 1}); the last good "
                f"checkpoint in {ckpt_root} is intact"
            )
    counters.step += 1
    counters.tokens += cfg.global_batch_tokens
    return loss_val, grad_norm


def _close_run(out: Path, ckpt_root: Path, cfg: TrainConfig, tracker) -> None:
    """After the final checkpoint (rank 0): the loss curve, and the run's artifacts and final tag in MLflow."""
    _write_loss_curve(out)
    tracker.log_artifact(out / "config.json")
    if (out / "loss_curve.png").is_file():
        tracker.log_artifact(out / "loss_curve.png")
    tracker.set_tags({"final_checkpoint": str((ckpt_root / "final").resolve())})
    if cfg.tracking.artifact_checkpoint:
        tracker.log_artifact(ckpt_root / "final", "checkpoint")


def _progress(total: int, initial: int, info: DistInfo):
    if not info.is_main:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc="train", unit="step", dynamic_ncols=True)


def _write_loss_curve(out: Path) -> None:
    records = read_metrics(out / "metrics.jsonl")
    if not records:
        return
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([r["tokens"] for r in records], [r["loss"] for r in records], label="train")
    val = [(r["tokens"], r["val_loss"]) for r in records if r.get("val_loss") is not None]
    if val:
        ax.plot(*zip(*val), "o-", label="validation")
    ax.set_xlabel("tokens")
    ax.set_ylabel("loss")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    save_figure_atomic(fig, out / "loss_curve.png")
