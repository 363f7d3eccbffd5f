"""Tool families for the second learning benchmark: a different question about the same tools every run.

A *family* is a small set of tools over one kind of data that hides one trap (voided records
counted, numbers written as text, amounts in several currencies, a default limit that truncates,
times in UTC beside an offset, a European CSV export). The tools' docstrings say nothing about the
trap; the data hints at it. Every run of a family asks another *question* about the same tools (a
total, a maximum, a count above a threshold, a difference between two entities, an average, a
question that needs a second tool), in one of several wordings, about other entities and values: what
carries from one run to the next can only be what was learnt about the tools.

Variants are built deterministically from the family's name, a seed and the run index. A variant is
kept only when the answer of an agent that falls into the trap (the family's *naive* reading of the
same data) is wrong, so the trap matters in every run. Seeds: developers iterate on
:data:`TUNING_SEEDS`; :data:`HELD_OUT_SEED` is run once on finished code and never tuned on.

Everything here is pure Python apart from :func:`tools_for`, which wraps a variant's world in
smolagents tools. The families themselves live in ``families_records.py`` and ``families_text.py``.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

TUNING_SEEDS = (1, 2, 3)
HELD_OUT_SEED = 4711  # run once, on finished code; never tuned on
ANSWER_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")
GROUPED = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
CLOCK = re.compile(r"\s*([01]?\d|2[0-3]):[0-5]\d(?::[0-5]\d)?\s*")  # "15:00", "9:30:00"
MAX_ATTEMPTS = 200
# The order a full run meets the families in: those the extra arms also run on first, so that a run cut short
# has measured every regime.
RUN_ORDER = ("ledger", "traffic", "tickets", "exports", "expenses", "events")

World = dict[str, Any]
# A family's reading of a world, true (``naive=False``) or as the trap makes it: ``values`` maps each entity to
# its numbers (or records), ``extra`` each entity to the one figure a second tool gives about it.
View = dict[str, Any]


@dataclass(frozen=True)
class Question:
    """One kind of question about a family's tools.

    ``fields(rng, world, view)`` picks the entities and thresholds (the wording's format fields);
    ``answer(view, fields)`` computes the answer from a reading of the world. ``tools`` are the tools
    the question needs (two for a question that mixes tools). ``hour``: the answer is an hour of the day, which
    an answer may also state as a clock time ("15:00").
    """

    kind: str
    wordings: tuple[str, ...]
    fields: Callable[[random.Random, World, View], dict[str, Any]]
    answer: Callable[[View, dict[str, Any]], float]
    tools: tuple[str, ...]
    tolerance: float = 0.01
    hour: bool = False


@dataclass(frozen=True)
class FamilyVariant:
    """One run's question: its prompt, its world (what the tools serve) and its answer."""

    family: str
    index: int
    kind: str
    wording: int
    prompt: str
    answer: float
    tolerance: float
    tools: tuple[str, ...]
    world: World = field(default_factory=dict)
    fields: dict[str, Any] = field(default_factory=dict)  # the entities and thresholds the prompt names
    hour: bool = False  # the answer is an hour of the day: a clock time ("15:00") states it too


@dataclass(frozen=True)
class Family:
    """A set of tools over one kind of data, its trap, and the questions asked about it."""

    name: str
    trap: str
    hint: str
    world: Callable[[random.Random], World]
    view: Callable[[World, bool], View]  # (world, naive) -> what the numbers are, or what the trap makes of them
    tools: Callable[[World], list[Callable[..., Any]]]
    questions: tuple[Question, ...]

    def order(self, seed: int) -> list[Question]:
        """The questions in the order runs meet them under ``seed`` (every kind once before any repeats)."""
        questions = list(self.questions)
        random.Random(f"lessonbank-families:{self.name}:{seed}:order").shuffle(questions)
        return questions

    def variant(self, index: int, seed: int) -> FamilyVariant:
        """Run ``index``'s variant under ``seed``: the same on every machine and every call."""
        order = self.order(seed)
        question = order[index % len(order)]
        rng = random.Random(f"lessonbank-families:{self.name}:{seed}:{index}")
        for _ in range(MAX_ATTEMPTS):
            world = self.world(rng)
            truth = self.view(world, False)
            fields = question.fields(rng, world, truth)
            answer = question.answer(truth, fields)
            trapped = question.answer(self.view(world, True), fields)
            if abs(trapped - answer) > question.tolerance + 1e-9:
                break
        else:  # pragma: no cover - a family whose trap never matters is a bug in its definition
            raise ValueError(f"{self.name}/{question.kind}: no world where the trap changes the answer")
        wording = rng.randrange(len(question.wordings))
        prompt = question.wordings[wording].format(**fields) + " Answer with the number only."
        return FamilyVariant(self.name, index, question.kind, wording, prompt, round(answer, 6),
                             question.tolerance, question.tools, world, fields, question.hour)

    def variants(self, runs: int, seed: int) -> list[FamilyVariant]:
        return [self.variant(index, seed) for index in range(runs)]

    def trapped_answer(self, variant: FamilyVariant) -> float:
        """The answer of an agent that falls into the trap (for tests: the checker must refuse it)."""
        question = next(q for q in self.questions if q.kind == variant.kind)
        return question.answer(self.view(variant.world, True), variant.fields)


def all_families() -> dict[str, Family]:
    """Every family of the benchmark, by name (the families' modules import this one)."""
    from families_records import FAMILIES_RECORDS
    from families_text import FAMILIES_TEXT

    found = {family.name: family for family in (*FAMILIES_RECORDS, *FAMILIES_TEXT)}
    return {name: found[name] for name in RUN_ORDER} | found


def answer_number(answer: Any) -> float | None:
    """The one number an answer states, or None (no number, several numbers, not finite).

    A number is taken as is; a text may hold exactly one number, written with a decimal point and
    optionally grouped by commas ("12,345.5"); "12,5" is two numbers, not a decimal comma.
    """
    if isinstance(answer, bool) or answer is None:
        return None
    if isinstance(answer, int | float):
        return float(answer) if math.isfinite(answer) else None
    text = str(answer).replace("\u2212", "-")
    found = ANSWER_NUMBER.findall(text)
    if len(found) != 1:
        return None
    number = found[0]
    if "," in number:
        if not GROUPED.fullmatch(number):
            return None
        number = number.replace(",", "")
    try:
        value = float(number)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def check(variant: FamilyVariant, answer: Any) -> bool:
    """True when ``answer`` states the variant's answer, within its tolerance (an hour also as a clock time)."""
    clock = CLOCK.fullmatch(answer) if variant.hour and isinstance(answer, str) else None
    value = float(clock.group(1)) if clock else answer_number(answer)
    return value is not None and abs(value - variant.answer) <= variant.tolerance + 1e-9


def tools_for(family: Family, variant: FamilyVariant) -> list[Any]:
    """The variant's tools as smolagents tools (their docstrings are what the agent reads)."""
    from smolagents import tool

    return [tool(function) for function in family.tools(variant.world)]


# -- helpers the families share -------------------------------------------------------------------------


def entity(view: View, fields: dict[str, Any], key: str = "a") -> list[float]:
    """The numbers of entity ``fields[key]`` in ``view``."""
    return list(view["values"][fields[key]])


def pick_threshold(rng: random.Random, values: Sequence[float], step: float = 1.0) -> float:
    """A threshold strictly between two of ``values`` (so that ``> t`` and ``>= t`` agree), a multiple of ``step``."""
    ordered = sorted(set(values))
    for _ in range(50):
        low = rng.randrange(len(ordered) - 1) if len(ordered) > 1 else 0
        lo, hi = ordered[low], ordered[min(low + 1, len(ordered) - 1)]
        threshold = math.floor((lo + hi) / 2 / step) * step
        if lo < threshold < hi:
            return threshold
    return math.floor(ordered[0] / step) * step - step


def standard_questions(noun: dict[str, tuple[str, ...]], tools: tuple[str, ...], step: float = 10.0,
                       tolerance: float = 0.01) -> tuple[Question, ...]:
    """Total, maximum, count above a threshold, difference between two entities and average, over a view that
    maps each entity to its numbers; ``noun[kind]`` holds the wordings of each kind."""

    def one(rng: random.Random, world: World, view: View) -> dict[str, Any]:
        return {"a": rng.choice(sorted(view["values"]))}

    def above(rng: random.Random, world: World, view: View) -> dict[str, Any]:
        name = rng.choice(sorted(view["values"]))
        return {"a": name, "t": fmt(pick_threshold(rng, view["values"][name], step))}

    def two(rng: random.Random, world: World, view: View) -> dict[str, Any]:
        first, second = rng.sample(sorted(view["values"]), 2)
        if sum(view["values"][first]) < sum(view["values"][second]):
            first, second = second, first
        return {"a": first, "b": second}

    def count_above(view: View, f: dict[str, Any]) -> float:
        return float(sum(1 for v in entity(view, f) if v > float(f["t"])))

    def average(view: View, f: dict[str, Any]) -> float:
        values = entity(view, f)
        return sum(values) / len(values)

    one_tool = tools[:1]
    return (
        Question("total", noun["total"], one, lambda v, f: sum(entity(v, f)), one_tool, tolerance),
        Question("maximum", noun["maximum"], one, lambda v, f: max(entity(v, f)), one_tool, tolerance),
        Question("count_above", noun["count_above"], above, count_above, one_tool, 0.0),
        Question("difference", noun["difference"], two, lambda v, f: sum(entity(v, f)) - sum(entity(v, f, "b")),
                 one_tool, tolerance),
        Question("average", noun["average"], one, average, one_tool, tolerance),
    )


def fmt(value: float) -> str:
    """A threshold as the prompt writes it: no trailing ``.0``."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
