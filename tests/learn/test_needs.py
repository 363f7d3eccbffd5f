"""A lesson about a tool the agent does not have is not given to its runs (``lessonbank.learn.needs``)."""

from __future__ import annotations

import json

from lessonbank.core.models import Lesson, Recipe
from lessonbank.instructions import rank_lessons
from lessonbank.learn import render
from lessonbank.learn.fixtext import payload
from lessonbank.learn.needs import needed_tools, tools_used, usable
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


WEATHER = "`get_weather` wants its date as DD.MM.YYYY: an ISO date raises ValueError."
DESCRIBED = {"get_weather": "The weather records of a city on one day: temperatures, wind and rain.",
             "get_invoice": "An invoice by its id: its lines with quantities and unit prices in cents.",
             "final_answer": "Provides a final answer to the given problem."}


def test_the_tools_a_task_uses_are_named_described_or_called_by_a_similar_tasks_recipe() -> None:
    assert tools_used("Sum the lines of get_invoice('INV-3')", DESCRIBED) == {"get_invoice"}  # named
    assert tools_used("Will it rain in Porto on 3 March 2024?", DESCRIBED) == {"get_weather"}  # its description
    assert tools_used("What was the highest temperature in Graz on 2 January 2024?", DESCRIBED) == {"get_weather"}
    assert tools_used("How many invoices list a line in cents?", DESCRIBED) == {"get_invoice"}
    assert tools_used("Will it rain in Porto on 3 March 2024?", set(DESCRIBED)) == set()  # names alone say nothing
    assert tools_used("Write a haiku about autumn.", DESCRIBED) == set()  # having a tool is not using it
    assert tools_used("Write a haiku about autumn.", DESCRIBED, recipes=["get_invoice"]) == {"get_invoice"}
    assert tools_used("Will it rain?", None) == set()


def test_a_lesson_whose_only_link_to_the_task_is_the_agents_tool_is_not_given() -> None:
    """A weather question gets the weather tool's lessons, not the invoice tool's shape beside it; a task that names
    no tool but is about what one does still gets that tool's lessons, whatever their words."""
    shape, weather = make("b", "fact", SHAPE, origin="observed"), make("b", "fact", WEATHER, evidence=2)
    source = FixedSource([(weather, 0.1), (shape, 0.05)])  # both below the relevance floor by their words
    assert rank_lessons(source, "b", "Will it rain in Porto on 3 March 2024?", tools=DESCRIBED) == [weather]
    assert rank_lessons(source, "b", "What was the highest temperature in Graz on 2 January 2024?",
                        tools=DESCRIBED) == [weather]
    assert rank_lessons(source, "b", "Write a haiku about autumn.", tools=DESCRIBED) == []


def test_the_tools_of_a_similar_tasks_recipe_bring_their_lessons() -> None:
    code = recipe(CODE)
    shape = make("b", "fact", SHAPE, origin="observed")
    source = FixedSource([(code, 0.6), (shape, 0.05)])
    assert rank_lessons(source, "b", "What is owed on INV-9?", tools=DESCRIBED) == [code, shape]
    far = FixedSource([(code, 0.3), (shape, 0.05)])  # a recipe of a task not close to this one: its tools are not
    assert rank_lessons(far, "b", "What is owed on INV-9?", tools=DESCRIBED) == []


def test_an_agents_tools_come_with_their_descriptions() -> None:
    from smolagents import CodeAgent, tool

    from lessonbank.handout import described
    from tests.fixtures.scripted_model import ScriptedModel

    @tool
    def get_weather(city: str) -> dict:
        """The weather records of a city on one day: temperatures, wind and rain.

        Args:
            city: The city's name.
        """
        return {}

    agent = CodeAgent(tools=[get_weather], model=ScriptedModel([]), verbosity_level=0)
    tools = described(agent, {"get_weather", "final_answer", "sqrt"})
    assert tools is not None and tools["get_weather"].startswith("The weather records") and tools["sqrt"] == ""
    assert tools_used("Will it rain in Porto?", tools) == {"get_weather"}
    assert described(agent, None) is None
