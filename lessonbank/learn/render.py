"""The one renderer of lesson payloads to the text people and agents read.

A lesson kept from what a run observed holds its content as fields (``core.models``: ``FixPayload``,
``ShapePayload``, ``Recipe``); its stored ``text`` is rendered here when it is made, and the instructions
builder, the CLI and the report render it here again. Nothing reads a lesson's text back into fields.

A fix reads::

    Pass `date` like "17.03.2024", not like "2024-03-17": `w = get_weather(city="Graz", date="2024-03-17")`
    failed with ValueError asking for DD.MM.YYYY; the corrected line `w = get_weather(city="Graz",
    date="17.03.2024")` worked.

(the lead when the correction changed one string argument; ``asking for`` the date form the error named; an
asked fix: ``...; written as asked: `<line>` (not tried yet).``). A shape reads::

    `search_catalog(...)` returns {'status': str, 'data': {'items': [{'name': str}, ...], 'total': int}}: its
    records are `result['data']['items']`. Records came back from `r = search_catalog(query="mug")`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from lessonbank.core.models import FixPayload, Lesson, Recipe, ShapePayload
from lessonbank.learn import fixtext, walk

WORKED = " worked"
CORRECTED = "; the corrected line "
# A fix the error asked for (``asked``): the failing line with its date in the form the error names, which no step
# ran yet.
ASKED = "; written as asked: "
UNTRIED = " (not tried yet)"
ASKING = " asking for "  # the date form an error named, which the corrected line wrote its date in
CALL_LEAD = " Records came back from "  # what follows a shape's text when it names the call that got its records
MORE = walk.MORE


def lead(payload: FixPayload) -> str:
    """What a fix's text starts with when its correction changed one string argument: ``Pass `date` like
    "17.03.2024", not like "2024-03-17": `` ("" otherwise)."""
    changed = fixtext.changes(payload)
    if len(changed) != 1:
        return ""
    change = changed[0]
    named = fixtext.named(change.argument)
    return f"Pass {named} like {json.dumps(change.after)}, not like {json.dumps(change.before)}: "


def failure(payload: FixPayload) -> str:
    """How a fix's failing line failed: ``failed with ValueError asking for DD.MM.YYYY``."""
    return f"failed with {payload.error}" + (f"{ASKING}{payload.form}" if payload.form else "")


def fix(payload: FixPayload) -> str:
    """The text of a fix (backticks inside its lines are refused before it is made)."""
    head = f"{lead(payload)}`{payload.failed}` {failure(payload)}"
    if not payload.tried:
        return f"{head}{ASKED}`{payload.fixed}`{UNTRIED}."
    return f"{head}{CORRECTED}`{payload.fixed}`{WORKED}."


def to_write(payload: FixPayload) -> str:
    """A fix as the line to write, without the failing line or value: ``Write `w = get_weather(city="Porto",
    date="15.09.2024")`: pass `date` like "15.09.2024" (DD.MM.YYYY); written any other way it failed with
    ValueError.`` A small model given the failing line next to the corrected one copies the failing one."""
    head = f"Write `{payload.fixed}`" + (" (as the error asked; not tried yet)" if not payload.tried else "")
    changed = fixtext.changes(payload)
    if len(changed) != 1:
        return f"{head}; written otherwise, the line failed with {payload.error}."
    form = fixtext.form_of(payload)
    like = f"like {json.dumps(changed[0].after)}" + (f" ({form.name})" if form is not None else "")
    return (f"{head}: pass {fixtext.named(changed[0].argument)} {like}; written any other way it failed with "
            f"{payload.error}.")


def describe(structure: Any) -> str:
    """A result's structure as it reads: ``{'data': {'items': [{'name': str}, ...], ...}}``."""
    if isinstance(structure, dict) and "fields" in structure:
        inner = ", ".join(f"'{key}': {describe(value)}" for key, value in structure["fields"])
        return "{" + inner + (f", {MORE}" if structure.get("more") else "") + "}"
    if isinstance(structure, dict) and "items" in structure:
        return f"[{describe(structure['items'])}, {MORE}]"
    return str(structure)


def path(keys: Sequence[str]) -> str:
    """``('data', 'items')`` -> ``['data']['items']``."""
    return "".join(f"['{key}']" for key in keys)


def shape(payload: ShapePayload, with_call: bool = True) -> str:
    """The text of a shape (without the line that got its records back unless ``with_call``)."""
    came = f"{CALL_LEAD}`{payload.call}`." if payload.call and with_call else ""
    return (f"`{payload.tool}(...)` returns {describe(payload.structure)}: its records are "
            f"`result{path(payload.records)}`.{came}")


def recipe(payload: Recipe) -> str:
    """The text of a recipe: the task it solved (what similar tasks are matched on)."""
    return f"Working code for a task like: {' '.join(payload.task.split())}"


def text(lesson: Lesson) -> str:
    """What a lesson says, for people: rendered from its payload when its text was (an observed fix or shape, a
    kept recipe), else its text as written."""
    if lesson.origin == "observed" and lesson.fix is not None:
        return fix(lesson.fix)
    if lesson.origin == "observed" and lesson.shape is not None:
        return shape(lesson.shape)
    if lesson.origin == "recipe" and lesson.recipe is not None:
        return recipe(lesson.recipe)
    return lesson.text
