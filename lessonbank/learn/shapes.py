"""Observed shapes: the structure and types of what a tool returned, kept as a fact without an LLM.

A small agent that calls ``list_users("ops")`` and loops over the result gets the dict's keys, not the
users; one that adds up ``reading["kwh"]`` gets text, not numbers; one that sums every job's
``seconds`` misses the ``state`` beside it. A run that saw the result has seen what the next run needs::

    `list_jobs(...)` returns [{'id': str, 'seconds': float, 'state': str ('cancelled' | 'done')}, ...]: its
    records are `result`.

Any result is described: a record and its keys, a list of records or of scalars (with their element type), nesting,
what a string is when that changes the numbers beside it (a number written as text, a few words shared by the
records such as a status, a unit or a currency, a text's form: a table's separator and header, a byte-order mark,
decimal commas; ``core.specimen``; how a string is written when all its values share a form, its digits and
letters masked: ``'offset': str written like "+99:99"``), the values a flag held (``'truncated': bool (true in 2 of
3 results seen)``: the records are only part of them; a field of records says whether they held one value or
both, never how many), and where its records are. What is kept, so that what the run read cannot write the next
run's instructions:

- only the structure: keys, type names, a string field's words when they are a few plain words, and flags'
  values; every key must be a plain name, else nothing is kept (a page cannot smuggle a sentence in as a key);
- from the recorder's specimen of a tool call's result (``StepRecord.tool_results``), in any action step, failed
  or not: a run that looped over the result without printing it failed on exactly what the next run needs;
- or from what a step printed of one tool's result (``r = tool(...)`` and ``print(r)``, ``r`` not bound to anything
  else in between, ``print(f"got {r}")``, or ``print(tool(...))``; the first literal of the output, or the whole
  output for a tool that returns text);
- at most ``specimen.MAX_KEYS`` keys per dict and ``specimen.MAX_DEPTH`` levels, at most ``MAX_SHAPE`` characters
  (its flags' values not counted: a shape is not lost for saying them).

Such a fact (origin ``observed``, tag ``shape``) is given from the run that observed it. Its fingerprint is the tool
and the shape without what its values held (its flags' values, its strings' forms, its fields' words), so every run
that sees the same tool's same shape adds evidence to one fact, the values its flags held to its counts, and its
forms and words to its own (``consolidate.recounted``, ``walk.merged``). A run applied it when
its code subscripts the records' path or reads a field it names; a failed run blames it only when one of its
failing lines does.

With each tool's shape goes what the fields beside its records held after each call of it, the call's numbers
kept (``said``: ``search(query=..., limit=10)`` -> ``truncated: true``): which arguments got which answer, and
how many records each call got (``walk.count_at``): as many as a number it passed asked for, there may be more.

The fact also names the line that got the result (``call_line``; a ToolCallingAgent's call as the line that makes
it) when the step made that one call of the tool and
every value it passed came from the run's task (``params``) or is a setting of its own (a flag, a small number:
``limit=50``): the builder gives it with the next task's values, its settings as they were. A number the run
worked out from the task is the task's, not a setting, and would hand another question this one's period: a year,
a number passed as a time or bound (``month=3`` for "in March", ``since=...``), a number the task writes as part
of one of its values (``2`` of "2024-01-02", ``3`` of "Q3") or a month it names (``setting``).
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from dataclasses import dataclass, replace
from typing import Any

from lessonbank.core import specimen
from lessonbank.core.models import ShapePayload
from lessonbank.core.payloads import SaidPayload
from lessonbank.learn import params, said, walk
from lessonbank.learn.printed import SKIPPED, printed_tool
from lessonbank.learn.view import Returned, RunView, Step

MAX_SHAPE = 400
MAX_SHAPES = 3
MAX_CALL = 200
MAX_SETTING = 10_000  # a larger number is more likely a value the run read (an id, an amount) than a setting
YEARS = range(1900, 2101)  # a number in here is a year more likely than a setting
# A keyword's words (``start_date``, ``fromDate``) that make the number passed by it a time or a bound of the task's
TIMELY = frozenset({"year", "years", "month", "months", "week", "weeks", "day", "days", "weekday", "date", "dates",
                    "quarter", "hour", "hours", "minute", "minutes", "time", "period", "from", "to", "since", "until",
                    "start", "end", "before", "after"})
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")
_WORD_PART = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")
_DIGITS = re.compile(r"\d+")
_MONTH = re.compile(r"\b(?:" + "|".join(MONTHS) + r"|(?:Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)\.?)\b")
MORE_LEAF = "..."  # a subtree deeper than shown
TAG = "shape"
_TOOL = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,60}")


@dataclass(frozen=True)
class Shape:
    """One tool's result structure as a run saw it (``structure``: ``ShapePayload``'s tree); ``path`` leads to its
    records (None: it holds none), ``steps`` is the ``seq`` of the step that saw it, ``call`` the line that got it
    ("" when none can be given: ``call_line``)."""

    tool: str
    structure: Any
    path: tuple[str, ...] | None
    steps: tuple[int, ...]
    call: str = ""
    said: tuple[SaidPayload, ...] = ()
    count: int | None = None  # how many records the result held (None: not known)

    @property
    def shape(self) -> str:
        """The structure as it reads."""
        return describe(self.structure)

    @property
    def payload(self) -> ShapePayload:
        return ShapePayload(tool=self.tool, structure=self.structure,
                            records=list(self.path) if self.path is not None else None, call=self.call,
                            said=list(self.said))

    @property
    def text(self) -> str:
        return text(self.payload)

    @property
    def fingerprint(self) -> str:
        """The tool, the structure without its flags' values, its strings' written forms and its fields' words
        (``walk.valueless``), and the path: every result of that form is one fact, whatever its values held."""
        form = describe(walk.valueless(self.structure))
        return hashlib.sha256(f"{TAG}|{self.tool}|{form}|{self.path}".encode()).hexdigest()[:32]


def fingerprint_of(payload: ShapePayload) -> str:
    """The fingerprint a stored shape has by the current rule (``Shape.fingerprint``), whichever rule keyed it."""
    path = tuple(payload.records) if payload.records is not None else None
    return Shape(payload.tool, payload.structure, path, ()).fingerprint


def _text_form(form: dict[str, Any]) -> str:
    if form.get("holds"):
        return f"{form['holds'].upper()} as text"
    parts = [f"a table of {form['lines']} lines" if form.get("lines") else "a table",
             f"{json.dumps(form['separator'])} between fields"]
    if form.get("header"):
        parts.append(f"header {json.dumps(form['separator'].join(form['header']))}")
    if form.get("bom"):
        parts.append("starting with a byte-order mark ('\\ufeff')")
    if form.get("decimal_comma"):
        parts.append('decimal commas ("12,50")')
    return ", ".join(parts)


def _flag(leaf: dict[str, Any], unit: str) -> str:
    """A flag's values as seen: ``bool (true in all 3 results seen)``, ``bool (true in 2 of 3 results seen)``,
    ``bool (false in every record seen)``, ``bool (true in some records, false in others)``."""
    true, false = int(leaf.get("true", 0)), int(leaf.get("false", 0))
    seen = true + false
    if not true or not false:
        value = "true" if true else "false"
        if unit == "record":
            return f"bool ({value} in every record seen)"
        return f"bool ({value} in {'the one result' if seen == 1 else f'all {seen} results'} seen)"
    if unit == "record":
        return "bool (true in some records, false in others)"
    return f"bool (true in {true} of {seen} results seen)"


def _written(like: Any) -> str:
    """A string's written forms as they read (``"+99:99"`` or ``"-99:99"``; "" for none, or for what is no form)."""
    if not isinstance(like, list) or not 0 < len(like) <= specimen.MAX_FORMS or not all(map(specimen.is_form, like)):
        return ""
    return " or ".join(f'"{form}"' for form in like)


def describe(structure: Any, unit: str = "result") -> str:
    """A result's structure as it reads: ``{'data': {'items': [{'name': str, 'price': str holding a number},
    ...], 'truncated': bool (true in the one result seen)}}``; ``unit``: what a flag's values were seen in."""
    if isinstance(structure, dict) and "fields" in structure:
        inner = ", ".join(f"'{key}': {describe(value, unit)}" for key, value in structure["fields"])
        return "{" + inner + (f", {walk.MORE}" if structure.get("more") else "") + "}"
    if isinstance(structure, dict) and "items" in structure:
        return f"[{describe(structure['items'], 'record')}, {walk.MORE}]"
    if walk.is_flag(structure):
        return _flag(structure, unit)
    if isinstance(structure, dict) and "type" in structure:
        if structure.get("text"):
            return f"{structure['type']}: {_text_form(structure['text'])}"
        if structure.get("values"):
            return f"{structure['type']} ({' | '.join(repr(v) for v in structure['values'])})"
        if structure.get("number"):
            like = structure.get("like")
            return f"{structure['type']} holding a number" + (f' written like "{like}"' if like else "")
        if forms := _written(structure.get("like")):
            return f"{structure['type']} written like {forms}"
        return str(structure["type"])
    return str(structure)


def path(keys: list[str] | tuple[str, ...]) -> str:
    """``('data', 'items')`` -> ``['data']['items']``."""
    return "".join(f"['{key}']" for key in keys)


def fields(structure: Any, depth: int = 0) -> dict[str, Any]:
    """{key: its leaf or subtree} of every field of a structure, nested ones and records' included."""
    found: dict[str, Any] = {}
    if depth > walk.MAX_PATH or not isinstance(structure, dict):
        return found
    if "items" in structure:
        return fields(structure["items"], depth + 1)
    for key, value in structure.get("fields", []):
        found.setdefault(key, value)
        found.update({k: v for k, v in fields(value, depth + 1).items() if k not in found})
    return found


def beside(payload: ShapePayload) -> list[str]:
    """The scalar fields next to a result's records (``returned``, ``truncated``, ``page``, a unit's words; not a
    plain string such as a name, nor one only written in a form, such as a date): what they say
    about the records, such as that they are only part of them, is what a run that only loops over them misses."""
    if not payload.records:
        return []
    node = payload.structure
    for key in payload.records[:-1]:
        node = dict(node.get("fields", [])).get(key) if isinstance(node, dict) else None
    if not isinstance(node, dict):
        return []
    return [key for key, leaf in node.get("fields", []) if key != payload.records[-1]
            and ((isinstance(leaf, str) and leaf not in ("str", "NoneType", MORE_LEAF))
                 or (isinstance(leaf, dict) and "type" in leaf and not isinstance(leaf.get("like"), list)))][:4]


def described_keys(payload: ShapePayload) -> set[str]:
    """The keys of a shape whose strings are described (a number as text, shared words, a text's form): what the
    shape teaches beyond the keys themselves."""
    return {key for key, leaf in fields(payload.structure).items() if isinstance(leaf, dict) and "type" in leaf}


def text(payload: ShapePayload, with_call: bool = True) -> str:
    """The text of a shape (without the line that got its result unless ``with_call``)."""
    records = f": its records are `result{path(payload.records)}`" if payload.records is not None else ""
    came = f" It came back from `{payload.call}`." if payload.call and with_call else ""
    return f"`{payload.tool}(...)` returns {describe(payload.structure)}{records}.{came}"


def call_line(code: str, tool: str, task: str) -> str:
    """The line of ``code`` that assigned ``tool``'s result to a name (``rows = get_sales(region="North")``), or
    the call alone when it assigned it to none, when it is the code's only call of ``tool`` and every value it
    passes is a constant that came from ``task`` (``params``), at least one, or a setting (``setting``:
    ``limit=50``): the next task's values can be put in. "" otherwise (a word of the run's own, a value it
    computed, several calls: which one got the result?)."""
    if not task:
        return ""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return ""
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
             and node.func.id == tool]
    if len(calls) != 1:
        return ""
    values = [value for value in (*calls[0].args, *(keyword.value for keyword in calls[0].keywords))
              if isinstance(value, ast.Constant)]
    if not values or any(keyword.arg is None for keyword in calls[0].keywords) or len(values) != len(
            calls[0].args) + len(calls[0].keywords):
        return ""
    line = next((node for node in tree.body if isinstance(node, ast.Assign) and node.value is calls[0]
                 and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)), None)
    found = ast.get_source_segment(code, line or calls[0]) or ""
    if not found or "\n" in found or "`" in found or len(found) > MAX_CALL:
        return ""
    flowing = {param.value for param in params.flows([calls[0]], task)}
    keywords = {id(keyword.value): keyword.arg or "" for keyword in calls[0].keywords}
    if not flowing or not all(str(value.value) in flowing or setting(value, task, keywords.get(id(value), ""))
                              for value in values):
        return ""
    return found


def setting(node: ast.Constant, task: str = "", keyword: str = "") -> bool:
    """Whether a constant a call passes (by ``keyword``, "" by position) is a setting the run chose itself, not a
    value it could have read or another task would change: a flag, None, or a number below ``MAX_SETTING``
    (``limit=50``, ``verbose=True``). It stays in the call given to the next task: it may be what got the records
    back whole. A number is never a setting when it is a year, passed by a keyword of time or bounds
    (``TIMELY``), or one of ``task``'s numbers (``task_numbers``): the run worked it out from its task."""
    value = node.value
    if value is None or isinstance(value, bool):
        return True
    if not isinstance(value, int | float) or abs(value) >= MAX_SETTING:
        return False
    timely = any(part.lower() in TIMELY for part in _WORD_PART.findall(keyword))
    return not (timely or value in YEARS or value in task_numbers(task))


def task_numbers(task: str) -> set[int]:
    """Every number ``task`` writes, alone or as part of a value (``2024``, ``1`` and ``2`` of "2024-01-02", ``3``
    of "Q3", ``12`` and ``50`` of "12.50"), and the number of each month it names ("March": 3)."""
    head = task[:params.MAX_TASK]
    found = {int(digits) for digits in _DIGITS.findall(head) if len(digits) <= 9}
    return found | {[month[:3] for month in MONTHS].index(match.group(0)[:3]) + 1 for match in _MONTH.finditer(head)}


def _printed_shape(step: Step, tools: set[str]) -> Shape | None:
    found = printed_tool(step.code, tools)
    if found is None:
        return None
    tool, alone = found
    printed = step.logs.strip()
    value = walk.read_literal(printed) if alone else None
    if value is None:
        value = walk.first_literal(printed) if not alone else None
    if value is None and alone:
        value = printed  # a tool that returns text: the text printed whole
    return _shape(tool, value, step.seq) if value is not None else None


def _kept_shape(step: Step, result: Returned, tools: set[str]) -> Shape | None:
    name = result.tool
    if not _TOOL.fullmatch(name) or name in SKIPPED or (tools and name not in tools):
        return None
    return _shape(name, result.structure, step.seq, kept=True)


def _shape(tool: str, value: Any, seq: int, kept: bool = False) -> Shape | None:
    try:
        structure = walk.structure(value, kept=kept)
    except (walk.Unfit, RecursionError):
        return None
    if len(describe(structure)) > MAX_SHAPE:
        structure = walk.formless(structure)  # the structure is what matters; its strings' forms come second
    if structure in ("str", "NoneType") or len(describe(walk.valueless(structure))) > MAX_SHAPE:
        return None  # a bare string or nothing says nothing of what the next run should do with it
    paths = walk.record_paths(value) if not isinstance(value, str) else []
    records = paths[0] if len(paths) == 1 else None
    count = walk.count_at(value, records, kept) if records is not None else None
    return Shape(tool, structure, records, (seq,), count=count)


def _called(step: Step, tool: str) -> str:
    """A step of tool calls' call of ``tool`` as the line that makes it ("" unless it made one that did not fail):
    such a step's call is read like a CodeAgent's line."""
    lines = [call.line for call in step.calls if call.tool == tool and not call.failed]
    return lines[0] if len(lines) == 1 else ""


def extract(run: RunView, task: str) -> list[Shape]:
    """The shapes of tool results the run kept or printed (at most ``MAX_SHAPES``, each fingerprint once: the
    first that names the line that got its result, else the first, with the values its flags held in every step
    that saw it: ``walk.merged``); ``task``: the run's as a lesson keeps it, whose values that line may pass
    (``call_line``)."""
    known = set(run.tools or ())
    found: list[Shape] = []
    seen: list[said.Seen] = []  # every result read, for ``said``
    for step in run.actions:
        shapes = [_kept_shape(step, result, known) for result in step.returned]
        if step.code.strip():
            shapes.append(_printed_shape(step, known))
        mine: dict[str, Shape] = {}  # a step's kept and printed result of one call are one result
        for shape in shapes:
            if shape is not None:
                mine.setdefault(shape.fingerprint, shape)
        seen += [said.Seen(step.seq, shape.tool, shape.structure, shape.path, shape.count) for shape in mine.values()]
        calls: dict[str, str] = {}  # tool -> its call line in this step: the code parsed once per tool
        for shape in mine.values():
            same = next((at for at, other in enumerate(found) if other.fingerprint == shape.fingerprint), None)
            if same is None and len(found) >= MAX_SHAPES:
                continue
            if shape.tool not in calls and (same is None or not found[same].call):
                calls[shape.tool] = call_line(step.code or _called(step, shape.tool), shape.tool, task)
            if same is None:
                found.append(replace(shape, call=calls[shape.tool]))
                continue
            both = walk.merged(found[same].structure, shape.structure)
            found[same] = replace(shape, structure=both, call=calls[shape.tool]) \
                if not found[same].call and calls.get(shape.tool) else replace(found[same], structure=both)
    by_tool = said.of_run(run, seen)
    return [replace(shape, said=tuple(by_tool.get(shape.tool, ()))) for shape in found]
