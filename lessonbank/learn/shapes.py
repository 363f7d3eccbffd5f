"""Observed shapes: the structure and types of what a tool returned, kept as a fact without an LLM.

A small agent that calls ``search_catalog("lamp")`` and loops over the result gets the dict's keys, not the
products; one that adds up ``day["visits"]`` gets text, not numbers; one that sums every transaction's
``amount`` misses the ``status`` beside it. A run that saw the result has seen what the next run needs::

    `list_transactions(...)` returns [{'id': str, 'amount': float, 'status': str ('settled' | 'void')}, ...]: its
    records are `result`.

Any result is described: a record and its keys, a list of records or of scalars (with their element type), nesting,
what a string is when that changes the numbers beside it (a number written as text, a few words shared by the
records such as a status, a unit or a currency, a text's form: a table's separator and header, a byte-order mark,
decimal commas; ``core.specimen``), and where its records are. What is kept, so that what the run read cannot
write the next run's instructions:

- only the structure: keys, type names, and a string field's words when they are a few plain words; every key
  must be a plain name, else nothing is kept (a page cannot smuggle a sentence in as a key);
- from the recorder's specimen of a tool call's result (``StepRecord.tool_results``), in any action step, failed
  or not: a run that looped over the result without printing it failed on exactly what the next run needs;
- or from what a step printed of one tool's result (``r = tool(...)`` and ``print(r)``, ``r`` not bound to anything
  else in between, ``print(f"got {r}")``, or ``print(tool(...))``; the first literal of the output, or the whole
  output for a tool that returns text);
- at most ``specimen.MAX_KEYS`` keys per dict and ``specimen.MAX_DEPTH`` levels, at most ``MAX_SHAPE`` characters.

Such a fact (origin ``observed``, tag ``shape``) is given from the run that observed it. Its fingerprint is the tool
and the shape, so every run that sees the same tool's same shape adds evidence to one fact. A run applied it when
its code subscripts the records' path or reads a field it names; a failed run blames it only when one of its
failing lines does.

The fact also names the line that got the result (``call_line``) when the step made that one call of the tool and
every value it passed came from the run's task (``params``) or is a setting of its own (a flag, a small number:
``limit=50``): the builder gives it with the next task's values, its settings as they were. A number the run
worked out from the task is the task's, not a setting, and would hand another question this one's period: a year,
a number passed as a time or bound (``month=3`` for "in March", ``since=...``), a number the task writes as part
of one of its values (``2`` of "2024-01-02", ``3`` of "Q3") or a month it names (``setting``).
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import json
import re
from dataclasses import dataclass, replace
from typing import Any

from lessonbank.core.models import ShapePayload
from lessonbank.learn import params, walk
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
MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_WORD_PART = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")
_DIGITS = re.compile(r"\d+")
_MONTH = re.compile(r"\b(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)[a-z]{0,6}\b")
MORE_LEAF = "..."  # a subtree deeper than shown
TAG = "shape"
_TOOL = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,60}")
_BUILTINS = frozenset(dir(builtins))
_SKIPPED = frozenset({"final_answer"})


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

    @property
    def shape(self) -> str:
        """The structure as it reads."""
        return describe(self.structure)

    @property
    def payload(self) -> ShapePayload:
        return ShapePayload(tool=self.tool, structure=self.structure,
                            records=list(self.path) if self.path is not None else None, call=self.call)

    @property
    def text(self) -> str:
        return text(self.payload)

    @property
    def fingerprint(self) -> str:
        return hashlib.sha256(f"{TAG}|{self.tool}|{self.shape}|{self.path}".encode()).hexdigest()[:32]


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


def describe(structure: Any) -> str:
    """A result's structure as it reads: ``{'data': {'items': [{'name': str, 'price': str holding a number},
    ...], ...}}``."""
    if isinstance(structure, dict) and "fields" in structure:
        inner = ", ".join(f"'{key}': {describe(value)}" for key, value in structure["fields"])
        return "{" + inner + (f", {walk.MORE}" if structure.get("more") else "") + "}"
    if isinstance(structure, dict) and "items" in structure:
        return f"[{describe(structure['items'])}, {walk.MORE}]"
    if isinstance(structure, dict) and "type" in structure:
        if structure.get("text"):
            return f"{structure['type']}: {_text_form(structure['text'])}"
        if structure.get("values"):
            return f"{structure['type']} ({' | '.join(repr(v) for v in structure['values'])})"
        if structure.get("number"):
            like = structure.get("like")
            return f"{structure['type']} holding a number" + (f' written like "{like}"' if like else "")
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
    plain string such as a name): what they say
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
                 or (isinstance(leaf, dict) and "type" in leaf))][:4]


def described_keys(payload: ShapePayload) -> set[str]:
    """The keys of a shape whose strings are described (a number as text, shared words, a text's form): what the
    shape teaches beyond the keys themselves."""
    return {key for key, leaf in fields(payload.structure).items() if isinstance(leaf, dict) and "type" in leaf}


def text(payload: ShapePayload, with_call: bool = True) -> str:
    """The text of a shape (without the line that got its result unless ``with_call``)."""
    records = f": its records are `result{path(payload.records)}`" if payload.records is not None else ""
    came = f" It came back from `{payload.call}`." if payload.call and with_call else ""
    return f"`{payload.tool}(...)` returns {describe(payload.structure)}{records}.{came}"


_SCOPES = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Lambda)  # their names stay inside


def _nodes(node: ast.AST) -> list[ast.AST]:
    """``node`` and what is under it, less what a comprehension or a lambda binds for itself."""
    found, todo = [], [node]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(child for child in ast.iter_child_nodes(current) if not isinstance(child, _SCOPES))
    return found


def _bindings(tree: ast.Module, tools: set[str]) -> list[tuple[tuple[int, int], str, str | None]]:
    """(where it takes effect, name, the tool whose result it holds or None) of every binding of a name in
    ``tree``: ``r = search(...)`` holds ``search``'s result from the end of its line; any other binding
    (``r = r["items"]``, ``for r in ...``, ``r += ...``, ``del r``) holds none."""
    found: list[tuple[tuple[int, int], str, str | None]] = []
    assigned: set[int] = set()
    for node in _nodes(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = node.value
            tool = value.func.id if len(targets) == 1 and isinstance(value, ast.Call) and isinstance(
                value.func, ast.Name) and _is_tool(value.func.id, tools) else None
            end = (node.end_lineno or node.lineno, node.end_col_offset or 0)
            for target in targets:
                for name in (n for n in _nodes(target) if isinstance(n, ast.Name)):
                    found.append((end, name.id, tool if name is target else None))
                    assigned.add(id(name))
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del) and id(node) not in assigned:
            found.append(((node.end_lineno or node.lineno, node.end_col_offset or 0), node.id, None))
    return sorted(found, key=lambda binding: binding[0])


def _held(bindings: list[tuple[tuple[int, int], str, str | None]], at: tuple[int, int]) -> dict[str, str]:
    """{name: tool} of the names whose last binding before ``at`` holds a tool's result."""
    last: dict[str, str | None] = {}
    for where, name, tool in bindings:
        if where > at:
            break
        last[name] = tool
    return {name: tool for name, tool in last.items() if tool is not None}


def _is_tool(name: str, tools: set[str]) -> bool:
    return name not in _SKIPPED and (name in tools if tools else name not in _BUILTINS)


def _shown(expr: ast.expr, names: dict[str, str], tools: set[str]) -> str | None:
    """The tool whose result ``expr`` shows: the result's name, the call itself, or an f-string holding one."""
    if isinstance(expr, ast.Name):
        return names.get(expr.id)
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and _is_tool(expr.func.id, tools):
        return expr.func.id
    if isinstance(expr, ast.JoinedStr):
        shown = [tool for part in expr.values if isinstance(part, ast.FormattedValue)
                 and (tool := _shown(part.value, names, tools)) is not None]
        return shown[0] if len(shown) == 1 else None
    return None


def printed_tool(code: str, tools: set[str]) -> tuple[str, bool] | None:
    """(the tool whose result the step printed, whether the print showed it alone), when exactly one print of the
    step shows one tool's result (see the module); None otherwise. A printed name is the result of the tool whose
    direct call it was last bound to before the print (``x = a(); x = b(); print(x)``: ``b``); bound since to
    anything else, part of the result included (``rows = [r for r in rows if ...]``, ``r = r["items"]``), it
    shows no tool's result as it came back, and no shape is taken from it (the recorder's specimen keeps it)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    bindings = _bindings(tree, tools)
    prints = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id == "print" and not node.keywords]
    shown = [(tool, len(node.args) == 1 and not isinstance(node.args[0], ast.JoinedStr))
             for node in prints for arg in node.args
             if (tool := _shown(arg, _held(bindings, (node.lineno, node.col_offset)), tools)) is not None]
    if len(shown) != 1:
        return None
    tool, alone = shown[0]
    return tool, alone and len(prints) == 1


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
    return found | {MONTHS.index(match.group(1)[:3].lower()) + 1 for match in _MONTH.finditer(head)}


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
    if not _TOOL.fullmatch(name) or name in _SKIPPED or (tools and name not in tools):
        return None
    return _shape(name, result.structure, step.seq)


def _shape(tool: str, value: Any, seq: int) -> Shape | None:
    try:
        structure = walk.structure(value)
    except (walk.Unfit, RecursionError):
        return None
    if structure in ("str", "NoneType") or len(describe(structure)) > MAX_SHAPE:
        return None  # a bare string or nothing says nothing of what the next run should do with it
    paths = walk.record_paths(value) if not isinstance(value, str) else []
    return Shape(tool, structure, paths[0] if len(paths) == 1 else None, (seq,))


def extract(run: RunView, task: str) -> list[Shape]:
    """The shapes of tool results the run kept or printed (at most ``MAX_SHAPES``, each fingerprint once: the
    first that names the line that got its result, else the first); ``task``: the run's as a lesson keeps it,
    whose values that line may pass (``call_line``)."""
    known = set(run.tools or ())
    found: list[Shape] = []
    for step in run.actions:
        shapes = [_kept_shape(step, result, known) for result in step.returned]
        if step.code.strip():
            shapes.append(_printed_shape(step, known))
        calls: dict[str, str] = {}  # tool -> its call line in this step: the code parsed once per tool
        for shape in shapes:
            if shape is None:
                continue
            same = next((at for at, other in enumerate(found) if other.fingerprint == shape.fingerprint), None)
            if (same is None and len(found) >= MAX_SHAPES) or (same is not None and found[same].call):
                continue
            if shape.tool not in calls:
                calls[shape.tool] = call_line(step.code, shape.tool, task)
            if same is None:
                found.append(replace(shape, call=calls[shape.tool]))
            elif calls[shape.tool]:
                found[same] = replace(shape, call=calls[shape.tool])
    return found
