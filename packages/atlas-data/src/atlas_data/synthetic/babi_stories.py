"""bAbI stories for BABILong-style samples: a small world simulator (people, places, objects) that writes the
facts of tasks qa1-qa5, one question and its answer, and a reference reader (`solve`) that answers a story from
its sentences alone.

Split from `atlas_data.synthetic.babilong` (which hides these stories in corpus text and re-exports every public
name here); the task table and the determinism rules are described there.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

ACTORS = ("Mary", "John", "Daniel", "Sandra")
GIVERS = ("Bill", "Fred", "Jeff", "Mary")
LOCATIONS = ("bathroom", "hallway", "kitchen", "garden", "office", "bedroom")
OBJECTS = ("football", "apple", "milk")
DIRECTIONS = ("north", "south", "east", "west")
_MOVE = (
    "moved to the {loc}",
    "went to the {loc}",
    "journeyed to the {loc}",
    "travelled to the {loc}",
    "went back to the {loc}",
)
_GRAB = ("picked up the {obj} there", "got the {obj} there", "grabbed the {obj} there", "took the {obj} there")
_DROP = ("dropped the {obj}", "discarded the {obj}", "put down the {obj}", "left the {obj}")
_GIVE = ("gave the {obj} to {to}", "handed the {obj} to {to}", "passed the {obj} to {to}")

BABI_TASKS = ("qa1", "qa2", "qa3", "qa4", "qa5")
DEFAULT_FACTS = {"qa1": 6, "qa2": 8, "qa3": 12, "qa4": 2, "qa5": 8}


@dataclass
class BabiStory:
    """A bAbI story: facts in order, one question, its one-word answer and the task's label set."""

    task: str
    facts: list[str]
    question: str
    answer: str
    supporting: list[int]  # indices into `facts`
    candidates: list[str]


def _check_task(task: str) -> str:
    if task not in BABI_TASKS:
        raise ValueError(f"unknown bAbI task {task!r}; choose from {', '.join(BABI_TASKS)}")
    return task


class _World:
    """People moving between places and carrying objects (qa1-qa3)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.where: dict[str, str] = {}
        self.holder: dict[str, str] = {}  # object -> person
        self.obj_at: dict[str, str] = {}  # object -> location, when not held
        self.history: dict[str, list[tuple[str, int]]] = {}  # object -> [(location, fact)] on every change
        self.facts: list[str] = []
        self.last_move: dict[str, int] = {}
        self.last_take: dict[str, int] = {}
        self.drop_support: dict[str, list[int]] = {}  # object -> [dropper's last move, the drop]

    def obj_location(self, obj: str) -> str | None:
        if obj in self.holder:
            return self.where.get(self.holder[obj])
        return self.obj_at.get(obj)

    def _note(self, obj: str) -> None:
        loc = self.obj_location(obj)
        hist = self.history.setdefault(obj, [])
        if loc is not None and (not hist or hist[-1][0] != loc):
            hist.append((loc, len(self.facts) - 1))

    def move(self, person: str) -> None:
        loc = self.rng.choice([x for x in LOCATIONS if x != self.where.get(person)])
        self.where[person] = loc
        self.facts.append(f"{person} {self.rng.choice(_MOVE).format(loc=loc)}.")
        self.last_move[person] = len(self.facts) - 1
        for obj, p in self.holder.items():
            if p == person:
                self._note(obj)

    def options(self, allow_objects: bool) -> list[tuple[str, str, str | None]]:
        opts: list[tuple[str, str, str | None]] = [("move", p, None) for p in ACTORS]
        if allow_objects:
            for p in ACTORS:
                if p not in self.where:
                    continue
                for obj in OBJECTS:
                    if obj in self.holder:
                        if self.holder[obj] == p:
                            opts.append(("drop", p, obj))
                    elif self.obj_at.get(obj) in (None, self.where[p]):
                        opts.append(("take", p, obj))
        return opts

    def step(self, allow_objects: bool) -> None:
        kind, person, obj = self.rng.choice(self.options(allow_objects))
        if kind == "move":
            self.move(person)
        elif kind == "take":
            assert obj is not None
            self.holder[obj] = person
            self.obj_at.pop(obj, None)
            self.facts.append(f"{person} {self.rng.choice(_GRAB).format(obj=obj)}.")
            self.last_take[obj] = len(self.facts) - 1
            self._note(obj)
        else:
            assert obj is not None
            del self.holder[obj]
            self.obj_at[obj] = self.where[person]
            self.facts.append(f"{person} {self.rng.choice(_DROP).format(obj=obj)}.")
            self.drop_support[obj] = [self.last_move[person], len(self.facts) - 1]
            self._note(obj)


def _qa1(rng: random.Random, n_facts: int) -> BabiStory:
    w = _World(rng)
    for _ in range(n_facts):
        w.step(allow_objects=False)
    person = rng.choice(sorted(w.where))
    return BabiStory("qa1", w.facts, f"Where is {person}?", w.where[person], [w.last_move[person]], list(LOCATIONS))


def _qa2(rng: random.Random, n_facts: int) -> BabiStory | None:
    w = _World(rng)
    for _ in range(n_facts):
        w.step(allow_objects=True)
    known = [o for o in OBJECTS if w.obj_location(o) is not None]
    if not known:
        return None
    obj = rng.choice(known)
    if obj in w.holder:
        person = w.holder[obj]
        support = sorted({w.last_take[obj], w.last_move[person]})
    else:
        support = w.drop_support[obj]
    return BabiStory("qa2", w.facts, f"Where is the {obj}?", w.obj_location(obj) or "", support, list(LOCATIONS))


def _qa3(rng: random.Random, n_facts: int) -> BabiStory | None:
    w = _World(rng)
    for _ in range(n_facts):
        w.step(allow_objects=True)
    choices = []
    for obj, hist in w.history.items():
        locs = [loc for loc, _ in hist]
        for j in range(1, len(hist)):
            if locs.count(locs[j]) == 1:  # "before the kitchen" must name one arrival
                choices.append((obj, j))
    if not choices:
        return None
    obj, j = rng.choice(sorted(choices))
    hist = w.history[obj]
    question = f"Where was the {obj} before the {hist[j][0]}?"
    return BabiStory("qa3", w.facts, question, hist[j - 1][0], sorted({hist[j - 1][1], hist[j][1]}), list(LOCATIONS))


_OPPOSITE = {"north": "south", "south": "north", "east": "west", "west": "east"}


def _qa4(rng: random.Random, n_facts: int) -> BabiStory:
    """`n_facts` relations around distinct place pairs; the question is about one of them."""
    facts, relations = [], []
    used: set[tuple[str, str]] = set()
    while len(facts) < max(2, n_facts):
        a, b = rng.sample(LOCATIONS, 2)
        d = rng.choice(DIRECTIONS)
        # unambiguous: no other fact puts something `d` of b, or a `d` of something
        if any((x == a or y == b) and dd == d for x, dd, y in relations) or (a, b) in used or (b, a) in used:
            continue
        used.add((a, b))
        relations.append((a, d, b))
        facts.append(f"The {a} is {d} of the {b}.")
    i = rng.randrange(len(relations))
    a, d, b = relations[i]
    if rng.random() < 0.5:
        return BabiStory("qa4", facts, f"What is {d} of the {b}?", a, [i], list(LOCATIONS))
    return BabiStory("qa4", facts, f"What is the {a} {d} of?", b, [i], list(LOCATIONS))


def _qa5(rng: random.Random, n_facts: int) -> BabiStory | None:
    facts: list[str] = []
    holder: dict[str, str] = {}
    gives: list[tuple[str, str, str, int]] = []  # (giver, object, receiver, fact)
    while len(facts) < n_facts:
        r = rng.random()
        free = [o for o in OBJECTS if o not in holder]
        if free and (r < 0.3 or not holder):
            obj, person = rng.choice(free), rng.choice(GIVERS)
            holder[obj] = person
            facts.append(f"{person} {rng.choice(_GRAB).format(obj=obj)}.")
        elif r < 0.45:
            person = rng.choice(GIVERS)
            facts.append(f"{person} {rng.choice(_MOVE).format(loc=rng.choice(LOCATIONS))}.")
        else:
            obj = rng.choice(sorted(holder))
            giver = holder[obj]
            to = rng.choice([p for p in GIVERS if p != giver])
            holder[obj] = to
            facts.append(f"{giver} {rng.choice(_GIVE).format(obj=obj, to=to)}.")
            gives.append((giver, obj, to, len(facts) - 1))
    if not gives:
        return None
    giver, obj, to, i = gives[-1]
    forms = [
        (f"Who gave the {obj} to {to}?", giver, lambda g: (g[1], g[2]) == (obj, to), lambda g: g[0]),
        (f"Who received the {obj}?", to, lambda g: g[1] == obj, lambda g: g[2]),
        (f"What did {giver} give to {to}?", obj, lambda g: (g[0], g[2]) == (giver, to), lambda g: g[1]),
        (f"Who did {giver} give the {obj} to?", to, lambda g: (g[0], g[1]) == (giver, obj), lambda g: g[2]),
    ]
    rng.shuffle(forms)
    for question, answer, matches, value in forms:
        if {value(g) for g in gives if matches(g)} == {answer}:  # every matching give agrees: unambiguous
            return BabiStory("qa5", facts, question, answer, [i], list(GIVERS) + list(OBJECTS))
    return None


_GENERATORS = {"qa1": _qa1, "qa2": _qa2, "qa3": _qa3, "qa4": _qa4, "qa5": _qa5}


def generate_story(task: str, rng: random.Random, n_facts: int | None = None) -> BabiStory:
    """One story of `task` with `n_facts` facts (default `DEFAULT_FACTS[task]`); retries until it is valid."""
    n = DEFAULT_FACTS[_check_task(task)] if n_facts is None else n_facts
    if n < 1:
        raise ValueError(f"n_facts must be >= 1, got {n}")
    for _ in range(1000):
        story = _GENERATORS[task](rng, n)
        if story is not None:
            return story
    raise ValueError(f"{task}: no valid story with {n} facts; use more facts")


# --------------------------------------------------------------------------------------------------------------
# a reference reader used by the tests
# --------------------------------------------------------------------------------------------------------------


def solve(facts: Sequence[str], question: str) -> str:
    """Answer a story by re-reading its sentences (independent of the generator; used to check answers)."""
    import re

    where: dict[str, str] = {}
    holder: dict[str, str] = {}
    obj_at: dict[str, str] = {}
    history: dict[str, list[str]] = {}
    relations: list[tuple[str, str, str]] = []
    gives: list[tuple[str, str, str]] = []

    def loc_of(obj: str) -> str | None:
        return where.get(holder[obj]) if obj in holder else obj_at.get(obj)

    def note(obj: str) -> None:
        loc = loc_of(obj)
        if loc is not None and (not history.get(obj) or history[obj][-1] != loc):
            history.setdefault(obj, []).append(loc)

    for fact in facts:
        if m := re.fullmatch(r"(\w+) (?:moved|went|journeyed|travelled|went back) to the (\w+)\.", fact):
            where[m[1]] = m[2]
            for obj, p in holder.items():
                if p == m[1]:
                    note(obj)
        elif m := re.fullmatch(r"(\w+) (?:picked up|got|grabbed|took) the (\w+) there\.", fact):
            holder[m[2]] = m[1]
            obj_at.pop(m[2], None)
            note(m[2])
        elif m := re.fullmatch(r"(\w+) (?:dropped|discarded|put down|left) the (\w+)\.", fact):
            holder.pop(m[2], None)
            obj_at[m[2]] = where[m[1]]
            note(m[2])
        elif m := re.fullmatch(r"(\w+) (?:gave|handed|passed) the (\w+) to (\w+)\.", fact):
            gives.append((m[1], m[2], m[3]))
            holder[m[2]] = m[3]
        elif m := re.fullmatch(r"The (\w+) is (\w+) of the (\w+)\.", fact):
            relations.append((m[1], m[2], m[3]))
        else:
            raise ValueError(f"unparsed fact {fact!r}")
    if m := re.fullmatch(r"Where is (\w+)\?", question):
        return where[m[1]]
    if m := re.fullmatch(r"Where is the (\w+)\?", question):
        return loc_of(m[1]) or ""
    if m := re.fullmatch(r"Where was the (\w+) before the (\w+)\?", question):
        hist = history[m[1]]
        return hist[hist.index(m[2]) - 1]
    if m := re.fullmatch(r"What is (\w+) of the (\w+)\?", question):
        return next(a for a, d, b in relations if (d, b) == (m[1], m[2]))
    if m := re.fullmatch(r"What is the (\w+) (\w+) of\?", question):
        return next(b for a, d, b in relations if (a, d) == (m[1], m[2]))
    if m := re.fullmatch(r"Who gave the (\w+) to (\w+)\?", question):
        return [g for g, o, r in gives if (o, r) == (m[1], m[2])][-1]
    if m := re.fullmatch(r"Who received the (\w+)\?", question):
        return [r for g, o, r in gives if o == m[1]][-1]
    if m := re.fullmatch(r"What did (\w+) give to (\w+)\?", question):
        return [o for g, o, r in gives if (g, r) == (m[1], m[2])][-1]
    if m := re.fullmatch(r"Who did (\w+) give the (\w+) to\?", question):
        return [r for g, o, r in gives if (g, o) == (m[1], m[2])][-1]
    raise ValueError(f"unparsed question {question!r}")
