"""A lesson about a tool the agent does not have is not given to its runs (``lessonbank.learn.needs``)."""

from __future__ import annotations

import json

from lessonbank.core.models import Lesson, Recipe
from lessonbank.instructions import rank_lessons
from lessonbank.learn import render
from lessonbank.learn.fixtext import payload
from lessonbank.learn.needs import needed_tools, usable
from tests.test_instructions import FixedSource, make

SHAPE = ("`get_invoice(...)` returns {'invoice': str, 'lines': [{'qty': int, 'unit_price_cents': int}, ...]}: "
         "its records are `result['lines']`.")
FIX = render.fix(payload('w = get_weather(city="Graz", date="2024-01-02")', "ValueError",
                         'w = get_weather(city="Graz", date=dt.strptime(day, "%d.%m.%Y").date().isoformat())'))
CODE = '''import math
from collections import Counter as C
def total(rows, pick):
    return sum(pick(r) for r in rows)
inv = get_invoice(invoice_id="INV-1")
try:
    n = total(inv["lines"], lambda r: r["qty"] * r["unit_price_cents"])
except KeyError as e:
    n = len(C(str(e)))
final_answer(math.floor(n) / 100)
'''


def recipe(code: str, language: str = "python") -> Lesson:
    return make("b", "approach", "Working code for a task like: the total of INV-1", origin="recipe",
                recipe=Recipe(code=code, language=language, task="the total of INV-1", fingerprint=code[:8]))


def test_a_lesson_needs_the_tools_its_code_calls() -> None:
    assert needed_tools(make("b", "fact", SHAPE, origin="observed")) == {"get_invoice"}
    assert needed_tools(make("b", "fact", FIX, origin="observed")) == {"get_weather"}  # dt.strptime: an attribute
    assert needed_tools(recipe(CODE)) == {"get_invoice", "final_answer"}  # its own def, imports, args, builtins not
    calls = json.dumps([{"name": "search_catalog", "arguments": {"query": "mug"}}, {"name": "final_answer"}])
    assert needed_tools(recipe(calls, "tool_calls")) == {"search_catalog", "final_answer"}
    assert needed_tools(make("b", "fact", SHAPE)) is None  # the same words from the distiller: prose
    assert needed_tools(make("b", "fact", "Invoices are in cents; divide by 100.")) is None
    assert needed_tools(recipe("print(len([1, 2]))")) is None  # calls no tool
    assert needed_tools(recipe("def broken(:")) is None  # does not parse: names nothing


def test_only_lessons_about_tools_the_agent_has_are_usable() -> None:
    lesson = recipe(CODE)
    assert usable(lesson, None)  # tools not known (the CLI, build_instructions): given as before
    assert usable(lesson, {"get_invoice", "final_answer", "other"})
    assert not usable(lesson, {"search_catalog", "final_answer"})
    assert usable(make("b", "fact", "Invoices are in cents."), set())


def test_an_agent_without_the_tool_gets_none_of_its_shapes_fixes_or_recipes() -> None:
    """Learning benchmark, every task in one bank: the search_catalog task's first run was handed the shape of
    get_invoice (the two tasks share "in euros")."""
    shape, fix = make("b", "fact", SHAPE, origin="observed"), make("b", "fact", FIX, origin="observed")
    code, prose = recipe(CODE), make("b", "fact", "Prices in this shop's tools are euros.", evidence=2)
    source = FixedSource([(code, 0.8), (shape, 0.7), (fix, 0.6), (prose, 0.5)])
    catalog = {"search_catalog", "final_answer"}
    assert rank_lessons(source, "b", "how many lamps cost less than 31 euros", tools=catalog) == [prose]
    everything = rank_lessons(source, "b", "how many lamps cost less than 31 euros")
    assert everything[0] == code and sorted(lesson.id for lesson in everything) == sorted(
        lesson.id for lesson in (code, shape, fix, prose))
    both = {"get_invoice", "get_weather", "final_answer"}
    assert rank_lessons(source, "b", "the total of INV-2", tools=both) == everything
