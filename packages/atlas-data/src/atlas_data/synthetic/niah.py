"""Single-needle-in-a-haystack (S-NIAH) samples in the style of RULER's ``niah_single_1/2/3``.

Three tasks (the names of RULER and lm-eval; the paper's S-NIAH-PK / -N / -W):

============== ================= ========================= ====================================
task           paper             haystack                  needle value
============== ================= ========================= ====================================
niah_single_1  S-NIAH-PK         repeated filler sentences a 7-digit number (passkey)
niah_single_2  S-NIAH-N          essay: corpus sentences   a 7-digit number
niah_single_3  S-NIAH-W          essay: corpus sentences   a uuid (RULER's word/uuid variant)
============== ================= ========================= ====================================

A sample is text (RULER's prompt, singular form)::

    A special magic number is hidden within the following text. Make sure to memorize it. I will quiz you
    about the number afterwards.
    <haystack sentences ...> One of the special magic numbers for <key> is: <value>. <... sentences>
    What is the special magic number for <key> mentioned in the provided text? The special magic number for
    <key> mentioned in the provided text is

and the model should continue with ``<value>``; RULER scores a hit when the value appears in the generated text
(case-insensitive). The key is an adjective-noun pair (``"silent-harbour"``) as RULER's ``words`` keys.

Lengths are counted in tokens of the tokenizer passed in: ``prompt_tokens + tokens_to_generate <= length``,
as RULER sizes its samples, and the haystack is filled up to that bound sentence by sentence (a sample falls
short of ``length`` by less than one haystack sentence). The needle sits at a sentence boundary: the one whose
share of the haystack tokens before it is closest to ``depth`` (0 = first thing in the context, 1 = last thing
before the question). Each sample records where the needle really is: its character and token offsets in the
prompt and ``depth_actual``, the measured fraction of haystack tokens before it.

Everything is deterministic: sample ``i`` of a (task, length, depth) cell draws from
``random.Random(f"{seed}/{task}/{length}/{depth}/{i}")`` (string seeds are hashed with SHA-512, the same in
every process), so cells can be generated in any order or in parallel.

The helpers at the top (tokenizer adapter, sentence splitting, haystack filling) are shared with
`atlas_data.synthetic.babilong`.
"""

from __future__ import annotations

import json
import random
import re
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# --------------------------------------------------------------------------------------------------------------
# tokenizer adapter
# --------------------------------------------------------------------------------------------------------------


class TextTokenizer:
    """Token counting and offsets over a `tokenizers.Tokenizer`, a HF fast tokenizer, or a tokenizer.json path.

    Special tokens (BOS/EOS) are never added: a prompt's token count is what the model is fed.
    """

    def __init__(self, tokenizer: Any) -> None:
        if isinstance(tokenizer, TextTokenizer):
            tokenizer = tokenizer.raw
        if isinstance(tokenizer, str | Path):
            from tokenizers import Tokenizer

            path = Path(tokenizer)
            tokenizer = Tokenizer.from_file(str(path / "tokenizer.json" if path.is_dir() else path))
        from tokenizers import Tokenizer

        self.raw = tokenizer
        self._is_tokenizers = isinstance(tokenizer, Tokenizer)
        if not self._is_tokenizers and not callable(tokenizer):
            raise TypeError(f"not a tokenizer: {type(tokenizer).__name__}")

    def encode(self, text: str) -> list[int]:
        if self._is_tokenizers:
            return list(self.raw.encode(text, add_special_tokens=False).ids)
        return list(self.raw(text, add_special_tokens=False)["input_ids"])

    def encode_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """Token ids and each token's character span ``[start, end)`` in `text`."""
        if self._is_tokenizers:
            enc = self.raw.encode(text, add_special_tokens=False)
            return list(enc.ids), [tuple(o) for o in enc.offsets]
        enc = self.raw(text, add_special_tokens=False, return_offsets_mapping=True)
        return list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def count_many(self, texts: Sequence[str]) -> list[int]:
        if not texts:
            return []
        if self._is_tokenizers:
            return [len(e.ids) for e in self.raw.encode_batch(list(texts), add_special_tokens=False)]
        return [len(ids) for ids in self.raw(list(texts), add_special_tokens=False)["input_ids"]]

    def decode(self, ids: Sequence[int]) -> str:
        return self.raw.decode(list(ids))


def token_index_at(offsets: Sequence[tuple[int, int]], char: int) -> int:
    """Index of the first token whose span ends after character `char` (the token holding `char`)."""
    lo, hi = 0, len(offsets)
    while lo < hi:  # offsets are sorted by end
        mid = (lo + hi) // 2
        if offsets[mid][1] > char:
            hi = mid
        else:
            lo = mid + 1
    return lo


# --------------------------------------------------------------------------------------------------------------
# haystacks
# --------------------------------------------------------------------------------------------------------------

# RULER's "repeat" haystack (the passkey filler of Mohtashami & Jaggi 2023).
REPEAT_FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\s*\n+\s*")


def split_sentences(text: str, max_words: int = 24) -> list[str]:
    """Sentences of `text` (split after . ! ? and at line breaks); longer ones cut into `max_words` pieces."""
    out: list[str] = []
    for sentence in _SENTENCE_END.split(text):
        words = sentence.split()
        for i in range(0, len(words), max_words):
            out.append(" ".join(words[i : i + max_words]))
    return [s for s in out if s]


def load_split_texts(
    data_dir: str | Path,
    split: str = "validation",
    max_documents: int | None = None,
    max_tokens: int | None = None,
) -> list[str]:
    """The documents of a prepared split (default: the held-out validation split), decoded back to text.

    Documents come in stream order; `max_documents` / `max_tokens` stop after that many documents / once the
    documents read hold that many tokens (a big validation split need not be decoded whole for a haystack).
    """
    import numpy as np
    from tokenizers import Tokenizer

    from atlas_data.loader import SplitStream
    from atlas_data.manifest import load_manifest

    manifest = load_manifest(data_dir, verify=False)
    offsets = manifest.doc_offsets(split)
    stream = SplitStream(manifest, split)
    tok = Tokenizer.from_file(str(manifest.path(manifest.tokenizer.file)))
    eos = manifest.tokenizer.eos_id
    n = len(offsets) - 1 if max_documents is None else min(len(offsets) - 1, max_documents)
    texts = []
    for i in range(n):
        if max_tokens is not None and int(offsets[i]) >= max_tokens:
            break
        ids = stream.read(int(offsets[i]), int(offsets[i + 1] - offsets[i]))
        ids = ids[ids != eos] if eos is not None else ids
        text = tok.decode(np.asarray(ids, dtype=np.int64).tolist(), skip_special_tokens=False).strip()
        if text:
            texts.append(text)
    return texts


def embedded_texts(versions: Sequence[str] = ("kjv",), max_documents: int | None = None) -> list[str]:
    """Chapters of the embedded public-domain corpus (`atlas_data.sources`, KJV/ASV), one text per chapter."""
    from atlas_data.sources import SourceConfig, iter_documents

    cfg = SourceConfig(kind="embedded", versions=tuple(versions), max_documents=max_documents)
    return [doc.text for doc in iter_documents(cfg)]


@dataclass
class Haystack:
    """Filler units (sentences) and their token counts; contexts take consecutive units, wrapping around."""

    units: list[str]
    counts: list[int]
    kind: str = "essay"

    @classmethod
    def from_texts(cls, texts: Iterable[str], tokenizer: Any, max_words: int = 24) -> Haystack:
        tok = TextTokenizer(tokenizer)
        units = [s for text in texts for s in split_sentences(text, max_words)]
        if not units:
            raise ValueError("haystack: the texts hold no sentences")
        return cls(units, tok.count_many([" " + u for u in units]), "essay")

    @classmethod
    def repeat(cls, tokenizer: Any, filler: str = REPEAT_FILLER) -> Haystack:
        units = split_sentences(filler)
        return cls(units, TextTokenizer(tokenizer).count_many([" " + u for u in units]), "repeat")

    @property
    def n_tokens(self) -> int:
        return sum(self.counts)

    def take(self, start: int, budget: int) -> tuple[list[str], list[int], bool]:
        """Consecutive units from `start` (cyclic) while their token estimate stays within `budget`.

        Returns (units, counts, wrapped): `wrapped` is True when the context had to reuse units (for an essay
        haystack shorter than the context; always for the repeat filler).
        """
        units: list[str] = []
        counts: list[int] = []
        total, i, n = 0, start % len(self.units), len(self.units)
        while total + self.counts[i] <= budget:
            units.append(self.units[i])
            counts.append(self.counts[i])
            total += self.counts[i]
            i = (i + 1) % n
            if len(units) > 64 * n + budget:  # zero-token units cannot loop forever
                break
        return units, counts, len(units) > n


def boundaries_for(counts: Sequence[int], fractions: Sequence[float]) -> list[int]:
    """For each fraction, the unit boundary (0..len(counts)) whose share of the tokens before it is closest."""
    total = sum(counts)
    cum = [0]
    for c in counts:
        cum.append(cum[-1] + c)
    out = []
    for f in fractions:
        target = f * total
        out.append(min(range(len(cum)), key=lambda k: (abs(cum[k] - target), k)))
    return out


def assemble(units: Sequence[str], inserts: Sequence[tuple[int, str]]) -> tuple[str, list[int]]:
    """Join units with spaces, putting each insert (boundary, text) before unit `boundary` (inserts at one
    boundary keep their order). Returns the text and each insert's character start, in the order given."""
    by_boundary: dict[int, list[int]] = {}
    for j, (b, _) in enumerate(inserts):
        by_boundary.setdefault(b, []).append(j)
    pieces: list[str] = []
    starts = [0] * len(inserts)
    pos = 0
    for b in range(len(units) + 1):
        for j in by_boundary.get(b, []):
            if pieces:
                pos += 1
            starts[j] = pos
            pieces.append(inserts[j][1])
            pos += len(inserts[j][1])
        if b < len(units):
            if pieces:
                pos += 1
            pieces.append(units[b])
            pos += len(units[b])
    return " ".join(pieces), starts


@dataclass
class FilledPrompt:
    prompt: str
    ids: list[int]
    offsets: list[tuple[int, int]]
    context_start: int  # character span of the context (haystack + inserts) in the prompt
    context_end: int
    insert_starts: list[int]  # characters, in the prompt
    n_units: int
    wrapped: bool


def fill_prompt(
    tokenizer: TextTokenizer,
    haystack: Haystack | None,
    render: Callable[[str], tuple[str, int]],
    inserts: Sequence[str],
    fractions: Sequence[float],
    length: int,
    reserve: int,
    start: int,
) -> FilledPrompt:
    """Fill `render(context)` with haystack units up to ``tokens + reserve <= length``.

    `render(context)` returns the prompt and the character offset of the context in it. Each insert `j` goes to
    the unit boundary closest to `fractions[j]` of the haystack tokens. `length <= 0` or no haystack: the
    context is the inserts alone.
    """

    def build(units: list[str], counts: list[int]) -> tuple[str, int, str, list[int]]:
        bounds = boundaries_for(counts, fractions) if units else [0] * len(inserts)
        context, starts = assemble(units, list(zip(bounds, inserts)))
        prompt, offset = render(context)
        return prompt, offset, context, [offset + s for s in starts]

    units: list[str] = []
    counts: list[int] = []
    wrapped = False
    if haystack is not None and length > 0:
        prompt, *_ = build([], [])
        budget = length - reserve - tokenizer.count(prompt)
        if budget < 0:
            raise ValueError(
                f"length {length}: the prompt without haystack already takes {tokenizer.count(prompt)} tokens "
                f"(+{reserve} to generate); use a longer length"
            )
        units, counts, wrapped = haystack.take(start, budget)
    for _ in range(1000):
        prompt, offset, context, starts = build(units, counts)
        ids, offsets = tokenizer.encode_offsets(prompt)
        over = len(ids) + reserve - length
        if length <= 0 or over <= 0 or not units:
            break
        removed = 0  # drop units from the end until the overflow is paid (token counts are nearly additive)
        while units and removed < over:
            units.pop()
            removed += counts.pop()
    if length > 0 and len(ids) + reserve > length:
        raise ValueError(f"length {length}: cannot fit the prompt ({len(ids)} tokens + {reserve} to generate)")
    return FilledPrompt(prompt, ids, offsets, offset, offset + len(context), starts, len(units), wrapped)


# --------------------------------------------------------------------------------------------------------------
# S-NIAH
# --------------------------------------------------------------------------------------------------------------

NEEDLE = "One of the special magic {type_plural} for {key} is: {value}."
TEMPLATE = (
    "A special magic {type} is hidden within the following text. Make sure to memorize it. I will quiz you about "
    "the {type} afterwards.\n{context}\nWhat is the special magic {type} for {query} mentioned in the provided text?"
)
GEN_PREFIX = "The special magic {type} for {query} mentioned in the provided text is"

_ADJECTIVES = (
    "ancient amber bold brave bright calm clever cold crimson curious dark eager early fancy fierce gentle golden "
    "grand green hidden hollow humble icy jolly kind late lively lonely loud lucky mellow misty noble odd pale "
    "patient proud quiet rapid rare restless rough rusty silent silver sleepy slow smooth solemn steady sudden "
    "swift tall tender tiny vivid warm wild wise young"
).split()
_NOUNS = (
    "anchor apple arrow badger basket beacon bell blossom bridge candle canyon castle cedar cliff cloud comet "
    "copper coral crane crown desert dragon falcon feather fern forest fountain garden glacier harbour hammer "
    "island ivy jewel kettle lantern meadow mirror moon mountain needle oak orchard otter pebble pillar pine "
    "planet quill raven river saddle shadow shell sparrow spring stone thistle thunder tower valley violin "
    "wagon willow window"
).split()


@dataclass(frozen=True)
class NiahTask:
    name: str
    paper_name: str
    haystack: str  # "repeat" | "essay"
    value_type: str  # "numbers" | "uuids"
    tokens_to_generate: int


NIAH_TASKS: dict[str, NiahTask] = {
    "niah_single_1": NiahTask("niah_single_1", "S-NIAH-PK", "repeat", "numbers", 32),
    "niah_single_2": NiahTask("niah_single_2", "S-NIAH-N", "essay", "numbers", 32),
    "niah_single_3": NiahTask("niah_single_3", "S-NIAH-W", "essay", "uuids", 64),
}
TASK_ALIASES = {
    "pk": "niah_single_1",
    "n": "niah_single_2",
    "w": "niah_single_3",
    "s_niah_pk": "niah_single_1",
    "s_niah_n": "niah_single_2",
    "s_niah_w": "niah_single_3",
}


def resolve_task(name: str) -> NiahTask:
    key = TASK_ALIASES.get(name.lower().replace("-", "_"), name)
    if key not in NIAH_TASKS:
        raise ValueError(f"unknown S-NIAH task {name!r}; choose from {', '.join(NIAH_TASKS)} (or pk, n, w)")
    return NIAH_TASKS[key]


def random_key(rng: random.Random) -> str:
    return f"{rng.choice(_ADJECTIVES)}-{rng.choice(_NOUNS)}"


def random_value(rng: random.Random, value_type: str) -> str:
    if value_type == "numbers":
        return str(rng.randint(1_000_000, 9_999_999))
    if value_type == "uuids":
        return str(uuid.UUID(int=rng.getrandbits(128), version=4))
    raise ValueError(f"unknown needle value type {value_type!r}")


@dataclass
class NiahSample:
    """One S-NIAH prompt. `prompt` = `input` + " " + `gen_prefix` is what the model reads; `answer` follows."""

    task: str
    index: int
    length: int  # target length in tokens: prompt_tokens + tokens_to_generate <= length
    depth: float  # requested needle depth in [0, 1]
    prompt: str
    input: str
    gen_prefix: str
    answer: str
    key: str
    needle: str
    prompt_tokens: int
    tokens_to_generate: int
    context_tokens: int  # haystack + needle
    needle_char_start: int  # in `prompt`
    needle_token_start: int  # index of the token holding the needle's first character
    depth_actual: float  # haystack tokens before the needle / all haystack tokens
    haystack: str
    haystack_wrapped: bool  # the haystack was shorter than the context and some of it repeats
    distractors: list[str] = field(default_factory=list)  # same-type values absent from the prompt

    @property
    def candidates(self) -> list[str]:
        return [self.answer, *self.distractors]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def make_niah_sample(
    task: str | NiahTask,
    tokenizer: Any,
    length: int,
    depth: float,
    *,
    rng: random.Random,
    haystack: Haystack,
    index: int = 0,
    tokens_to_generate: int | None = None,
    n_distractors: int = 9,
) -> NiahSample:
    """One sample; `haystack` must match the task (`Haystack.repeat` for niah_single_1)."""
    spec = task if isinstance(task, NiahTask) else resolve_task(task)
    if not 0.0 <= depth <= 1.0:
        raise ValueError(f"depth must be in [0, 1], got {depth}")
    tok = TextTokenizer(tokenizer)
    ttg = spec.tokens_to_generate if tokens_to_generate is None else tokens_to_generate
    key = random_key(rng)
    value = random_value(rng, spec.value_type)
    vtype = spec.value_type[:-1]
    needle = NEEDLE.format(type_plural=spec.value_type, key=key, value=value)
    prefix = GEN_PREFIX.format(type=vtype, query=key)
    head = TEMPLATE.split("{context}")[0].format(type=vtype)

    def render(context: str) -> tuple[str, int]:
        text = TEMPLATE.format(type=vtype, context=context, query=key)
        return f"{text} {prefix}", len(head)

    start = 0 if haystack.kind == "repeat" else rng.randrange(len(haystack.units))
    filled = fill_prompt(tok, haystack, render, [needle], [depth], length, ttg, start)
    answer_tokens = tok.count(" " + value)
    if answer_tokens > ttg:
        raise ValueError(f"{spec.name}: the answer takes {answer_tokens} tokens > tokens_to_generate={ttg}")

    needle_start = filled.insert_starts[0]
    t_needle = token_index_at(filled.offsets, needle_start)
    t_ctx0 = token_index_at(filled.offsets, filled.context_start)
    t_ctx1 = token_index_at(filled.offsets, filled.context_end)
    t_after = token_index_at(filled.offsets, needle_start + len(needle))
    haystack_tokens = (t_ctx1 - t_ctx0) - (t_after - t_needle)
    depth_actual = (t_needle - t_ctx0) / haystack_tokens if haystack_tokens > 0 else depth

    distractors: list[str] = []
    while len(distractors) < n_distractors:
        d = random_value(rng, spec.value_type)
        if d != value and d not in distractors and d not in filled.prompt:
            distractors.append(d)
    return NiahSample(
        task=spec.name,
        index=index,
        length=length,
        depth=depth,
        prompt=filled.prompt,
        input=filled.prompt[: -len(prefix) - 1],
        gen_prefix=prefix,
        answer=value,
        key=key,
        needle=needle,
        prompt_tokens=len(filled.ids),
        tokens_to_generate=ttg,
        context_tokens=t_ctx1 - t_ctx0,
        needle_char_start=needle_start,
        needle_token_start=t_needle,
        depth_actual=float(depth_actual),
        haystack=haystack.kind,
        haystack_wrapped=filled.wrapped,
        distractors=distractors,
    )


def sample_rng(seed: int, *parts: object) -> random.Random:
    """The generator of one sample: seeded by a string, identical in every process and Python version."""
    return random.Random("/".join([str(seed), *map(str, parts)]))


def generate_niah(
    task: str | NiahTask,
    tokenizer: Any,
    *,
    lengths: Sequence[int],
    depths: Sequence[float],
    samples_per_cell: int,
    seed: int = 0,
    haystack_texts: Iterable[str] | None = None,
    haystack: Haystack | None = None,
    tokens_to_generate: int | None = None,
    n_distractors: int = 9,
) -> list[NiahSample]:
    """`samples_per_cell` samples for every (length, depth), in length-major order.

    An essay task needs `haystack_texts` (e.g. `load_split_texts(data_dir)`) or a prebuilt `haystack`.
    """
    spec = task if isinstance(task, NiahTask) else resolve_task(task)
    tok = TextTokenizer(tokenizer)
    if spec.haystack == "repeat":
        hay = Haystack.repeat(tok)
    elif haystack is not None:
        hay = haystack
    elif haystack_texts is not None:
        hay = Haystack.from_texts(haystack_texts, tok)
    else:
        raise ValueError(f"{spec.name}: an essay haystack needs haystack_texts (corpus text) or a Haystack")
    out = []
    for length in lengths:
        for depth in depths:
            for i in range(samples_per_cell):
                rng = sample_rng(seed, spec.name, length, depth, i)
                out.append(
                    make_niah_sample(
                        spec,
                        tok,
                        length,
                        depth,
                        rng=rng,
                        haystack=hay,
                        index=i,
                        tokens_to_generate=tokens_to_generate,
                        n_distractors=n_distractors,
                    )
                )
    return out


def write_jsonl(samples: Iterable[Any], path: str | Path) -> Path:
    """One JSON object per sample (`to_dict()`), e.g. to inspect them or to feed another harness."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        for s in samples:
            fh.write(json.dumps(s.to_dict(), ensure_ascii=False) + "\n")
    return path


def string_match(prediction: str, answer: str) -> bool:
    """RULER's niah score for one answer: the answer occurs in the prediction, case-insensitively."""
    return answer.lower() in prediction.strip().lower()
