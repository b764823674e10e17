"""Golden loss sequences: short, fixed CPU runs of `atlas train` whose per-step losses guard the models and the
training loop against silent numerical changes (`tests/test_golden.py` compares them).

Each golden file (`packages/atlas-experiments/tests/golden/<case>_losses.json`) stores the losses together with
what produced them: the train config (data path replaced by a placeholder), the resolved model config, and a
fingerprint of the prepared data. The test fails on any difference in those before it trains, so a deliberate
change (a new preset default, another recipe) surfaces as "regenerate", not as an unexplained loss mismatch.

Regenerate after a deliberate change, from a source checkout, and commit the files with the change:

    python -m atlas_experiments.train.golden --update              # every case
    python -m atlas_experiments.train.golden --update atlas_tiny   # some cases
    python -m atlas_experiments.train.golden                       # check only: prints the diff, exit 1 if off

`--update` refuses to run when `CI` is set: a golden rewritten where it is checked would always pass. It prints
the old and new losses of every changed step, so the change can be judged before committing.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import random
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from atlas_experiments._io import write_text_atomic

# src/atlas_experiments/train/golden.py -> packages/atlas-experiments/tests/golden (source checkouts only)
GOLDEN_DIR = Path(__file__).resolve().parents[3] / "tests" / "golden"
RTOL = 1e-4
DATA_PLACEHOLDER = "<golden data: atlas_experiments.train.golden.prepare_data>"
UPDATE_COMMAND = "python -m atlas_experiments.train.golden --update"

WORDS = (
    "the river runs past a stone mill where seven millers grind barley wheat and rye while children count "
    "boats carrying salt north toward cold harbours under grey rain and bright sun"
).split()

BASE: dict[str, Any] = {
    "model": {"preset": "transformer_pp", "size": "tiny"},
    "data": {"seq_len": 32},
    "global_batch_tokens": 256,
    "micro_batch": 4,
    "steps": 8,
    "seed": 3,
    "optim": {"lr": 3e-3, "warmup_steps": 2},
    # "auto" would mean GPU + bf16 on a CUDA host, where losses match neither across machines nor to RTOL
    "device": "cpu",
    "precision": "fp32",
    "tracking": {"enabled": False},
}

# The memory models take one micro-batch of 2 x 32 tokens per step. Atlas' Muon inner loop costs ~1 s a step on
# one CPU thread, so it runs 5 steps (every path: chunked inner updates, gates, the outer AdamW); OmegaNet and
# Gated DeltaNet are ~20x cheaper and run 20, long enough for the outer optimizer's choices (e.g. which
# parameters decay) to move their losses well past RTOL.
_MEMORY_RUN = {"micro_batch": 2, "global_batch_tokens": 64}
CASES: dict[str, dict[str, Any]] = {
    "transformer_pp_tiny": {"global_batch_tokens": 128, "steps": 50},
    "atlas_tiny": {"model": {"preset": "atlas"}, **_MEMORY_RUN, "steps": 5},
    "omeganet_tiny": {"model": {"preset": "omeganet"}, **_MEMORY_RUN, "steps": 20},
    "gated_deltanet_tiny": {"model": {"preset": "gated_deltanet"}, **_MEMORY_RUN, "steps": 20},
}


def golden_path(name: str, root: Path = GOLDEN_DIR) -> Path:
    return root / f"{name}_losses.json"


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`base` with `over` applied; nested mappings are merged one level deep."""
    out = dict(base)
    for key, value in over.items():
        out[key] = {**base[key], **value} if isinstance(value, dict) and isinstance(base.get(key), dict) else value
    return out


def prepare_data(root: Path) -> Path:
    """160 pseudo-sentence documents, BPE vocab 300, prepared under `root`; returns the data directory.

    Also the `prepared_data` fixture of the atlas-experiments tests, so both always train on the same tokens.
    """
    from atlas_data import DataConfig, ShardConfig, SourceConfig, SplitConfig, TokenizerConfig, prepare

    corpus = root / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    for i in range(160):
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 80)))
        (corpus / f"{i:04d}.txt").write_text(f"doc {i}: {words}.", encoding="utf-8")
    cfg = DataConfig(
        source=SourceConfig(kind="local", paths=(str(corpus / "*.txt"),)),
        tokenizer=TokenizerConfig(vocab_size=300, min_frequency=1),
        split=SplitConfig(validation_fraction=0.1),
        shards=ShardConfig(shard_tokens=2048),
        seed=0,
        workers=1,
    )
    prepare(cfg, root / "data", progress=False)
    return root / "data"


def case_mapping(name: str, data: Path) -> dict[str, Any]:
    """The TrainConfig mapping of golden case `name` on the prepared data `data`."""
    mapping = merge(BASE, CASES[name])
    mapping["data"] = {**mapping["data"], "path": str(data)}
    return mapping


def describe(name: str, data: Path) -> dict[str, Any]:
    """What a golden file records besides the losses: train config, model config, data fingerprint."""
    import atlas_model
    from atlas_data.manifest import load_manifest
    from atlas_experiments.train.config import TrainConfig

    cfg = TrainConfig.from_dict(case_mapping(name, data))
    train = cfg.to_dict()
    train["data"]["path"] = DATA_PLACEHOLDER
    manifest = load_manifest(str(data), verify=False)
    model = atlas_model.AtlasConfig.from_preset(
        cfg.model.preset, size=cfg.model.size, vocab_size=manifest.tokenizer.vocab_size, **cfg.model.overrides
    )
    own = atlas_model.AtlasConfig.__annotations__
    # transformers adds its own bookkeeping keys (and its version) to to_dict(); only the model's fields matter
    model_cfg = {k: v for k, v in model.to_dict().items() if k in own}
    return json.loads(json.dumps({"config": train, "model_config": model_cfg, "data_sha256": _fingerprint(data)}))


def _fingerprint(data: Path) -> str:
    """sha256 over the tokenizer and train-shard checksums of the manifest (the tokens a golden run sees)."""
    manifest = json.loads((data / "manifest.json").read_text())
    parts = [manifest["tokenizer"]["sha256"]] + [s["sha256"] for s in manifest["splits"]["train"]["shards"]]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """torch on one intra-op thread inside the block: fixes the reduction order, and on 2 shared cores a second
    thread mostly waits on the first."""
    from atlas_experiments.evaluation.synthetic_models import torch_threads

    with torch_threads(1):
        yield


def run_case(name: str, data: Path, out: Path) -> list[float]:
    """Train golden case `name` into `out` (CPU, fp32, one thread); the per-step losses."""
    from atlas_experiments.train.config import TrainConfig
    from atlas_experiments.train.loop import train
    from atlas_experiments.train.metrics import read_metrics

    with one_thread():
        train(TrainConfig.from_dict(case_mapping(name, data)), out, resume="never")
    return [r["loss"] for r in read_metrics(out / "metrics.jsonl")]


def config_mismatch(name: str, stored: dict[str, Any], current: dict[str, Any]) -> str | None:
    """None when the stored golden was made from the current config, else a message naming the differences."""
    lines = []
    for section in ("config", "model_config", "data_sha256"):
        old, new = _flatten(stored.get(section, "<absent>")), _flatten(current[section])
        # a key the golden lacks is an option added since: its default must keep the old behaviour (the losses
        # check that), and failing on it would make every new option regenerate every golden
        for key in sorted(old):
            if old[key] != new.get(key, "<absent>"):
                where = f"{section}.{key}" if key else section
                lines.append(f"  {where}: golden {old[key]!r}, now {new.get(key, '<absent>')!r}")
    if not lines:
        return None
    return (
        f"golden {name}: the stored config is not the current one:\n" + "\n".join(lines) + "\n"
        f"if the change is deliberate, regenerate with `{UPDATE_COMMAND} {name}` (not in CI) and commit the file"
    )


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: value}


def loss_mismatch(old: list[float], new: list[float], rtol: float = RTOL) -> list[int]:
    """0-based steps whose losses differ by more than `rtol` (relative), plus any step present in one only."""
    bad = [i for i, (a, b) in enumerate(zip(old, new)) if not math.isclose(a, b, rel_tol=rtol, abs_tol=0.0)]
    return bad + list(range(min(len(old), len(new)), max(len(old), len(new))))


def loss_diff(old: list[float] | None, new: list[float], rtol: float = RTOL) -> str:
    """A table of old vs new loss for every step that differs (all steps when there is no old file)."""
    if old is None:
        return "\n".join(f"  step {i + 1:3d}: new {b:.8f}" for i, b in enumerate(new))
    rows = []
    for i in loss_mismatch(old, new, rtol):
        a = old[i] if i < len(old) else None
        b = new[i] if i < len(new) else None
        rel = f"{abs(a - b) / abs(a):.2e}" if a is not None and b is not None and a else "-"
        rows.append(f"  step {i + 1:3d}: old {a!s:>20}  new {b!s:>20}  rel {rel}")
    if not rows:
        exact = sum(a == b for a, b in zip(old, new))
        return f"  all {len(new)} losses within rtol {rtol:g} ({exact} bit-identical)"
    return "\n".join(rows)


def _load(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.is_file() else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m atlas_experiments.train.golden",
        description="Check or regenerate the golden loss files of the atlas-experiments tests.",
    )
    parser.add_argument("cases", nargs="*", help=f"cases to run (default all: {', '.join(CASES)})")
    parser.add_argument("--update", action="store_true", help="rewrite the golden files (refused when CI is set)")
    parser.add_argument("--dir", type=Path, default=GOLDEN_DIR, help="golden directory (default: %(default)s)")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.cases) - set(CASES))
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}; expected some of {', '.join(CASES)}")
    if args.update and os.environ.get("CI"):
        print("refusing to --update golden files with CI set: regenerate locally and commit them", file=sys.stderr)
        return 2
    if args.update and not args.dir.is_dir():
        parser.error(f"--dir {args.dir} does not exist (run from a source checkout, or pass --dir)")
    failed = 0
    with tempfile.TemporaryDirectory(prefix="atlas-golden-") as tmp:
        data = prepare_data(Path(tmp))
        for name in args.cases or list(CASES):
            path = golden_path(name, args.dir)
            stored = _load(path)
            current = describe(name, data)
            losses = run_case(name, data, Path(tmp) / name)
            old = stored["losses"] if stored else None
            print(f"{name}: {path}")
            mismatch = config_mismatch(name, stored, current) if stored else "  no golden file yet"
            if mismatch:
                print(mismatch)
            print(loss_diff(old, losses))
            changed = bool(mismatch) or old is None or bool(loss_mismatch(old, losses))
            if args.update and changed:
                write_text_atomic(path, json.dumps({**current, "rtol": RTOL, "losses": losses}, indent=1) + "\n")
                print(f"  wrote {path}")
            elif args.update:
                # within tolerance under the same config: the old bits stay, so reruns leave git clean
                print("  unchanged")
            elif changed:
                failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
