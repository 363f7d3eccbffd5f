"""How observed lessons read for an agent that calls tools by name with arguments (a smolagents
``ToolCallingAgent``, any agent without a code executor): the calls to make and, in words, where a result's records
are and what is beside them; never code over a tool's result, which such an agent holds in no variable (its
``python_interpreter``, when it has one, cannot see earlier results). A CodeAgent's block is unchanged
(``agent_kind="code"``, the default everywhere)."""

from __future__ import annotations

import ast
import json
from collections.abc import Collection, Sequence
from typing import Literal

from lessonbank.core.models import FailurePayload, FixPayload, Lesson, Recipe, ShapePayload
from lessonbank.learn import fixtext, handover, render, said, shapes
from lessonbank.learn.adapters import toolcalling

AgentKind = Literal["code", "calls"]
AGENT_KINDS: tuple[AgentKind, ...] = ("code", "calls")
RECORDS = "records"  # the name a code tool's code is handed its result's records under (``in_code``)


def follows(recipe: Recipe, kind: AgentKind) -> bool:
    """Whether an agent of ``kind`` can follow ``recipe``: a CodeAgent any (its code can make a ToolCallingAgent's
    calls), a calling agent none in Python (its code indexes results such an agent holds in no variable)."""
    return kind == "code" or recipe.language != "python"


def bare_call(line: str) -> str:
    """The call of a line that is one call, alone or assigned (``r = search(q="a")`` -> ``search(q="a")``); ""
    for any other line."""
    found = handover.one_call(line)
    if found is None:
        return ""
    return ast.get_source_segment(line, found[1]) or ast.unparse(found[1])


def where(records: Sequence[str]) -> str:
    """Where a result's records are, in words: ``the list under `data` > `items```, or ``the result itself``."""
    if not records:
        return "the result itself (a list)"
    return "the list under " + " > ".join(f"`{key}`" for key in records)


def shape(payload: ShapePayload) -> str:
    """An observed shape in words: what the tool returns, where its records are and the fields beside them."""
    head = f"`{payload.tool}(...)` returns {shapes.describe(payload.structure)}"
    if payload.records is None:
        return f"{head}."
    fields = ", ".join(f"`{key}`" for key in shapes.beside(payload))
    read = f" The fields beside them ({fields}) say about them (how many, whether there are more): read them." \
        if fields else ""
    return f"{head}: its records are {where(payload.records)}: read every one.{read}{said.text(payload.said)}"


def _key(payload: FixPayload) -> str:
    """A fix that changed only the key read, in words ("" for any other fix)."""
    one = fixtext.one_change(payload)
    if one is None or one.kind != "key":
        return ""
    return (f"In the result, the field is {json.dumps(one.after)}, not {json.dumps(one.before)}: read as "
            f"{json.dumps(one.before)} it failed with {payload.error}.")


def fix(payload: FixPayload) -> str:
    """A fix as kept, for a calling agent: the failing and the corrected call, or a changed key in words; "" for a
    fix that is code over a result (a conversion, a line that is no call)."""
    failed, fixed = bare_call(payload.failed), bare_call(payload.fixed)
    if not failed or not fixed:
        return _key(payload)
    one = fixtext.one_change(payload)
    lead = render.lead(payload) if one is not None and one.kind == "argument" else ""
    if not payload.tried:
        return f"{lead}`{failed}` {render.failure(payload)}{render.ASKED}`{fixed}`{render.UNTRIED}."
    return f"{lead}`{failed}` {render.failure(payload)}; the corrected call `{fixed}`{render.WORKED}."


def _what(payload: FixPayload, call: str) -> str:
    one = fixtext.one_change(payload)
    if one is None or one.kind != "argument":
        return ""
    value = fixtext.arguments(call).get(one.argument, one.after)
    return f"pass {fixtext.named(one.argument)} like {json.dumps(value)}"


def to_write(payload: FixPayload) -> str:
    """A fix with this task's values as the call to make (``render.to_write`` without the assignment); "" when the
    corrected line is no call."""
    call = bare_call(payload.fixed)
    if not call:
        return _key(payload)
    what = _what(payload, call)
    head = f"Call `{call}`" + (render.UNTRIED if not payload.tried else "")
    return f"{head}{f': {what}' if what else ''}; written any other way it failed with {payload.error}."


def handed(payload: FixPayload, solved: str, task: str, *, for_task: bool, verified: bool) -> str:
    """A fix observed on ``solved`` as handed to ``task`` (``handover.text``) for a calling agent: the call with this
    task's values, or a changed key in words; "" for what cannot be handed over without code."""
    found = handover.handover(payload)
    placed = handover.bound(found, solved, task) if found is not None else None
    if placed is None:
        return ""
    mine, complete = placed
    if mine.kind != "call" or not bare_call(mine.call):
        return _key(payload)
    lead = "For this task" if for_task and complete else (
        render.ADAPT_OTHER if verified else render.ADAPT_UNVERIFIED)
    what = _what(payload, mine.call)
    return f"{lead}: call `{mine.call}`{f': {what}' if what else ''}; written any other way it failed with " \
           f"{payload.error}."


def call_line(lesson: Lesson, task: str, using: set[str], universe: Collection[str],
              failed: Sequence[FailurePayload] = ()) -> str:
    """An observed shape's call with ``task``'s values, as the call to make (``handover.call_line`` without the
    assignment and the loop); "" when ``handover.call_line`` gives none."""
    shape_of = lesson.shape if lesson.origin == "observed" else None
    line = bare_call(handover.placed_call(lesson, task, using))
    if not line or shape_of is None:
        return ""
    lead = "For this task" if handover.own_tools(lesson, using, universe) else render.ADAPT_OTHER
    told = "; ".join(filter(None, [handover.form_change(line, failed), handover.widened_note(lesson)]))
    if toolcalling.CODE_TOOL in universe and any(failure.unset and failure.tool == toolcalling.CODE_TOOL
                                                 for failure in failed):
        return in_code(line, shape_of, lead, told)
    records = f"; its records are {where(shape_of.records)}" if shape_of.records is not None else ""
    return f"{lead}: call `{line}`{f' ({told})' if told else ''}{records}."


def in_code(line: str, shape_of: ShapePayload, lead: str, told: str) -> str:
    """A shape's call given inside the code tool's code, its records read in that same code: what a calling agent
    whose code tool read a result it never got (``failures._unset``) is handed in place of the call alone. Given the
    call and that failure as two lines, a small agent followed one or the other: it made the call with the setting
    handed on and then sent code that read a name it never set, or made the call in its code with a setting of its
    own."""
    code = f"{handover.RESULT} = {line}\n"
    if shape_of.records is not None:
        code += f"{RECORDS} = {handover.RESULT}{shapes.path(shape_of.records)}\n"
    begun = json.dumps({"code": code + "..."})
    of = f"from every record in `{RECORDS}` " if shape_of.records is not None else ""
    return (f"{lead}: call `{toolcalling.CODE_TOOL}` with code that makes the call and computes what the task asks "
            f"{of}in that same code (it sees no result of another call), beginning `{begun}`"
            f"{f' ({told})' if told else ''}.")
