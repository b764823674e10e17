"""Tokenizers: train a byte-level BPE on the training split, or take a pretrained one.

`TokenizerConfig.spec` is ``"bpe"`` or ``"hf:<name_or_path>"``. Either way the result is saved
into the output directory with `PreTrainedTokenizerFast.save_pretrained` (``tokenizer.json`` plus
``tokenizer_config.json``), so ``AutoTokenizer.from_pretrained(out_dir)`` loads it; the shard writer
encodes with the ``tokenizers`` backend read from that same ``tokenizer.json``.

BPE training is deterministic: the same texts in the same order and the same config give a
byte-identical ``tokenizer.json`` (``tokenizers`` breaks merge ties by pair order, and word counts
are sums, which do not depend on its thread count).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from atlas_data._io import sha256_file, tmp_path
from atlas_data._schema import bounded, check_keys, check_types, from_mapping, to_mapping
from atlas_data.errors import ConfigError, MissingDataFileError

TOKENIZER_FILE = "tokenizer.json"
DEFAULT_EOS = "<|endoftext|>"
_WHERE = "data.tokenizer"
_BPE_KEYS = ("spec", "vocab_size", "min_frequency", "special_tokens", "eos_token")
_HF_KEYS = ("spec", "eos_token")


@dataclass(frozen=True)
class TokenizerConfig:
    """``spec="bpe"`` trains a byte-level BPE; ``spec="hf:<name_or_path>"`` loads a pretrained one.

    `eos_token` is appended after every document; null means the first special token (bpe) or the
    tokenizer's own EOS (hf). The other keys only apply to bpe.
    """

    spec: str = "bpe"
    vocab_size: int = bounded(8192, min=256)
    min_frequency: int = bounded(2, min=1)
    special_tokens: tuple[str, ...] = (DEFAULT_EOS,)
    eos_token: str | None = None

    def __post_init__(self) -> None:
        check_types(self, _WHERE)
        if self.spec != "bpe" and not (self.spec.startswith("hf:") and len(self.spec) > 3):
            raise ConfigError(f"{_WHERE}.spec: expected 'bpe' or 'hf:<name_or_path>', got {self.spec!r}")
        if self.is_bpe:
            if not self.special_tokens or len(set(self.special_tokens)) != len(self.special_tokens):
                raise ConfigError(f"{_WHERE}.special_tokens: expected a non-empty list of distinct tokens")
            if self.eos_token is not None and self.eos_token not in self.special_tokens:
                raise ConfigError(f"{_WHERE}.eos_token: {self.eos_token!r} must be one of special_tokens")

    @property
    def is_bpe(self) -> bool:
        return self.spec == "bpe"

    @property
    def pretrained_name(self) -> str:
        """The name or path after ``hf:``."""
        return self.spec[3:]

    @classmethod
    def from_dict(cls, data: Any, where: str = _WHERE) -> TokenizerConfig:
        if isinstance(data, dict) and isinstance(data.get("spec"), str) and data["spec"].startswith("hf:"):
            check_keys(data, _HF_KEYS, where, f"not a key of a pretrained tokenizer; allowed: {', '.join(_HF_KEYS)}")
        return from_mapping(cls, data, where)

    def to_dict(self) -> dict[str, Any]:
        full = to_mapping(self)
        return {k: full[k] for k in (_BPE_KEYS if self.is_bpe else _HF_KEYS)}


@dataclass(frozen=True)
class TokenizerInfo:
    """What the manifest records about the saved tokenizer."""

    spec: str
    file: str
    sha256: str
    vocab_size: int
    eos_token: str
    eos_id: int
    files: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return to_mapping(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TokenizerInfo:
        return cls(**{**data, "files": tuple(data["files"])})


def train_bpe(cfg: TokenizerConfig, texts: Iterable[str]) -> Any:
    """Train a byte-level BPE (`tokenizers.Tokenizer`) on `texts`; special tokens get ids 0..k-1."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    # No normalizer: byte-level BPE is lossless, so decode(encode(text)) == text for any UTF-8.
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=cfg.vocab_size,
        min_frequency=cfg.min_frequency,
        special_tokens=list(cfg.special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    return tok


def build_tokenizer(cfg: TokenizerConfig, train_texts: Iterable[str], out_dir: Path) -> TokenizerInfo:
    """Train (bpe, on `train_texts`) or load (hf) the tokenizer and save it into `out_dir`.

    `train_texts` must hold the training split only; it is not consumed for a pretrained tokenizer.
    """
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    if cfg.is_bpe:
        eos = cfg.eos_token or cfg.special_tokens[0]
        hf_tok = PreTrainedTokenizerFast(tokenizer_object=train_bpe(cfg, train_texts), eos_token=eos)
    else:
        try:
            hf_tok = AutoTokenizer.from_pretrained(cfg.pretrained_name)
        except OSError as exc:
            raise MissingDataFileError(
                f"{_WHERE}.spec: cannot load tokenizer {cfg.pretrained_name!r} (offline mode: "
                f"HF_HUB_OFFLINE={os.environ.get('HF_HUB_OFFLINE', '')!r}): {exc}"
            ) from exc
        if not getattr(hf_tok, "is_fast", False):
            raise ConfigError(f"{_WHERE}.spec: {cfg.pretrained_name!r} has no fast (tokenizers) implementation")
        eos = cfg.eos_token or hf_tok.eos_token
        if eos is None:
            raise ConfigError(
                f"{_WHERE}.eos_token: {cfg.pretrained_name!r} defines no EOS token; name one of its tokens"
            )
    eos_id = hf_tok.get_vocab().get(eos)
    if eos_id is None:
        raise ConfigError(f"{_WHERE}.eos_token: {eos!r} is not in the vocabulary of {cfg.spec!r}")

    files = _save_atomically(hf_tok, out_dir)
    vocab_size, _ = read_tokenizer_file(out_dir / TOKENIZER_FILE)
    return TokenizerInfo(
        spec=cfg.spec,
        file=TOKENIZER_FILE,
        sha256=sha256_file(out_dir / TOKENIZER_FILE),
        vocab_size=vocab_size,
        eos_token=eos,
        eos_id=int(eos_id),
        files=files,
    )


def _save_atomically(hf_tok: Any, out_dir: Path) -> tuple[str, ...]:
    """save_pretrained into a scratch dir, then move each file into place with os.replace."""
    scratch = tmp_path(out_dir / "tokenizer")
    shutil.rmtree(scratch, ignore_errors=True)
    try:
        hf_tok.save_pretrained(scratch)
        names = tuple(sorted(p.name for p in scratch.iterdir() if p.is_file()))
        if TOKENIZER_FILE not in names:
            raise ConfigError(f"{_WHERE}.spec: saving the tokenizer wrote no {TOKENIZER_FILE}")
        for name in names:
            os.replace(scratch / name, out_dir / name)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return names


def read_tokenizer_file(path: Path) -> tuple[int, Any]:
    """(vocab size incl. added tokens, `tokenizers.Tokenizer`) of a ``tokenizer.json``."""
    from tokenizers import Tokenizer

    if not path.is_file():
        raise MissingDataFileError(f"tokenizer file not found: {path}")
    tok = Tokenizer.from_file(str(path))
    return tok.get_vocab_size(with_added_tokens=True), tok


def load_tokenizer(data_dir: str | Path) -> Any:
    """The prepared tokenizer as a `transformers` fast tokenizer (for decoding and sampling)."""
    from transformers import PreTrainedTokenizerFast

    path = Path(data_dir) / TOKENIZER_FILE
    if not path.is_file():
        raise MissingDataFileError(f"tokenizer file not found: {path}")
    return PreTrainedTokenizerFast.from_pretrained(str(data_dir))
