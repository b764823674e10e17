"""`atlas train --config <file> --out <dir> [--resume auto|never|<checkpoint>] [--set key=value ...]
[--tracking-uri URI]`."""

from __future__ import annotations

import argparse
import logging

import yaml

from atlas_experiments.configio import load_mapping
from atlas_experiments.schema import ConfigError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="pretrain a model (torchrun-aware)", description=__doc__)
    p.add_argument("--config", required=True, help="YAML/JSON TrainConfig (may name a `recipe`)")
    p.add_argument("--out", required=True, help="run directory: checkpoints, metrics.jsonl, train.log")
    p.add_argument("--resume", default="auto", help="'auto' (newest checkpoint in --out), 'never', or a path")
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key, e.g. optim.lr=1e-3"
    )
    p.add_argument(
        "--tracking-uri",
        default=None,
        help="MLflow URI, replacing the config's tracking.uri (default: $MLFLOW_TRACKING_URI or "
        "sqlite:///<dir of --out>/mlflow.db)",
    )
    p.set_defaults(handler=run)


def apply_overrides(data: dict, assignments: list[str]) -> dict:
    for item in assignments:
        if "=" not in item:
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE")
        key, raw = item.split("=", 1)
        node = data
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set {key}: {part} is not a mapping")
        node[parts[-1]] = yaml.safe_load(raw)
    return data


def run(args: argparse.Namespace) -> int:
    from atlas_experiments.train import TrainConfig
    from atlas_experiments.train.loop import train

    data = apply_overrides(load_mapping(args.config), args.set)
    if args.tracking_uri:
        tracking = data.setdefault("tracking", {})
        if not isinstance(tracking, dict):
            raise ConfigError(f"tracking: expected a mapping, got {tracking!r}")
        tracking["uri"] = args.tracking_uri
    cfg = TrainConfig.from_dict(data)
    result = train(cfg, args.out, resume=args.resume)
    logging.getLogger("atlas.train").info(
        "done: %d steps, %d tokens, final loss %s, skipped %d", result.steps, result.tokens, result.final_loss,
        result.skipped_steps,
    )  # fmt: skip
    print(f"run directory: {result.out_dir}")
    return 0
