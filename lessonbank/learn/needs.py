"""The tools a lesson is of use with: a lesson about a tool the agent does not have is not given to its runs.

One bank may serve an agent doing several jobs, or several agents with other tools. A lesson that is code
about a tool only helps a run that can call that tool: an observed shape ("`get_invoice(...)` returns
{...}") describes one tool's result, an observed fix is a failing and a corrected call, a recipe is code
that calls tools. Given to an agent without them, such a lesson is noise at best, and a 1.5B model copies
it: in the learning benchmark with every task in one bank, the search_catalog task's first run was handed
the shape of ``get_invoice`` (the tasks share "in euros").

``needed_tools`` names the tools a lesson calls: for code, the names it calls without defining them that
are not Python's builtins; ``usable`` says whether an agent with ``tools`` can use the lesson (prose, and
code that calls no tool, always). Code that does not parse names nothing (it is given as before).
"""

from __future__ import annotations

import ast
import builtins
import json
from collections.abc import Collection

from lessonbank.core import specimen
from lessonbank.core.models import Lesson
from lessonbank.learn import fixtext

_BUILTINS = frozenset(dir(builtins))


def _called(code: str) -> set[str] | None:
    """Names ``code`` calls that it neither defines nor imports, builtins aside; None if it does not parse."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    called: set[str] = set()
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            called.add(node.func.id)
        elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            bound.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return called - bound - _BUILTINS


def needed_tools(lesson: Lesson) -> set[str] | None:
    """The tools ``lesson`` calls (see the module); None for a lesson that is no code about tools."""
    recipe = lesson.recipe
    if recipe is not None:
        if recipe.language != "python":
            try:
                calls = json.loads(recipe.code)
            except (ValueError, RecursionError):
                return None
            names = {call.get("name") for call in calls if isinstance(call, dict)} if isinstance(calls, list) else set()
            return {name for name in names if isinstance(name, str)} or None
        return _called(recipe.code) or None
    if lesson.origin != "observed":
        return None
    tool = specimen.tool_of(lesson.text)
    if tool is not None:
        return {tool}
    lines = fixtext.lines(lesson.text)
    if lines is None:
        return None
    needed = set()
    for line in lines:
        needed |= _called(line) or set()
    return needed or None


def usable(lesson: Lesson, tools: Collection[str] | None) -> bool:
    """Whether an agent with ``tools`` (None: not known) can use ``lesson``: it calls no tool the agent lacks."""
    if tools is None:
        return True
    needed = needed_tools(lesson)
    return needed is None or needed.issubset(tools)
