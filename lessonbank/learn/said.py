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

A call that passed a number (``limit=10``, ``page_size=50``, ``10`` by position) and got exactly that many records
back may have been cut at it, whatever the fields beside them say, or with none beside a bare list::

    `search_tickets(project=..., limit=10)` returned 10 records, as many as `limit=10` asked for: there may be
    more than it returned.

Nothing here knows a field's or an argument's name: any flag beside records, any field that was null after one call
and not after another, any argument whose value differed between two calls of the tool, any number equal to how
many records came back. What is kept is the structure, the numbers the calls passed and how many records came
back; a word, a text or a computed value is ``...``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

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


class Seen(NamedTuple):
    """A result a shape was read from: its step, its tool, its structure, the path to its records (None: none) and
    how many records it held (None: not known)."""

    seq: int
    tool: str
    structure: Any
    records: Sequence[str] | None
    held: int | None = None


def of_run(run: RunView, shaped: Iterable[Seen]) -> dict[str, list[SaidPayload]]:
    """{tool: what each of its calls said} from ``shaped``, each result paired with its step's one call of that
    tool; a tool whose calls said nothing worth saying (no flag, no field that changed, no call that got as many
    records as a number it passed) is left out."""
    steps = {step.seq: step for step in run.actions}
    found: dict[str, list[SaidPayload]] = {}
    for seen in shaped:
        step = steps.get(seen.seq)
        calls = {call_text(call) for call in step.calls if call.tool == seen.tool and not call.failed} if step \
            else set()
        if len(calls) != 1 or "" in calls:
            continue
        entry = SaidPayload(call=calls.pop(), fields=beside(seen.structure, seen.records), records=seen.held)
        if entry.fields or cut_at(entry):
            found[seen.tool] = merged(found.get(seen.tool, []), [entry])
    return {tool: kept for tool, kept in found.items() if _shown(kept) or any(map(cut_at, kept))}


def _key(said: SaidPayload) -> tuple[str, str, tuple[str, ...]]:
    return said.call, repr(sorted(said.fields.items())), tuple(cut_at(said))


def merged(old: Sequence[SaidPayload], new: Sequence[SaidPayload]) -> list[SaidPayload]:
    """``old`` and then ``new``, each (call, fields, the numbers it got as many records as: ``cut_at``) once, at most
    ``MAX_SAID``: the first kept, then the latest."""
    out: list[SaidPayload] = []
    keys: set[tuple[str, str, tuple[str, ...]]] = set()
    for said in [*old, *new]:
        key = _key(said)
        if key not in keys:
            keys.add(key)
            out.append(said)
    return out if len(out) <= MAX_SAID else [out[0], *out[len(out) - MAX_SAID + 1:]]


def _passed(call: str) -> list[tuple[str, str]]:
    """(name, value) of each argument of a call as kept (``call_text``), "" as the name of one passed by position."""
    inner = call[call.find("(") + 1:-1]
    return [(name, value) if value else ("", name) for part in inner.split(", ") if part
            for name, _, value in [part.partition("=")]]


def _keyed(call: str) -> list[tuple[str, str]]:
    """(key, value) of each argument of a call as kept: its keyword, or ``#0``, ``#1``... for the first, second...
    passed by position."""
    found: list[tuple[str, str]] = []
    place = 0
    for name, value in _passed(call):
        found.append((name or f"#{place}", value))
        place += not name
    return found


def _cut_pairs(said: SaidPayload) -> list[tuple[str, str]]:
    """(key (``_keyed``), value) of the numbers the call passed (each a whole number of at least 2) that its result
    held as many records as; [] when the count is not known or none."""
    count = said.records
    if count is None or count < 2:
        return []
    return [(key, value) for key, value in _keyed(said.call) if _NUMBER.fullmatch(value) and float(value) == count]


def cut_at(said: SaidPayload) -> list[str]:
    """The numbers the call's records may have been cut at (``_cut_pairs``), as they read: ``limit=10``, or ``10``
    for one passed by position."""
    return [value if key.startswith("#") else f"{key}={value}" for key, value in _cut_pairs(said)]


def cut_arguments(said: Sequence[SaidPayload]) -> dict[str, str]:
    """{key: value} (``_keyed``: a keyword, or ``#i`` for the i-th passed by position) of the arguments a call's
    records may have been cut at (``_cut_pairs``)."""
    return {key: value for entry in said for key, value in _cut_pairs(entry)}


WIDER = 10  # how many times more a call that may have been cut asks for, when no wider call was seen


class Widened(NamedTuple):
    """A call line with each number its records may have been cut at made larger, and what says why: the larger
    value a call was seen to get fewer records than it asked for with, or ``WIDER`` times it, not tried yet."""

    line: str
    told: str


def _whole(said: Sequence[SaidPayload], name: str, below: float) -> tuple[str, int] | None:
    """(the largest value above ``below`` a call passed as ``name`` and got fewer records than: all there were, how
    many it got); None when no call did."""
    seen = [(float(value), value, entry.records) for entry in said for passed, value in _keyed(entry.call)
            if passed == name and _NUMBER.fullmatch(value) and entry.records is not None
            and below < float(value) and entry.records < float(value)]
    if not seen:
        return None
    _, value, records = max(seen)
    return value, records


def widened(line: str, said: Sequence[SaidPayload]) -> Widened:
    """``line`` (one call, alone or assigned to one name) with each argument its tool's records may have been cut at
    (``cut_arguments``: by keyword, or at the same place by position) made larger (see ``Widened``): handed on as
    it was, or without it (a tool's default may cut the same way), the call would look right; ``line`` as it is,
    ``told`` "", when it passes none of them or is no such line."""
    cut = cut_arguments(said)
    try:
        body = ast.parse(line).body if cut else []
    except (SyntaxError, ValueError, RecursionError):
        return Widened(line, "")
    node = body[0].value if len(body) == 1 and isinstance(body[0], ast.Expr | ast.Assign) else None
    if not isinstance(node, ast.Call) or "\n" in line:
        return Widened(line, "")
    edits: list[tuple[int, int, str]] = []
    told = []
    passed = [(keyword.arg or "", keyword.value) for keyword in node.keywords] + [
        (f"#{at}", value) for at, value in enumerate(node.args)]
    for key, value in passed:
        if key not in cut or not isinstance(value, ast.Constant) or str(value.value) != cut[key] \
                or isinstance(value.value, bool) or not isinstance(value.value, int) or value.end_col_offset is None:
            continue
        old, whole = value.value, _whole(said, key, float(value.value))
        new = whole[0] if whole is not None else str(old * WIDER)
        edits.append((value.col_offset, value.end_col_offset, new))
        was, now = (f"`{key}={old}`", f"`{key}={new}`") if not key.startswith("#") else (
            f"the `{old}` it passed", f"`{new}` in its place")
        asked = f"{was} returned {old} records, as many as it asked for"
        if whole is not None:
            told.append(f"{asked}; {now} returned {whole[1]}, fewer: all there were")
        else:
            told.append(f"{now} not tried yet: {asked}, so there may be more")
    raw = line.encode()  # offsets count UTF-8 bytes
    for start, end, text in sorted(edits, reverse=True):
        raw = raw[:start] + text.encode() + raw[end:]
    return Widened(raw.decode(), "; ".join(told))


def _asked(found: str) -> str:
    return f"`{found}`" if "=" in found else f"the `{found}` it passed"


def _cut(said: Sequence[SaidPayload]) -> str:
    """`` `search(q=..., limit=10)` returned 10 records, as many as `limit=10` asked for: there may be more than it
    returned.`` for each call that did ("" when none did)."""
    told = dict.fromkeys(f" `{entry.call}` returned {entry.records} records, as many as {' or '.join(map(_asked, at))}"
                         " asked for: there may be more than it returned." for entry in said if (at := cut_at(entry)))
    return "".join(list(told)[:2])


def _shown(said: Sequence[SaidPayload]) -> list[str]:
    """The fields worth saying: flags, and any field whose value differed between calls."""
    keys = list(dict.fromkeys(key for entry in said for key in entry.fields))
    return [key for key in keys if any(entry.fields.get(key) in ("true", "false") for entry in said)
            or len({entry.fields.get(key) for entry in said}) > 1]


def _arguments(call: str) -> dict[str, str]:
    """{keyword: value} of the arguments a call as kept passed by keyword (``_passed``)."""
    return {name: value for name, value in _passed(call) if name}


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
    """What the calls said, in a sentence or two for any agent ("" when nothing is worth saying): the fields beside
    the records, by call, and the calls that got as many records as a number they passed (``cut_at``)."""
    keys = _shown(said)
    if not keys:
        return _cut(said)
    told = "; ".join(dict.fromkeys(
        f"`{entry.call}` -> " + ", ".join(f"`{key}: {entry.fields[key]}`" for key in keys if key in entry.fields)
        for entry in said if any(key in entry.fields for key in keys)))
    changes = [found for at, entry in enumerate(said) for other in said[at + 1:]
               if (found := _change(entry, other, keys))]
    return f" Beside the records, by call: {told}" + (f": {'; '.join(changes[:2])}." if changes else ".") \
        + _cut(said)
