"""S-NIAH generator: determinism, the needle really sits at the stated depth, lengths counted in tokens."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from atlas_data.synthetic import niah

LENGTHS = (512, 768)
DEPTHS = (0.0, 0.3, 0.5, 1.0)


@pytest.fixture(scope="module")
def tok(prepared_dir: Path) -> niah.TextTokenizer:
    return niah.TextTokenizer(prepared_dir / "tokenizer.json")


@pytest.fixture(scope="module")
def texts(prepared_dir: Path) -> list[str]:
    return niah.load_split_texts(prepared_dir, "train")


@pytest.fixture(scope="module")
def samples(tok, texts) -> dict[str, list[niah.NiahSample]]:
    return {
        task: niah.generate_niah(
            task, tok, lengths=LENGTHS, depths=DEPTHS, samples_per_cell=2, seed=7, haystack_texts=texts
        )
        for task in niah.NIAH_TASKS
    }


def test_split_texts_decode_the_prepared_documents(prepared_dir: Path, texts: list[str]):
    assert texts and all(t.startswith("doc ") and t.endswith(".") for t in texts)
    from atlas_data import load_manifest

    assert len(texts) == load_manifest(prepared_dir).split("train").n_documents
    offsets = load_manifest(prepared_dir).doc_offsets("train")
    capped = niah.load_split_texts(prepared_dir, "train", max_tokens=int(offsets[3]) + 1)
    assert capped == texts[:4] and niah.load_split_texts(prepared_dir, "train", max_documents=2) == texts[:2]


def test_generation_is_deterministic(tok, texts, samples):
    again = niah.generate_niah(
        "niah_single_2", tok, lengths=LENGTHS, depths=DEPTHS, samples_per_cell=2, seed=7, haystack_texts=texts
    )
    assert [s.to_dict() for s in again] == [s.to_dict() for s in samples["niah_single_2"]]
    other = niah.generate_niah(
        "niah_single_2", tok, lengths=LENGTHS, depths=DEPTHS, samples_per_cell=2, seed=8, haystack_texts=texts
    )
    assert [s.answer for s in other] != [s.answer for s in samples["niah_single_2"]]
    # a cell does not depend on which other cells were generated
    alone = niah.generate_niah(
        "niah_single_2", tok, lengths=[768], depths=[0.5], samples_per_cell=2, seed=7, haystack_texts=texts
    )
    cell = [s for s in samples["niah_single_2"] if s.length == 768 and s.depth == 0.5]
    assert [s.to_dict() for s in alone] == [s.to_dict() for s in cell]


def test_tokenizer_adapters_agree(prepared_dir: Path, tok):
    from atlas_data import load_tokenizer

    hf = niah.TextTokenizer(load_tokenizer(prepared_dir))
    text = "One of the special magic numbers for calm-river is: 1234567. The grass is green."
    assert hf.encode(text) == tok.encode(text)
    assert hf.encode_offsets(text) == tok.encode_offsets(text)
    assert hf.count_many([text, " x"]) == tok.count_many([text, " x"])


@pytest.mark.parametrize("task", list(niah.NIAH_TASKS))
def test_needle_is_in_the_context_at_the_stated_depth(task, tok, samples):
    haystack_unit = 0
    for s in samples[task]:
        p = s.prompt
        # the needle and its answer are really there, once, where the sample says
        assert p[s.needle_char_start : s.needle_char_start + len(s.needle)] == s.needle
        assert s.needle == f"One of the special magic {niah.NIAH_TASKS[task].value_type} for {s.key} is: {s.answer}."
        assert p.count(s.answer) == 1 and p.count(s.key) == 3  # needle, question, answer prefix
        assert p.endswith(s.gen_prefix) and s.gen_prefix.endswith(f"for {s.key} mentioned in the provided text is")
        assert p == f"{s.input} {s.gen_prefix}"
        # the token index points at the needle
        ids, offsets = tok.encode_offsets(p)
        assert offsets[s.needle_token_start][0] <= s.needle_char_start < offsets[s.needle_token_start][1]
        assert s.answer in tok.decode(ids[s.needle_token_start : s.needle_token_start + len(tok.encode(s.needle)) + 2])
        # depth: the share of haystack tokens before the needle, measured independently of the generator
        head = p.index("\n") + 1
        tail = p.index("\nWhat is the special magic")
        before = tok.count(p[head : s.needle_char_start].rstrip())
        after = tok.count(p[s.needle_char_start + len(s.needle) : tail].strip())
        measured = before / (before + after)
        assert measured == pytest.approx(s.depth_actual, abs=3 / (before + after))
        unit = max(tok.count_many([" " + u for u in niah.split_sentences(p[head:tail])]))
        haystack_unit = max(haystack_unit, unit)
        assert abs(s.depth_actual - s.depth) <= (unit + 2) / (before + after)
        if s.depth == 0.0:
            assert p[head : head + len(s.needle)] == s.needle
        if s.depth == 1.0:
            assert p[s.needle_char_start + len(s.needle) :].startswith("\nWhat is the special magic")
    assert haystack_unit > 0


@pytest.mark.parametrize("task", list(niah.NIAH_TASKS))
def test_lengths_are_counted_in_tokens(task, tok, texts, samples):
    hay = niah.Haystack.repeat(tok) if task == "niah_single_1" else niah.Haystack.from_texts(texts, tok)
    for s in samples[task]:
        assert s.prompt_tokens == len(tok.encode(s.prompt))
        assert s.prompt_tokens + s.tokens_to_generate <= s.length
        # filled to within one haystack sentence (+ a few boundary tokens) of the target
        assert s.length - (s.prompt_tokens + s.tokens_to_generate) <= max(hay.counts) + 8
        assert s.context_tokens > tok.count(s.needle)  # there is haystack around the needle


def test_task_formats(samples, texts):
    for s in samples["niah_single_1"]:
        context = s.input.split("\n")[1]
        filler = set(niah.split_sentences(niah.REPEAT_FILLER))
        assert set(niah.split_sentences(context.replace(s.needle, ""))) <= filler
        assert s.haystack == "repeat" and re.fullmatch(r"\d{7}", s.answer)
    for s in samples["niah_single_2"]:
        assert s.haystack == "essay" and re.fullmatch(r"\d{7}", s.answer)
        context = s.input.split("\n")[1].replace(s.needle, "")
        assert "The grass is green" not in s.prompt and set(context.split()) <= {w for t in texts for w in t.split()}
    for s in samples["niah_single_3"]:
        assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", s.answer)
        assert "special magic uuid for" in s.prompt
    for task in samples.values():
        for s in task:
            assert len(s.distractors) == 9 and s.answer not in s.distractors
            assert not any(d in s.prompt for d in s.distractors)
            assert s.candidates[0] == s.answer


def test_aliases_errors_and_scoring(tok, texts):
    assert niah.resolve_task("pk").name == "niah_single_1" and niah.resolve_task("S-NIAH-W").name == "niah_single_3"
    with pytest.raises(ValueError, match="unknown S-NIAH task"):
        niah.resolve_task("niah_multikey_1")
    with pytest.raises(ValueError, match="use a longer length"):
        niah.generate_niah("pk", tok, lengths=[64], depths=[0.5], samples_per_cell=1)
    with pytest.raises(ValueError, match="haystack_texts"):
        niah.generate_niah("niah_single_2", tok, lengths=[512], depths=[0.5], samples_per_cell=1)
    with pytest.raises(ValueError, match="depth"):
        niah.generate_niah("pk", tok, lengths=[512], depths=[1.5], samples_per_cell=1)
    assert niah.string_match(" 1234567.\nblah", "1234567") and not niah.string_match("123456", "1234567")


def test_short_haystack_wraps_and_says_so(tok):
    s = niah.generate_niah(
        "niah_single_2", tok, lengths=[640], depths=[0.5], samples_per_cell=1, haystack_texts=["A tiny text. Two."]
    )[0]
    assert s.haystack_wrapped and s.prompt_tokens + s.tokens_to_generate <= 640


def test_jsonl_roundtrip(tmp_path, samples):
    import json

    path = niah.write_jsonl(samples["niah_single_1"], tmp_path / "s.jsonl")
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert rows == [s.to_dict() for s in samples["niah_single_1"]]
