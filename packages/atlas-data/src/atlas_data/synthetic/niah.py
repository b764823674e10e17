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

The text helpers (tokenizer adapter, sentence splitting, haystack filling) live in
`atlas_data.synthetic.haystack`, shared with `atlas_data.synthetic.babilong`, and are re-exported here.
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from atlas_data.synthetic.haystack import (
    REPEAT_FILLER,
    FilledPrompt,
    Haystack,
    TextTokenizer,
    assemble,
    boundaries_for,
    embedded_texts,
    fill_prompt,
    load_split_texts,
    sample_rng,
    split_sentences,
    token_index_at,
)

# Callers import the text helpers from here (their home before `haystack` was split off).
__all__ = [
    "GEN_PREFIX",
    "NEEDLE",
    "NIAH_TASKS",
    "REPEAT_FILLER",
    "TASK_ALIASES",
    "TEMPLATE",
    "FilledPrompt",
    "Haystack",
    "NiahSample",
    "NiahTask",
    "TextTokenizer",
    "assemble",
    "boundaries_for",
    "embedded_texts",
    "fill_prompt",
    "generate_niah",
    "load_split_texts",
    "make_niah_sample",
    "random_key",
    "random_value",
    "resolve_task",
    "sample_rng",
    "split_sentences",
    "string_match",
    "token_index_at",
    "write_jsonl",
]


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
