"""BABILong-style samples: bAbI fact/question stories generated from templates, hidden in corpus text.

BABILong (Kuratov et al. 2024) takes the bAbI tasks (Weston et al. 2015) and spreads a story's sentences over
long background text (PG19 books); the question comes at the end. Here the stories are generated from templates
with a small world simulator (people, places, objects) and the background is any corpus text (by default the
held-out split of the prepared data). Five tasks, the ones BABILong reports at every length:

===== ========================== ======================================================== ======================
task  bAbI name                  question                                                 answer
===== ========================== ======================================================== ======================
qa1   single supporting fact     ``Where is Mary?``                                       her last location
qa2   two supporting facts       ``Where is the football?``                               where its holder is /
                                                                                          where it was dropped
qa3   three supporting facts     ``Where was the football before the kitchen?``           the previous location
qa4   two argument relations     ``What is north of the kitchen?`` / ``What is the        a location
                                 kitchen north of?``
qa5   three argument relations   ``Who gave the apple to Fred?`` / ``Who received the     a person or an object
                                 apple?`` / ``What did Jeff give to Fred?``
===== ========================== ======================================================== ======================

Sample format (plain, for base models; BABILong's instruction prompts are for chat models)::

    <background sentences with the story's facts among them, in story order>
    Question: Where is Mary?
    Answer:

and the answer is one word (``" kitchen"``). ``candidates`` lists the task's labels (all locations, or all people
and objects for qa5), for scoring by log-likelihood and for BABILong's answer check (`compare_answers`: the
target is the only label in the output that the question does not mention).

Lengths are in tokens, as for S-NIAH: ``prompt_tokens + tokens_to_generate <= length``, filled up to less than
one background sentence short; ``length = 0`` means the story alone (BABILong's "0k"). Facts go to background
sentence boundaries at sorted uniform random fractions of the background tokens. Deterministic from the seed:
sample ``i`` of (task, length) draws from ``random.Random(f"{seed}/{task}/{length}/{i}")``; the story of sample
``i`` does not depend on the length (``random.Random(f"{seed}/{task}/story/{i}")``), so every length asks the same
questions, like BABILong's splits.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from atlas_data.synthetic.babi_stories import (
    ACTORS,
    BABI_TASKS,
    DEFAULT_FACTS,
    DIRECTIONS,
    GIVERS,
    LOCATIONS,
    OBJECTS,
    BabiStory,
    _check_task,
    generate_story,
    solve,
)
from atlas_data.synthetic.haystack import Haystack, TextTokenizer, fill_prompt, sample_rng, token_index_at

# Callers import the story names from here (their home before `babi_stories` was split off).
__all__ = [
    "ACTORS",
    "BABI_TASKS",
    "DEFAULT_FACTS",
    "DIRECTIONS",
    "GIVERS",
    "LOCATIONS",
    "OBJECTS",
    "QUESTION_TEMPLATE",
    "BabiStory",
    "BabilongSample",
    "compare_answers",
    "generate_babilong",
    "generate_story",
    "make_babilong_sample",
    "solve",
]

QUESTION_TEMPLATE = "{context}\nQuestion: {question}\nAnswer:"


# --------------------------------------------------------------------------------------------------------------
# answer checking (BABILong's compare_answers)
# --------------------------------------------------------------------------------------------------------------


def compare_answers(target: str, output: str, question: str, labels: Sequence[str]) -> bool:
    """BABILong's check: the target is the only task label in the output, ignoring labels the question names."""
    output, question = output.lower(), question.lower()
    in_question = {lab.lower() for lab in labels if lab.lower() in question}
    in_output = {lab.lower() for lab in labels if lab.lower() in output} - in_question
    return in_output == {target.lower()}


@dataclass
class BabilongSample:
    task: str
    index: int
    length: int  # target length in tokens (0: the story alone)
    prompt: str
    question: str
    answer: str
    candidates: list[str]
    facts: list[str]
    supporting: list[int]
    prompt_tokens: int
    tokens_to_generate: int
    context_tokens: int
    fact_char_starts: list[int]  # in `prompt`
    fact_token_starts: list[int]
    fact_depths: list[float]  # token position in the context / context tokens
    haystack_wrapped: bool
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def make_babilong_sample(
    story: BabiStory,
    tokenizer: Any,
    length: int,
    *,
    rng: random.Random,
    haystack: Haystack | None,
    index: int = 0,
    tokens_to_generate: int = 8,
) -> BabilongSample:
    """Hide `story`'s facts in `haystack` text so that the prompt fits `length` tokens."""
    tok = TextTokenizer(tokenizer)
    head = QUESTION_TEMPLATE.split("{context}")[0]

    def render(context: str) -> tuple[str, int]:
        return QUESTION_TEMPLATE.format(context=context, question=story.question), len(head)

    fractions = sorted(rng.random() for _ in story.facts)
    start = rng.randrange(len(haystack.units)) if haystack is not None else 0
    filled = fill_prompt(tok, haystack, render, story.facts, fractions, length, tokens_to_generate, start)
    t_ctx0 = token_index_at(filled.offsets, filled.context_start)
    t_ctx1 = token_index_at(filled.offsets, filled.context_end)
    starts = [token_index_at(filled.offsets, c) for c in filled.insert_starts]
    n_ctx = max(1, t_ctx1 - t_ctx0)
    return BabilongSample(
        task=story.task,
        index=index,
        length=length,
        prompt=filled.prompt,
        question=story.question,
        answer=story.answer,
        candidates=list(story.candidates),
        facts=list(story.facts),
        supporting=list(story.supporting),
        prompt_tokens=len(filled.ids),
        tokens_to_generate=tokens_to_generate,
        context_tokens=t_ctx1 - t_ctx0,
        fact_char_starts=filled.insert_starts,
        fact_token_starts=starts,
        fact_depths=[(t - t_ctx0) / n_ctx for t in starts],
        haystack_wrapped=filled.wrapped,
    )


def generate_babilong(
    task: str,
    tokenizer: Any,
    *,
    lengths: Sequence[int],
    samples: int,
    seed: int = 0,
    haystack_texts: Iterable[str] | None = None,
    haystack: Haystack | None = None,
    n_facts: int | None = None,
    tokens_to_generate: int = 8,
) -> list[BabilongSample]:
    """`samples` samples at every length (length-major); lengths > 0 need background text."""
    _check_task(task)
    tok = TextTokenizer(tokenizer)
    if haystack is None and haystack_texts is not None:
        haystack = Haystack.from_texts(haystack_texts, tok)
    if haystack is None and any(n > 0 for n in lengths):
        raise ValueError("BABILong lengths > 0 need background text (haystack_texts) or a Haystack")
    stories = [generate_story(task, sample_rng(seed, task, "story", i), n_facts) for i in range(samples)]
    out = []
    for length in lengths:
        for i, story in enumerate(stories):
            rng = sample_rng(seed, task, length, i)
            out.append(
                make_babilong_sample(
                    story, tok, length, rng=rng, haystack=haystack, index=i, tokens_to_generate=tokens_to_generate
                )
            )
    return out
