"""`atlas data ...`: prepare, verify and inspect packed token datasets (see atlas-data's README).

    atlas data prepare --config config/data/embedded.yaml --out results/data/embedded [--force] [--workers N]
    atlas data verify --dir results/data/embedded
    atlas data info --dir results/data/embedded [--json]

A config file holds the data config at its top level, or under a top-level ``data:`` key (so a
whole experiment config can be passed; its other sections are left to other commands).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path
from typing import Any

from atlas_experiments.configio import load_mapping


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("data", help="prepare, verify and inspect token datasets")
    sub = parser.add_subparsers(dest="data_command", metavar="<subcommand>", required=True)

    prep = sub.add_parser("prepare", help="corpus -> tokenizer -> token shards + manifest.json")
    prep.add_argument("--config", required=True, type=Path, help="YAML/JSON data config")
    prep.add_argument("--out", required=True, type=Path, help="output directory")
    prep.add_argument("--force", action="store_true", help="rebuild even if --out already holds this dataset")
    prep.add_argument("--workers", type=int, help="tokenizer processes (overrides data.workers)")
    prep.add_argument("--no-progress", action="store_true", help="no progress bar")
    prep.set_defaults(handler=_prepare)

    verify = sub.add_parser("verify", help="check every file of a prepared dataset against its manifest")
    verify.add_argument("--dir", required=True, type=Path)
    verify.set_defaults(handler=_verify)

    info = sub.add_parser("info", help="summarise a prepared dataset")
    info.add_argument("--dir", required=True, type=Path)
    info.add_argument("--json", action="store_true", help="print the whole manifest as JSON")
    info.set_defaults(handler=_info)


def read_data_config(path: Path, workers: int | None = None) -> Any:
    """The `DataConfig` in a config file (top level or under ``data:``), `workers` overriding."""
    from atlas_data import DataConfig

    mapping = load_mapping(path)
    section = mapping.get("data", mapping)
    cfg = DataConfig.from_dict(section)
    return cfg if workers is None else dataclasses.replace(cfg, workers=workers)


def _prepare(args: argparse.Namespace) -> int:
    from atlas_data import prepare

    cfg = read_data_config(args.config, args.workers)
    start = time.perf_counter()
    manifest = prepare(cfg, args.out, force=args.force, progress=not args.no_progress)
    print(_summary(manifest))
    print(f"done in {time.perf_counter() - start:.1f} s: {args.out}")
    return 0


def _verify(args: argparse.Namespace) -> int:
    from atlas_data import load_manifest

    manifest = load_manifest(args.dir, verify=True)
    print(f"ok: {len(manifest.files())} files in {args.dir} match {manifest.where}")
    return 0


def _info(args: argparse.Namespace) -> int:
    from atlas_data import load_manifest

    manifest = load_manifest(args.dir, verify=False)
    print(json.dumps(manifest.to_dict(), indent=2) if args.json else _summary(manifest))
    return 0


def _summary(manifest: Any) -> str:
    tok = manifest.tokenizer
    lines = [
        f"source:    {json.dumps(manifest.config['source'])}",
        f"tokenizer: {tok.spec}, vocab {tok.vocab_size}, eos {tok.eos_token!r} = {tok.eos_id}, "
        f"sha256 {tok.sha256[:16]}..., dtype {manifest.dtype}",
        "",
        "| split | documents | tokens | shards |",
        "|---|---:|---:|---:|",
    ]
    for name, info in manifest.splits.items():
        lines.append(f"| {name} | {info.n_documents:,} | {info.n_tokens:,} | {len(info.shards)} |")
    return "\n".join(lines)
