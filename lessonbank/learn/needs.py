"""The tools a lesson is of use with: a lesson about a tool the agent does not have is not given to its runs.

One bank may serve an agent doing several jobs, or several agents with other tools. A lesson that is code
about a tool only helps a run that can call that tool: an observed shape ("`get_user(...)` returns
{...}") describes one tool's result, an observed fix is a failing and a corrected call, an observed failure a
call of one tool and what it raised, a recipe is code that calls tools. Given to an agent without them, such a
lesson is noise at best, and a 1.5B model copies it.

``needed_tools`` names the tools a lesson calls: for code, the names it calls without defining them that
are not Python's builtins; ``usable`` says whether an agent with ``tools`` can use the lesson (prose, and
code that calls no tool, always). Code that does not parse names nothing (it is given as before).

The other way round, a lesson about a tool the task will use (``tools_used``, ``about_tools``) bears on it whatever
the task's words: what was learnt about a tool carries to any question about it. A tool the task will use is one it
names, one whose name or description is about what the task asks, or one a recipe of a similar task called; merely
being among the agent's tools is not enough (a question about exchange rates is not about the user directory beside it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping

from lessonbank.core.models import Lesson, Recipe
from lessonbank.core.tokens import tokens
from lessonbank.learn import code
from lessonbank.learn.adapters import toolcalling


def called_tools(recipe: Recipe) -> list[str]:
    """The tools a recipe calls, sorted: for code, the names it calls without defining them that are not Python's
    builtins; for tool calls, their names and those the code its interpreter tool ran calls. Code that does not
    parse names none."""
    if recipe.language != "python":
        try:
            calls = json.loads(recipe.code)
        except (ValueError, RecursionError):
            return []
        names: set[str] = set()
        for call in calls if isinstance(calls, list) else ():
            name, arguments = (call.get("name"), call.get("arguments")) if isinstance(call, dict) else (None, None)
            if isinstance(name, str):
                names.add(name)
                names |= code.called(toolcalling.interpreter_code(name, arguments)) or set() \
                    if isinstance(arguments, dict) else set()
        return sorted(names)
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
# Called by a lesson but about no task's data: the answer, and the code interpreter a ToolCallingAgent computes in.
NOT_TOOLS = frozenset({"final_answer", toolcalling.CODE_TOOL})


# Words of a tool's name or description that say nothing of what it is about (besides ``core.tokens``' stopwords).
GENERIC_WORDS = frozenset(
    "get list fetch find search lookup look query read load return tool data result value given arg args name id "
    "ids call function object dict string str int float bool none true false optional default new".split()
)
DESCRIPTION_CHARS = 600
SHARED_WORDS = 1  # content words a tool's name and description must share with a task for the task to use it


def _words(text: str) -> set[str]:
    """Content words of ``text``, a plural's "s" dropped, without words that say nothing of a tool's subject."""
    found = set()
    for token in tokens(text):
        word = token[:-1] if len(token) > 3 and token.endswith("s") and not token.endswith("ss") else token
        if len(word) > 2 and not word.isdigit() and word not in GENERIC_WORDS:
            found.add(word)
    return found


def tools_used(task: str, tools: Collection[str] | None, recipes: Collection[str] = ()) -> set[str]:
    """The tools a task plausibly uses, of the agent's ``tools`` (Python's builtins and ``final_answer`` aside):
    those the task names, else those whose name or description (``tools`` a mapping of names to descriptions)
    shares at least ``SHARED_WORDS`` content words with the task, and those a recipe of a similar task calls
    (``recipes``). None when the agent's tools are not known, or the task bears on none of them:
    having a tool does not make every lesson about it bear on every task."""
    if not tools:
        return set()
    mine = {tool for tool in tools if tool not in code.BUILTINS and tool not in NOT_TOOLS}
    named = {word for word in _NAMED.findall(task[:4000])} & mine
    if named:
        return named
    described = tools if isinstance(tools, Mapping) else {}
    asked = _words(task[:4000])
    shared = {tool: len(asked & _words(f"{tool} {str(described.get(tool) or '')[:DESCRIPTION_CHARS]}"))
              for tool in mine}
    similar = {tool for tool, count in shared.items() if count >= SHARED_WORDS}
    return similar | (set(recipes) & mine)


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
