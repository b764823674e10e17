"""`prepare`: corpus -> tokenizer -> packed shards -> manifest, idempotently.

Order of writes in the output directory: the old manifest is removed first, then the tokenizer
files, shards and document offsets (each atomically), and manifest.json last. `prepare.log` is
appended to on every run. An flock on `.prepare.lock` serialises concurrent prepares of one directory
on one host, so N ranks calling `prepare` build it once and the rest find it done.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

from atlas_data._io import TMP_SUFFIX
from atlas_data._schema import MappingConfig, bounded
from atlas_data.errors import ConfigError, DataIntegrityError
from atlas_data.manifest import MANIFEST_FILE, Manifest, load_manifest, write_manifest
from atlas_data.shards import ShardConfig, dtype_for_vocab, write_shards
from atlas_data.sources import SourceConfig, document_count_hint, iter_documents
from atlas_data.splits import TRAIN, SplitAssigner, SplitConfig
from atlas_data.tokenizer import TokenizerConfig, build_tokenizer

log = logging.getLogger(__name__)

LOG_FILE = "prepare.log"
LOCK_FILE = ".prepare.lock"
_OWN_FILES = re.compile(r"(train|validation)_(\d{6}\.bin|doc_offsets\.npy)")


@dataclass(frozen=True)
class DataConfig(MappingConfig):
    """Everything that determines a prepared dataset (the defaults are config/data/embedded.yaml).

    `workers` only sets how many processes tokenize; it never changes the output and is left out
    of the manifest.
    """

    WHERE = "data"

    source: SourceConfig = field(default_factory=SourceConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    split: SplitConfig = field(default_factory=SplitConfig)
    shards: ShardConfig = field(default_factory=ShardConfig)
    seed: int = bounded(1234, min=0)
    workers: int = bounded(1, min=1)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.source.max_tokens is not None and self.tokenizer.is_bpe:
            raise ConfigError(
                "data.source.max_tokens: needs a pretrained tokenizer (tokenizer.spec 'hf:<name>'): a BPE is "
                "trained before any token is counted; cap a BPE corpus with max_documents instead"
            )

    def identity(self) -> dict[str, Any]:
        """The keys that determine the output: `to_dict()` without `workers`."""
        out = self.to_dict()
        del out["workers"]
        return out


def prepare(cfg: DataConfig, out_dir: str | Path, *, force: bool = False, progress: bool = True) -> Manifest:
    """Prepare `cfg` into `out_dir` and return the manifest.

    If `out_dir` already holds a complete dataset prepared from the same config (workers aside),
    it is reused as is unless `force`. Otherwise everything the previous run wrote is replaced.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with _exclusive(out / LOCK_FILE), _log_to(out / LOG_FILE):
        log.info("prepare %s -> %s (workers=%d)", cfg.source.describe(), out, cfg.workers)
        if not force:
            existing, reason = _reusable(out, cfg)
            if existing is not None:
                log.info(
                    "%s already holds a complete dataset prepared from this config; skipping (--force rebuilds)",
                    out,
                )
                return existing
            if reason:
                log.info("rebuilding: %s", reason)
        _remove_outputs(out)
        start = time.perf_counter()

        tok = build_tokenizer(cfg.tokenizer, _training_texts(cfg), out)
        log.info(
            "tokenizer %s: vocab_size=%d eos=%r (id %d) sha256=%s",
            tok.spec,
            tok.vocab_size,
            tok.eos_token,
            tok.eos_id,
            tok.sha256,
        )
        splits = write_shards(
            iter_documents(cfg.source),
            out,
            tokenizer_file=out / tok.file,
            eos_id=tok.eos_id,
            vocab_size=tok.vocab_size,
            shard_tokens=cfg.shards.shard_tokens,
            validation_fraction=cfg.split.validation_fraction,
            seed=cfg.seed,
            workers=cfg.workers,
            max_tokens=cfg.source.max_tokens,
            progress=progress,
            total_documents=document_count_hint(cfg.source),
        )
        for name, info in splits.items():
            log.info("%s: %d tokens, %d documents, %d shards", name, info.n_tokens, info.n_documents, len(info.shards))
        manifest = Manifest(
            config=cfg.identity(),
            tokenizer=tok,
            dtype=dtype_for_vocab(tok.vocab_size).name,
            splits=splits,
            versions={p: version(p) for p in ("atlas-data", "tokenizers")},
            root=out,
        )
        write_manifest(manifest, out)
        log.info("prepared %s in %.1f s", out / MANIFEST_FILE, time.perf_counter() - start)
    return manifest


def _training_texts(cfg: DataConfig) -> Iterator[str]:
    """The training split's texts, assigned exactly as `write_shards` will assign them."""
    assigner: SplitAssigner[str] = SplitAssigner(cfg.split.validation_fraction, cfg.seed)
    for doc in iter_documents(cfg.source):
        yield from (text for text, split in assigner.push(doc.text, doc.group) if split == TRAIN)
    yield from (text for text, split in assigner.finish() if split == TRAIN)


def _reusable(out: Path, cfg: DataConfig) -> tuple[Manifest | None, str]:
    """(the existing manifest if it is complete and from `cfg`, else None; why not)."""
    if not (out / MANIFEST_FILE).is_file():
        return None, ""
    try:
        # Sizes, not checksums: the skip must stay cheap on a large dataset; `atlas data verify` hashes.
        existing = load_manifest(out, verify=False)
    except (DataIntegrityError, FileNotFoundError) as exc:
        return None, f"existing dataset is incomplete ({exc})"
    if existing.config != cfg.identity():
        return None, "the existing dataset was prepared from a different config"
    return existing, ""


def _remove_outputs(out: Path) -> None:
    """Delete what a previous run left: manifest first, then its files, then stray temp files."""
    owned: set[str] = set()
    manifest_path = out / MANIFEST_FILE
    if manifest_path.is_file():
        # An unreadable manifest owns nothing by name; the name patterns below still catch our files.
        with contextlib.suppress(ValueError, AttributeError):
            owned = set(Manifest.from_dict(json.loads(manifest_path.read_text()), out).files())
        manifest_path.unlink()
    for path in out.iterdir():
        stray_tmp = path.name.startswith(".") and path.name.endswith(TMP_SUFFIX)
        if path.name in owned or _OWN_FILES.fullmatch(path.name) or stray_tmp:
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()


@contextlib.contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    """One prepare per directory at a time (e.g. every DDP rank calling it): the others wait, then skip."""
    with open(lock_path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@contextlib.contextmanager
def _log_to(path: Path) -> Iterator[None]:
    """Copy this package's log records (INFO and up) to `path` for the duration."""
    handler = logging.FileHandler(path, mode="a", encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("atlas_data")
    old_level = logger.level
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        yield
    except BaseException:
        logger.exception("prepare failed")
        raise
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
        handler.close()
