"""The model and tokenizer an evaluation runs on, and the options every `atlas eval` LM command shares.

A model is either a trained checkpoint (`--checkpoint <run>/checkpoints/final`, the Hugging Face directory that
`atlas train` writes) or an untrained preset (`--preset atlas --size tiny`, random init from `--seed`). The
tokenizer and the held-out text always come from a prepared data directory (`--data`), since checkpoints do not
hold a tokenizer. When `--data` is left out for a checkpoint of an `atlas train` run, the run's `config.json`
(two levels up) names the data directory and the training context (`data.seq_len`).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from atlas_experiments.devices import resolve_device
from atlas_experiments.evaluation.results import add_output_options

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class LoadedModel:
    model: torch.nn.Module
    tokenizer: Any  # transformers fast tokenizer over the prepared tokenizer.json
    name: str  # checkpoint path, or "preset:<name>/<size>"
    data_dir: Path
    device: torch.device
    dtype: str
    train_seq_len: int | None  # the training context when known (run config, or --train-len)
    checkpoint: Path | None = None
    preset: str | None = None
    size: str | None = None
    run_config: dict[str, Any] | None = None
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def short_name(self) -> str:
        """For figure titles: `<run>/<checkpoint>` or the preset."""
        if self.checkpoint is None:
            return self.name
        parts = self.checkpoint.parts
        return "/".join(parts[-3::2]) if len(parts) >= 3 and parts[-2] == "checkpoints" else parts[-1]

    @property
    def trained(self) -> bool:
        return self.checkpoint is not None

    def describe(self) -> dict[str, Any]:
        return {
            "model": self.name,
            "checkpoint": str(self.checkpoint) if self.checkpoint else None,
            "preset": self.preset,
            "size": self.size,
            "data": str(self.data_dir),
            "train_seq_len": self.train_seq_len,
            "device": str(self.device),
            "dtype": self.dtype,
            **self.info,
        }


def find_run_config(checkpoint: Path) -> dict[str, Any] | None:
    """The `atlas train` config of `<run>/checkpoints/<name>` (None when the checkpoint is not in a run dir)."""
    candidate = Path(checkpoint).resolve().parent.parent / "config.json"
    if not candidate.is_file():
        return None
    try:
        data = json.loads(candidate.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) and "data" in data and "model" in data else None


def load_model(
    *,
    checkpoint: str | Path | None = None,
    data: str | Path | None = None,
    preset: str | None = None,
    size: str = "tiny",
    device: str | None = "auto",
    dtype: str = "float32",
    seed: int = 0,
    train_len: int | None = None,
) -> LoadedModel:
    """Load a checkpoint (or build an untrained preset) and the tokenizer of the prepared data."""
    from transformers import AutoModelForCausalLM

    import atlas_model  # registers the model type with the Auto classes
    from atlas_data import load_manifest, load_tokenizer

    if (checkpoint is None) == (preset is None):
        raise ValueError("give exactly one of --checkpoint <dir> and --preset <name>")
    if dtype not in _DTYPES:
        raise ValueError(f"--dtype {dtype!r}: choose from {', '.join(_DTYPES)}")
    dev = resolve_device(device)
    run_config = None
    if checkpoint is not None:
        checkpoint = Path(checkpoint).resolve()
        if not (checkpoint / "config.json").is_file():
            raise FileNotFoundError(f"--checkpoint {checkpoint}: no Hugging Face model there (config.json missing)")
        run_config = find_run_config(checkpoint)
        if data is None and run_config is not None:
            data = run_config["data"].get("path")
        if train_len is None and run_config is not None:
            train_len = run_config["data"].get("seq_len")
    if data is None:
        raise ValueError("--data <prepared dir> is needed (the tokenizer and the held-out text live there)")
    data_dir = Path(data).resolve()
    if not (data_dir / "manifest.json").is_file():
        raise FileNotFoundError(f"--data {data_dir}: not a prepared dataset (manifest.json missing)")
    manifest = load_manifest(data_dir, verify=False)
    tokenizer = load_tokenizer(data_dir)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token

    torch.manual_seed(seed)
    if checkpoint is not None:
        model = AutoModelForCausalLM.from_pretrained(str(checkpoint), dtype=_DTYPES[dtype])
        name = str(checkpoint.resolve())
    else:
        config = atlas_model.AtlasConfig.from_preset(preset, size=size, vocab_size=manifest.tokenizer.vocab_size)
        model = AutoModelForCausalLM.from_config(config).to(_DTYPES[dtype])
        name = f"preset:{preset}/{size}"
    vocab = model.config.vocab_size
    if vocab < manifest.tokenizer.vocab_size:
        raise ValueError(
            f"the model's vocabulary ({vocab}) is smaller than the tokenizer's ({manifest.tokenizer.vocab_size}) "
            f"in {data_dir}: wrong --data for this checkpoint?"
        )
    model.to(dev).eval()
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        name=name,
        data_dir=data_dir,
        device=dev,
        dtype=dtype,
        train_seq_len=int(train_len) if train_len else None,
        checkpoint=checkpoint,
        preset=preset,
        size=size if preset else None,
        run_config=run_config,
        info={"parameters": sum(p.numel() for p in model.parameters()), "model_type": model.config.model_type},
    )


# ------------------------------------------------------------------------------------------------ CLI plumbing


def parse_ints(text: str, what: str) -> list[int]:
    try:
        values = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{what}: expected comma-separated integers, got {text!r}") from None
    if not values or any(v < 0 for v in values):
        raise ValueError(f"{what}: expected non-negative integers, got {text!r}")
    return values


def parse_floats(text: str, what: str) -> list[float]:
    try:
        values = [float(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{what}: expected comma-separated numbers, got {text!r}") from None
    if not values:
        raise ValueError(f"{what}: expected at least one number")
    return values


def add_model_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model")
    g.add_argument("--checkpoint", help="a Hugging Face checkpoint dir, e.g. <run>/checkpoints/final")
    g.add_argument("--preset", help="instead of --checkpoint: an untrained atlas_model preset (random init)")
    g.add_argument("--size", default="tiny", help="size of --preset (default tiny)")
    g.add_argument("--data", help="prepared data dir: tokenizer + held-out text (default: the run's data)")
    g.add_argument("--train-len", type=int, help="training context in tokens (default: from the run config)")
    g.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda, cuda:1 ...")
    g.add_argument("--dtype", default="float32", choices=sorted(_DTYPES), help="model dtype (default float32)")
    g.add_argument("--seed", type=int, default=0, help="seeds the preset init and the generated samples")
    add_output_options(p)


def model_from_args(args: argparse.Namespace) -> LoadedModel:
    return load_model(
        checkpoint=args.checkpoint,
        data=args.data,
        preset=args.preset,
        size=args.size,
        device=args.device,
        dtype=args.dtype,
        seed=args.seed,
        train_len=args.train_len,
    )
