"""Shared fixtures: a small synthetic corpus and a prepared dataset built from it.

Tests never touch the network: the Hugging Face libraries run offline with their caches in a
throwaway directory (set here, before anything imports `datasets`, which reads HF_HOME on import).
"""

from __future__ import annotations

import atexit
import os
import random
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

_HF_HOME = tempfile.mkdtemp(prefix="atlas-data-tests-hf-")
atexit.register(shutil.rmtree, _HF_HOME, True)
os.environ.update(
    HF_HUB_OFFLINE="1",
    HF_DATASETS_OFFLINE="1",
    HF_HOME=_HF_HOME,
    HF_DATASETS_CACHE=os.path.join(_HF_HOME, "datasets"),
)

from atlas_data import DataConfig, ShardConfig, SourceConfig, SplitConfig, TokenizerConfig, prepare  # noqa: E402

_SENTENCE = (
    "the river runs past a stone mill where seven millers grind barley wheat and rye while children "
    "count boats carrying salt north toward cold harbours under grey rain and bright sun"
)
_WORDS = _SENTENCE.split()


def make_texts(n: int, seed: int = 0, min_words: int = 8, max_words: int = 60) -> list[str]:
    """`n` distinct pseudo-sentences (document i starts with 'doc i'), reproducible from `seed`."""
    rng = random.Random(seed)
    return [
        f"doc {i}: " + " ".join(rng.choice(_WORDS) for _ in range(rng.randint(min_words, max_words))) + "."
        for i in range(n)
    ]


@pytest.fixture
def texts() -> list[str]:
    return make_texts(60)


@pytest.fixture
def write_txt(tmp_path: Path) -> Callable[[list[str]], str]:
    """Write one .txt file per text under tmp_path/corpus; returns a glob matching them in order."""

    def write(docs: list[str]) -> str:
        root = tmp_path / "corpus"
        root.mkdir(exist_ok=True)
        for i, text in enumerate(docs):
            (root / f"{i:04d}.txt").write_text(text, encoding="utf-8")
        return str(root / "*.txt")

    return write


def small_config(pattern: str, **overrides: object) -> DataConfig:
    """A DataConfig that prepares in well under a second: local txt, BPE 300, 512-token shards."""
    fields: dict[str, object] = {
        "source": SourceConfig(kind="local", paths=(pattern,)),
        "tokenizer": TokenizerConfig(vocab_size=300, min_frequency=1),
        "split": SplitConfig(validation_fraction=0.2),
        "shards": ShardConfig(shard_tokens=512),
        "seed": 0,
        "workers": 1,
    }
    fields.update(overrides)
    return DataConfig(**fields)  # type: ignore[arg-type]


@pytest.fixture
def small_cfg(write_txt: Callable[[list[str]], str], texts: list[str]) -> DataConfig:
    return small_config(write_txt(texts))


@pytest.fixture(scope="session")
def prepared_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A prepared dataset shared by read-only tests (copy it before modifying anything)."""
    root = tmp_path_factory.mktemp("prepared")
    (root / "corpus").mkdir()
    for i, text in enumerate(make_texts(120, seed=1)):
        (root / "corpus" / f"{i:04d}.txt").write_text(text, encoding="utf-8")
    prepare(small_config(str(root / "corpus" / "*.txt")), root / "data", progress=False)
    return root / "data"


@pytest.fixture
def prepared_copy(prepared_dir: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "data"
    shutil.copytree(prepared_dir, dst)
    return dst


@pytest.fixture
def config_for() -> Callable[..., DataConfig]:
    """`small_config(pattern, **overrides)` for tests that build their own corpus."""
    return small_config


@pytest.fixture
def texts_of() -> Callable[..., list[str]]:
    """`make_texts(n, seed=0, ...)`."""
    return make_texts
