"""The tools a lesson is of use with: a lesson about a tool the agent does not have is not given to its runs.

One bank may serve an agent doing several jobs, or several agents with other tools. A lesson that is code
about a tool only helps a run that can call that tool: an observed shape ("`get_invoice(...)` returns
{...}") describes one tool's result, an observed fix is a failing and a corrected call, an observed failure a
call of one tool and what it raised, a recipe is code that calls tools. Given to an agent without them, such a
lesson is noise at best, and a 1.5B model copies it.

``needed_tools`` names the tools a lesson calls: for code, the names it calls without defining them that
are not Python's builtins; ``usable`` says whether an agent with ``tools`` can use the lesson (prose, and
code that calls no tool, always). Code that does not parse names nothing (it is given as before).

The other way round, a lesson about a tool the task will use (``tools_used``, ``about_tools``) bears on it whatever
the task's words: what was learnt about a tool carries to any question about it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection

from lessonbank.core.models import Lesson, Recipe
from lessonbank.learn import code


def called_tools(recipe: Recipe) -> list[str]:
    """The tools a recipe calls, sorted: for code, the names it calls without defining them that are not Python's
    builtins; for tool calls, their names. Code that does not parse names none."""
    if recipe.language != "python":
        try:
            calls = json.loads(recipe.code)
        except (ValueError, RecursionError):
            return []
        names = {call.get("name") for call in calls if isinstance(call, dict)} if isinstance(calls, list) else set()
        return sorted(name for name in names if isinstance(name, str))
    return sorted(code.called(recipe.code) or ())


def needed_tools(lesson: Lesson) -> set[str] | None:
    """The tools ``lesson`` calls (see the module); None for a lesson that is no code about tools."""
    recipe = lesson.recipe
    if recipe is not None:
        return set(recipe.tools if recipe.tools is not None else called_tools(recipe)) or None
    if lesson.origin != "observed":
        return None
    if lesson.shape is not None:
        return {lesson.shape.tool}
    if lesson.failure is not None:
        return {lesson.failure.tool}
    if lesson.fix is None:
        return None
    needed: set[str] = set()
    for line in (lesson.fix.failed, lesson.fix.fixed):
        needed |= code.called(line) or set()
    return needed or None


def usable(lesson: Lesson, tools: Collection[str] | None) -> bool:
    """Whether an agent with ``tools`` (None: not known) can use ``lesson``: it calls no tool the agent lacks."""
    if tools is None:
        return True
    needed = needed_tools(lesson)
    return needed is None or needed.issubset(tools)


_NAMED = re.compile(r"[A-Za-z_][A-Za-z0-9_]{1,60}")
NOT_TOOLS = frozenset({"final_answer"})


def tools_used(task: str, tools: Collection[str] | None) -> set[str]:
    """The tools a task will use: those of the agent's ``tools`` the task names, else all of them (Python's
    builtins and ``final_answer`` aside); none when the agent's tools are not known."""
    if not tools:
        return set()
    mine = {tool for tool in tools if tool not in code.BUILTINS and tool not in NOT_TOOLS}
    named = {word for word in _NAMED.findall(task[:4000])} & mine
    return named or mine


def mentioned_tools(lesson: Lesson) -> set[str]:
    """The tools a lesson is about: those its code calls (``needed_tools``), else the names its text writes as
    calls or code (``get_sales(``, `` `get_sales` ``)."""
    needed = needed_tools(lesson)
    if needed:
        return needed
    text = lesson.text[:4000]
    return {match.group(1) or match.group(2) for match in _MENTION.finditer(text)}


_MENTION = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]{1,60})\(|`([A-Za-z_][A-Za-z0-9_]{1,60})(?:\(\))?`")


def about_tools(lesson: Lesson, using: Collection[str]) -> bool:
    """Whether ``lesson`` is about one of the tools a task will use (``tools_used``)."""
    return bool(mentioned_tools(lesson) & set(using))
