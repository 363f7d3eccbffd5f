"""Observed shapes: what a tool's result looks like, kept as a fact without an LLM.

A small agent that calls ``search_catalog("lamp")`` and loops over the result gets the dict's keys, not
the products: the items sit under ``data.items``. A run that printed the result has seen where they are,
and the next run needs exactly that, in a form it can use::

    `search_catalog(...)` returns {'status': str, 'data': {'items': [{'name': str, 'price': float}, ...],
    'total': int}, 'took_ms': int}: its records are `result['data']['items']`.

What is kept, so that what the run read cannot write the next run's instructions:

- only the result's structure: its keys and the type names of its values, never a value. Every key must
  be a plain name (letters, digits, ``_``, at most 40 characters), else nothing is kept: a page cannot
  smuggle a sentence in as a key;
- from what the recorder kept of a tool call's result (``StepRecord.tool_results``: keys and placeholders
  of the types, ``lessonbank.core.specimen``), in any action step, failed or not: a run that looped over
  the result without printing it failed on exactly what the next run needs to know;
- or from a step that did not fail, printed one tool call's result and nothing else (``r = tool(...)``
  and ``print(r)``, or ``print(tool(...))``), and whose printed output reads whole as one Python or JSON
  literal (at most ``walk.MAX_PRINTED`` characters);
- only a dict with exactly one list of records (a list of dicts) inside it, and no empty list anywhere (an
  empty result says nothing of the records' fields);
- at most ``specimen.MAX_KEYS`` keys per dict and ``specimen.MAX_DEPTH`` levels (``walk.structure``), at most
  ``MAX_SHAPE`` characters.

Such a fact (origin ``observed``, tag ``shape``) is given from the run that observed it. Its fingerprint
is the tool and the shape, so every run that prints the same tool's same shape adds evidence to one fact.
A run applied it when its code subscripts the records' path (``['data']['items']``); a failed run blames
it only when one of its failing lines does, since that is where a wrong shape would fail.

The fact also names the line that got the records back (`` Records came back from `result =
search_catalog(query="mug")`.``, or the call alone when the step assigned its result to no name) when the step
made that one call of the tool and passed it only string constants, each a word of the run's task
(``call_line``): the instructions builder puts the next task's values in and gives it as the line to write,
with the loop over its records. Told only where the records are, 1.5B runs asked the tool for words of their
own ("price < 27", "product:chair") and got none back. Nothing of the line comes from what the run read: its
code, its task's words.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import re
from dataclasses import dataclass, replace
from typing import Any

from lessonbank.core.models import ShapePayload
from lessonbank.learn import fixtext, render, walk
from lessonbank.learn.view import Returned, RunView, Step

MAX_SHAPE = 300
MAX_SHAPES = 3
MAX_CALL = 200
TAG = "shape"
_TOOL = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,60}")
_BUILTINS = frozenset(dir(builtins))


@dataclass(frozen=True)
class Shape:
    """One tool's result structure as a run printed it (``structure``: ``ShapePayload``'s tree); ``steps`` is the
    ``seq`` of the step that printed it, ``call`` the line of that step that got the records back ("" when none
    can be given: ``call_line``)."""

    tool: str
    structure: Any
    path: tuple[str, ...]
    steps: tuple[int, ...]
    call: str = ""

    @property
    def shape(self) -> str:
        """The structure as it reads."""
        return render.describe(self.structure)

    @property
    def payload(self) -> ShapePayload:
        return ShapePayload(tool=self.tool, structure=self.structure, records=list(self.path), call=self.call)

    @property
    def text(self) -> str:
        return render.shape(self.payload)

    @property
    def fingerprint(self) -> str:
        return hashlib.sha256(f"{TAG}|{self.tool}|{self.shape}".encode()).hexdigest()[:32]


def _printed_call(code: str, tools: set[str]) -> str | None:
    """The tool whose result the code prints, and nothing else: ``r = tool(...); print(r)`` or ``print(tool(...))``."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    prints = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id == "print"]
    if len(prints) != 1 or len(prints[0].args) != 1 or prints[0].keywords:
        return None
    shown = prints[0].args[0]
    if isinstance(shown, ast.Name):
        assigned = [node.value for node in ast.walk(tree) if isinstance(node, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == shown.id for t in node.targets)]
        if len(assigned) != 1:
            return None
        shown = assigned[0]
    if not (isinstance(shown, ast.Call) and isinstance(shown.func, ast.Name)):
        return None
    name = shown.func.id
    known = name in tools if tools else name not in _BUILTINS
    return name if known and name != "final_answer" else None


def call_line(code: str, tool: str, task: str) -> str:
    """The line of ``code`` that assigned ``tool``'s result to a name (``result = search_catalog(query="mug")``), or
    the call alone when it assigned it to none (``print(search_catalog("mug"))``: ``search_catalog("mug")``), when
    it is the code's only call of ``tool`` and passes only string constants, at least one, each a word of
    ``task``: the next task's values can be put in. "" otherwise (a query of the run's own words, a value it
    computed, several calls: which one got the records?)."""
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
    values = [*calls[0].args, *(keyword.value for keyword in calls[0].keywords)]
    if not values or any(keyword.arg is None for keyword in calls[0].keywords) or not all(
            isinstance(value, ast.Constant) and isinstance(value.value, str) for value in values):
        return ""
    line = next((node for node in tree.body if isinstance(node, ast.Assign) and node.value is calls[0]
                 and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)), None)
    text = ast.get_source_segment(code, line or calls[0]) or ""
    if not text or "\n" in text or "`" in text or len(text) > MAX_CALL:
        return ""
    return text if len(fixtext.task_constants(text, task) or []) == len(values) else ""


def _printed_shape(step: Step, tools: set[str]) -> Shape | None:
    tool = _printed_call(step.code, tools)
    if tool is None:
        return None
    return _shape(tool, walk.read_literal(step.printed), step.seq)


def _kept_shape(step: Step, result: Returned, tools: set[str]) -> Shape | None:
    name = result.tool
    if not _TOOL.fullmatch(name) or name == "final_answer" or (tools and name not in tools):
        return None
    return _shape(name, result.structure, step.seq)


def _shape(tool: str, value: Any, seq: int) -> Shape | None:
    if not isinstance(value, dict):
        return None
    paths = walk.record_paths(value)
    if len(paths) != 1:
        return None
    try:
        structure = walk.structure(value)
    except (walk.Unfit, RecursionError):
        return None
    if len(render.describe(structure)) > MAX_SHAPE:
        return None
    return Shape(tool, structure, paths[0], (seq,))


def extract(run: RunView, task: str) -> list[Shape]:
    """The shapes of tool results the run kept or printed (at most ``MAX_SHAPES``, each fingerprint once: the
    first that names the line that got its records back, else the first); ``task``: the run's as a lesson keeps
    it, whose words that line may pass (``call_line``)."""
    known = set(run.tools or ())
    found: list[Shape] = []
    for step in run.actions:
        shapes = [_kept_shape(step, result, known) for result in step.returned]
        if not step.failed and step.code.strip():
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
