"""The one renderer of lesson payloads to the text people and agents read.

A lesson kept from what a run observed holds its content as fields (``core.models``: ``FixPayload``,
``ShapePayload``, ``Recipe``); its stored ``text`` is rendered here when it is made, and the instructions
builder, the CLI and the report render it here again. Nothing reads a lesson's text back into fields.

A fix reads::

    Pass `region` like "North", not like "north": `rows = get_sales(region="north")` failed with ValueError; the
    corrected line `rows = get_sales(region="North")` worked.

(the lead says what changed when the correction changed one thing: an argument, a key, a conversion). A shape
reads as ``shapes.describe`` writes it (``learn.shapes``); an observed failure as ``failed_call`` writes it.
"""

from __future__ import annotations

import json

from lessonbank.core.models import Change, FailurePayload, FixPayload, Lesson, Recipe, ShapePayload
from lessonbank.learn import fixtext

WORKED = " worked"
CORRECTED = "; the corrected line "
UNTRIED = " (not tried yet)"  # a fix an earlier release wrote from an error alone
ASKED = "; written as asked: "

# What rendering a stored payload that is not one raises (a store may hold anything): its lesson is left as it is,
# and out of what is rendered.
MALFORMED = (TypeError, ValueError, LookupError, AttributeError, RecursionError)
MAX_WHY = 200  # characters of an error kept in why a lesson was left as it is


def unreadable(error: BaseException) -> str:
    """Why a stored lesson could not be read (``error``, one of ``MALFORMED``), in one bounded line: the error may
    quote its payload."""
    said = " ".join(str(error).split())[:MAX_WHY]
    return f"its payload is not one this release reads ({type(error).__name__}: {said})"


def lead_of(change: Change) -> str:
    """What a fix's text starts with for the one thing its correction changed."""
    if change.kind == "key":
        return f"Read `{change.argument}[{json.dumps(change.after)}]`, not `[{json.dumps(change.before)}]`: "
    if change.kind == "conversion":
        return f"Convert the value first (`{change.after}`): "
    after, before = json.dumps(change.after), json.dumps(change.before)
    return f"Pass {fixtext.named(change.argument)} like {after}, not like {before}: "


def lead(payload: FixPayload) -> str:
    """What a fix's text starts with when its correction changed one thing ("" otherwise)."""
    one = fixtext.one_change(payload)
    return lead_of(one) if one is not None else ""


def failure(payload: FixPayload) -> str:
    """How a fix's failing line failed: ``failed with ValueError``."""
    return f"failed with {payload.error}"


def fix(payload: FixPayload) -> str:
    """The text of a fix (backticks inside its lines are refused before it is made)."""
    head = f"{lead(payload)}`{payload.failed}` {failure(payload)}"
    if not payload.tried:
        return f"{head}{ASKED}`{payload.fixed}`{UNTRIED}."
    return f"{head}{CORRECTED}`{payload.fixed}`{WORKED}."


def to_write(payload: FixPayload) -> str:
    """A fix as the line to write, without the failing line or value: ``Write `r = fetch_rates(base="USD",
    day="2024-09-15")`: pass `day` like "2024-09-15"; written any other way it failed with ValueError.`` A small
    model given the failing line next to the corrected one copies the failing one."""
    head = f"Write `{payload.fixed}`" + (" (not tried yet)" if not payload.tried else "")
    one = fixtext.one_change(payload)
    if one is None:
        return f"{head}; written otherwise, the line failed with {payload.error}."
    if one.kind == "key":
        what = f"the key is {json.dumps(one.after)}"
    elif one.kind == "conversion":
        what = f"convert the value first (`{one.after}`)"
    else:
        what = f"pass {fixtext.named(one.argument)} like {json.dumps(one.after)}"
    return f"{head}: {what}; written any other way it failed with {payload.error}."


def failed_call(payload: FailurePayload) -> str:
    """The text of an observed failure (``learn.failures``): which tool failed, passed what written how, and the
    error it raised, quoted as data: ``` `get_sales` raised ValueError when passed `region` written like "a"; its
    error said: "unknown region '<region>'".```; a code tool's code that read a name it never set, what that
    means. The failing line itself is kept on the payload but not shown: a model handed a line copies it, the very
    call that failed."""
    forms = " and ".join(f"`{role}` written like {json.dumps(shown)}" for role, shown in payload.forms.items())
    said = f'; its error said: "{payload.error}"' if payload.error else ""
    alone = (f": its code read `{payload.unset}` without setting it. Code it runs sees no result of another call: "
             "make the call in that same code") if payload.unset else ""
    return f"`{payload.tool}` raised {payload.error_type}{f' when passed {forms}' if forms else ''}{said}{alone}."


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
    if lesson.origin == "observed" and lesson.failure is not None:
        return failed_call(lesson.failure)
    if lesson.origin == "recipe" and lesson.recipe is not None:
        return recipe(lesson.recipe)
    return lesson.text


def readable(lesson: Lesson) -> tuple[str, str]:
    """What a lesson says (``text``) and "", or, when its stored payload is not one this release reads, its text as
    stored and why (``unreadable``): a command showing a bank shows the others and names it."""
    try:
        return text(lesson), ""
    except MALFORMED as e:
        return lesson.text, unreadable(e)


def shown(lesson: Lesson) -> str:
    """What a lesson says, or that its stored payload could not be read and why (``readable``)."""
    said, why = readable(lesson)
    return f"(could not be read: {why})" if why else said


def shape(payload: ShapePayload, with_call: bool = True) -> str:
    """The text of a shape (``shapes.text``)."""
    from lessonbank.learn import shapes

    return shapes.text(payload, with_call)


ADAPT_UNVERIFIED = "An example to adapt (from a run not judged right: its line ran, its answer was not verified)"
ADAPT_OTHER = "An example to adapt (from another question)"


def handed(kind: str, call: str, loop: str, fixed: str, error: str, what: str, for_task: bool,
           verified: bool) -> str:
    """A fix as handed to another question (``learn.handover``): ``For this task:`` when it may be written as it is,
    else said to be an example to adapt; the call with this task's values, what the question picked an element
    of, then the change (``what``: the key, the conversion, how an argument is passed), and how it failed."""
    lead = "For this task: " if for_task else f"{ADAPT_OTHER if verified else ADAPT_UNVERIFIED}: "
    if kind == "call":
        body = f"write `result = {call}`"
    else:
        first = f"`result = {call}`, then " if call else ""
        each = f"for each `record` in `{loop}`, " if loop else ""
        verb = "read" if kind == "key" else "convert the value first:"
        body = f"{first}{each}{verb} `{fixed}`"
    return f"{lead}{body}{f': {what}' if what else ''}; written any other way it failed with {error}."
