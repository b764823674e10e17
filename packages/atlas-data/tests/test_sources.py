"""Corpus sources: local txt/jsonl/parquet, hf builders on local files (offline), the embedded Bible."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from atlas_data import (
    CorpusFormatError,
    EmptyCorpusError,
    MissingDataFileError,
    SourceConfig,
    iter_documents,
)


def _texts(cfg: SourceConfig) -> list[str]:
    return [d.text for d in iter_documents(cfg)]


def _write_jsonl(path: Path, records: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def test_txt_one_document_per_file_in_sorted_glob_order(tmp_path: Path) -> None:
    for name, text in [("b.txt", "second\n"), ("a.txt", "  first  "), ("c.txt", " \n\t"), ("d.md", "x")]:
        (tmp_path / name).write_text(text, encoding="utf-8")
    cfg = SourceConfig(kind="local", paths=(str(tmp_path / "*.txt"),))
    assert _texts(cfg) == ["first", "second"]  # whitespace-only c.txt skipped, d.md not matched


def test_txt_split_on_blank_lines(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("one\nstill one\n\n  \ntwo\n\n\nthree", encoding="utf-8")
    cfg = SourceConfig(kind="local", paths=(str(tmp_path / "a.txt"),), txt_split="blank_lines")
    assert _texts(cfg) == ["one\nstill one", "two", "three"]


def test_jsonl_and_parquet_with_a_configured_field(tmp_path: Path) -> None:
    _write_jsonl(tmp_path / "a.jsonl", [{"body": "j0", "id": 0}, {"body": "j1", "id": 1}])
    pq.write_table(pa.table({"body": ["p0", None, "p1"], "n": [0, 1, 2]}), tmp_path / "b.parquet")
    cfg = SourceConfig(kind="local", paths=(str(tmp_path / "a.jsonl"), str(tmp_path / "b.parquet")), text_field="body")
    docs = list(iter_documents(cfg))
    assert [d.text for d in docs] == ["j0", "j1", "p0", "p1"]
    assert len({d.group for d in docs}) == 4  # one split group per document


def test_max_documents_caps_the_stream(tmp_path: Path) -> None:
    _write_jsonl(tmp_path / "a.jsonl", [{"text": f"t{i}"} for i in range(10)])
    cfg = SourceConfig(kind="local", paths=(str(tmp_path / "a.jsonl"),), max_documents=3)
    assert _texts(cfg) == ["t0", "t1", "t2"]


def test_missing_file_and_unmatched_glob_are_named(tmp_path: Path) -> None:
    with pytest.raises(MissingDataFileError, match="file not found: .*nope.txt"):
        _texts(SourceConfig(kind="local", paths=(str(tmp_path / "nope.txt"),)))
    with pytest.raises(MissingDataFileError, match=r"no files match '.*\*\.jsonl'"):
        _texts(SourceConfig(kind="local", paths=(str(tmp_path / "*.jsonl"),)))


def test_empty_corpus_names_the_source(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("\n\n   \n", encoding="utf-8")
    with pytest.raises(EmptyCorpusError, match=r"source local \['.*a\.txt'\] yielded no documents"):
        _texts(SourceConfig(kind="local", paths=(str(tmp_path / "a.txt"),)))


def test_malformed_records_are_located(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text('{"text": "ok"}\n{"text": 3}\n', encoding="utf-8")
    with pytest.raises(CorpusFormatError, match=r"a\.jsonl:2: expected an object with a string field 'text'"):
        _texts(SourceConfig(kind="local", paths=(str(tmp_path / "a.jsonl"),)))
    pq.write_table(pa.table({"content": ["x"]}), tmp_path / "b.parquet")
    with pytest.raises(CorpusFormatError, match=r"b\.parquet: no column 'text' \(columns: content\)"):
        _texts(SourceConfig(kind="local", paths=(str(tmp_path / "b.parquet"),)))


@pytest.mark.parametrize("streaming", [False, True])
def test_hf_source_on_local_jsonl_and_parquet_offline(tmp_path: Path, streaming: bool) -> None:
    _write_jsonl(tmp_path / "a.jsonl", [{"text": f"json {i}", "id": i} for i in range(5)])
    pq.write_table(pa.table({"content": [f"parquet {i}" for i in range(4)]}), tmp_path / "b.parquet")

    jsonl = SourceConfig(kind="hf", path="json", data_files=(str(tmp_path / "a.jsonl"),), streaming=streaming)
    assert _texts(jsonl) == [f"json {i}" for i in range(5)]
    parquet = SourceConfig(
        kind="hf",
        path="parquet",
        data_files=(str(tmp_path / "b.parquet"),),
        text_field="content",
        streaming=streaming,
        max_documents=2,
    )
    assert _texts(parquet) == ["parquet 0", "parquet 1"]


def test_hf_source_missing_text_field_is_named(tmp_path: Path) -> None:
    _write_jsonl(tmp_path / "a.jsonl", [{"body": "x"}])
    cfg = SourceConfig(kind="hf", path="json", data_files=(str(tmp_path / "a.jsonl"),))
    with pytest.raises(CorpusFormatError, match="no field 'text' \\(fields: body\\)"):
        _texts(cfg)


def test_embedded_bible_one_document_per_chapter() -> None:
    kjv = list(iter_documents(SourceConfig(versions=("kjv",))))
    asv = list(iter_documents(SourceConfig(versions=("asv",))))
    assert len(kjv) == len(asv) == 1189
    assert kjv[0].text.startswith("Genesis 1\nIn the beginning God created the heaven and the earth.")
    assert kjv[-1].text.startswith("Revelation 22\n") and kjv[-1].text.endswith("Amen.")
    assert asv[0].text.startswith("Genesis 1\nIn the beginning God created the heavens and the earth.")
    # A chapter's two translations share a split group, so they can never straddle train/validation.
    assert [d.group for d in kjv] == [d.group for d in asv]
    assert len({d.group for d in kjv}) == 1189
    both = list(iter_documents(SourceConfig(versions=("kjv", "asv"), max_documents=1190)))
    assert both[1188] == kjv[-1] and both[1189] == asv[0]
