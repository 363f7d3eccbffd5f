"""What the fields beside a tool's records said, call by call: the arguments that got a result tied to what it said
about itself.

A result often says beside its records whether they are all of them (``'truncated': true``, ``'has_more': true``,
``'next_cursor': null``), and what it says depends on the call's arguments (``limit=10``, ``page_size=50``). A shape
that only counts the values a flag held ("true in all 3 results seen") does not tell an agent which call got which,
so agents kept making the call that got the partial result. For each call of a tool whose result the run kept, with
one call of that tool in its step (for a ToolCallingAgent every call is one step; for code, one call site), this
keeps the call with its own settings and masks the rest, and each scalar field beside the records: a flag's value,
``null``, or its type's name::

    `search_tickets(project=..., limit=10)` -> `truncated: true`; `search_tickets(project=..., limit=100)` ->
    `truncated: false`: with `limit=100` instead of `limit=10`, `truncated` was false instead of true.

Nothing here knows a field's or an argument's name: any flag beside records, any field that was null after one call
and not after another, any argument whose value differed between two calls of the tool. What is kept is structure
the numbers the calls passed; a word, a text or a computed value is ``...``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from lessonbank.core.payloads import SaidPayload
from lessonbank.learn import walk
from lessonbank.learn.view import Call, RunView

MAX_SAID = 4  # calls kept per tool: the first and the latest that said something new
MAX_CALL = 160
MAX_FIELDS = 4
MASK = "..."
_NUMBER = re.compile(r"-?[0-9]{1,9}(?:\.[0-9]{1,4})?")


def _value(argument_value: str | None) -> str:
    """An argument's value as kept: a number (a setting such as a limit or a page, or a value of the task that
    another task changes alike); a word, a text or a computed value is ``...``: it may name the task's entity or be
    text a tool returned."""
    if argument_value is not None and _NUMBER.fullmatch(argument_value):
        return argument_value
    return MASK


def call_text(call: Call) -> str:
    """``tool(name=value, ...)`` with the values ``_value`` keeps ("" when a keyword is no plain name)."""
    parts = []
    for argument in call.arguments:
        value = _value(argument.value)
        if argument.name.startswith("#"):
            parts.append(value)
        elif argument.name.isidentifier():
            parts.append(f"{argument.name}={value}")
        else:
            return ""
    text = f"{call.tool}({', '.join(parts)})"
    return text if len(text) <= MAX_CALL else ""


def _leaf(leaf: Any) -> str:
    if walk.is_flag(leaf):
        true, false = int(leaf.get("true", 0)), int(leaf.get("false", 0))
        return "true" if true and not false else "false" if false and not true else ""
    if leaf == "NoneType":
        return "null"
    if isinstance(leaf, str) and leaf not in (walk.MORE, "bool"):
        return leaf
    if isinstance(leaf, dict) and isinstance(leaf.get("type"), str):
        return str(leaf["type"])
    return ""


def beside(structure: Any, records: Sequence[str] | None) -> dict[str, str]:
    """{field: what it held} for the scalar fields next to the records under ``records`` ({} when there are none
    or the result is a list)."""
    if not records:
        return {}
    node = structure
    for key in records[:-1]:
        node = dict(node.get("fields", [])).get(key) if isinstance(node, dict) else None
    if not isinstance(node, dict):
        return {}
    found: dict[str, str] = {}
    for key, leaf in node.get("fields", []):
        held = _leaf(leaf) if key != records[-1] else ""
        if held and len(found) < MAX_FIELDS:
            found[key] = held
    return found


def of_run(run: RunView, shaped: Iterable[tuple[int, str, Any, Sequence[str] | None]]) -> dict[str, list[SaidPayload]]:
    """{tool: what each of its calls said} from ``shaped``: (step seq, tool, the result's structure, the path to
    its records) of each result a shape was read from, paired with the step's one call of that tool; a tool whose
    calls said nothing worth saying (no flag, no field that changed) is left out."""
    steps = {step.seq: step for step in run.actions}
    found: dict[str, list[SaidPayload]] = {}
    for seq, tool, structure, records in shaped:
        step = steps.get(seq)
        calls = {call_text(call) for call in step.calls if call.tool == tool and not call.failed} if step else set()
        fields = beside(structure, records)
        if len(calls) != 1 or not fields or "" in calls:
            continue
        found[tool] = merged(found.get(tool, []), [SaidPayload(call=calls.pop(), fields=fields)])
    return {tool: kept for tool, kept in found.items() if _shown(kept)}  # nothing worth saying: nothing kept


def merged(old: Sequence[SaidPayload], new: Sequence[SaidPayload]) -> list[SaidPayload]:
    """``old`` and then ``new``, each (call, fields) once, at most ``MAX_SAID``: the first kept, then the latest."""
    out: list[SaidPayload] = []
    for said in [*old, *new]:
        if said not in out:
            out.append(said)
    return out if len(out) <= MAX_SAID else [out[0], *out[len(out) - MAX_SAID + 1:]]


def _shown(said: Sequence[SaidPayload]) -> list[str]:
    """The fields worth saying: flags, and any field whose value differed between calls."""
    keys = list(dict.fromkeys(key for entry in said for key in entry.fields))
    return [key for key in keys if any(entry.fields.get(key) in ("true", "false") for entry in said)
            or len({entry.fields.get(key) for entry in said}) > 1]


def _arguments(call: str) -> dict[str, str]:
    inner = call[call.find("(") + 1:-1]
    pairs = [part.split("=", 1) for part in inner.split(", ") if "=" in part]
    return {name: value for name, value in pairs}


def _change(before: SaidPayload, after: SaidPayload, keys: Sequence[str]) -> str:
    """``with `limit=100` instead of `limit=10`, `truncated` was false instead of true`` when the two calls differ
    in one argument (passed or not) and a shown field differs; "" otherwise."""
    one, two = _arguments(before.call), _arguments(after.call)
    differ = [name for name in dict.fromkeys([*one, *two]) if one.get(name) != two.get(name)]
    fields = [key for key in keys if before.fields.get(key) != after.fields.get(key)]
    if len(differ) != 1 or not fields or before.call.split("(")[0] != after.call.split("(")[0]:
        return ""
    name = differ[0]
    then = f"`{name}={one[name]}`" if name in one else f"no `{name}`"
    now = f"`{name}={two[name]}`" if name in two else f"no `{name}`"
    held = ", ".join(f"`{key}` was {after.fields.get(key, 'absent')} instead of {before.fields.get(key, 'absent')}"
                     for key in fields)
    return f"with {now} instead of {then}, {held}"


def text(said: Sequence[SaidPayload]) -> str:
    """What the calls said, in one sentence for any agent ("" when no field is worth saying)."""
    keys = _shown(said)
    if not keys:
        return ""
    told = "; ".join(f"`{entry.call}` -> " + ", ".join(f"`{key}: {entry.fields[key]}`" for key in keys
                                                      if key in entry.fields) for entry in said)
    changes = [found for at, entry in enumerate(said) for other in said[at + 1:]
               if (found := _change(entry, other, keys))]
    return f" Beside the records, by call: {told}" + (f": {'; '.join(changes[:2])}." if changes else ".")
