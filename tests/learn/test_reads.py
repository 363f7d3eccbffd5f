"""What a recipe of another question hands over (``learn.reads``): how it got its data and read it, not what it
computed from it; and when a recipe is given that way (``adapt.recipe_example``, ``params.more_values``)."""

from __future__ import annotations

import ast
import json
from typing import Any

import pytest
from smolagents import CodeAgent, tool

from lessonbank.core.models import Lesson, Recipe
from lessonbank.core.redact import Redactor
from lessonbank.core.settings import Settings
from lessonbank.instructions import format_lessons
from lessonbank.learn import adapt, params, reads, recipes
from tests.fixtures.recorded import recorded_run
from tests.fixtures.scripted_model import ScriptedModel, code_reply

MAXIMUM = "What is the highest number of story points of any open ticket of project FJOR? search_tickets finds them."
DIFFERENCE = "How many more open story points does project LUME have than project BORE? search_tickets finds them."
MAX_CODE = ("result = search_tickets(project='FJOR', limit=100)\nif result['tickets']:\n"
            "    max_points = max((record['points'] for record in result['tickets']))\n    final_answer(max_points)\n"
            "else:\n    print('No open tickets found.')")


def part(code: str, values: set[str] | None = None) -> str | None:
    found = reads.reduced(ast.parse(code), values or set())
    return ast.unparse(found) if found is not None else None


def test_the_calls_and_the_values_read_are_kept_and_the_computation_is_not() -> None:
    assert part(MAX_CODE) == ("result = search_tickets(project='FJOR', limit=100)\n"
                              "for record in result['tickets']:\n    points = record['points']")


def test_a_call_inside_an_expression_is_taken_out_and_a_conversion_stays_with_the_value_it_made_usable() -> None:
    code = ("final_answer(sum(float(r['amount'].replace(',', '.')) for r in get_sales(region='North')['rows'] "
            "if r['currency'] == 'EUR' and r['amount'] != '10'))")
    # the filter on the currency says which records count; the one on the question's threshold is its own
    assert part(code, {"North", "10"}) == (
        "result = get_sales(region='North')\nfor r in result['rows']:\n    if r['currency'] == 'EUR':\n"
        "        amount = float(r['amount'].replace(',', '.'))")


def test_a_paging_loop_is_kept_whole_with_what_it_needs_and_the_sum_after_it_is_not() -> None:
    code = ("items = []\npage = 1\nwhile True:\n    data = list_orders(page=page)\n    items += data['orders']\n"
            "    if not data['next']:\n        break\n    page += 1\ntotal = 0\nfor o in items:\n"
            "    if o['status'] == 'paid':\n        total += int(o['cents']) / 100\nfinal_answer(total)")
    found = part(code)
    assert found is not None and found.startswith("items = []\npage = 1\nwhile True:\n")
    assert found.endswith("for o in items:\n    if o['status'] == 'paid':\n        cents = int(o['cents']) / 100")
    assert "total" not in found and "final_answer" not in found


def test_a_path_read_from_a_call_is_kept_as_it_is_and_no_name_is_shared() -> None:
    code = ("result = get_daily_stats(site='web-ember')\n"
            "goal = int(get_site(site='web-ember')['goal'].replace(',', ''))\n"
            "final_answer(sum(int(r['visits']) for r in result) - goal)")
    assert part(code) == ("result = get_daily_stats(site='web-ember')\n"
                          "goal = int(get_site(site='web-ember')['goal'].replace(',', ''))\n"
                          "for r in result:\n    visits = int(r['visits'])")
    hoisted = part("result = 3\nfinal_answer(len(list_files(folder='a')['files']) + result)")
    assert hoisted is not None and hoisted.startswith("result_2 = list_files(folder='a')")


@pytest.mark.parametrize("code", [
    "final_answer(42)",  # no tool
    "result = search_tickets(project='FJOR')",  # nothing to leave out
    "for t in search_tickets(project='FJOR')['tickets']:\n    print(search_tickets(project=t['id']))",
])
def test_code_that_calls_no_tool_or_leaves_nothing_out_is_not_cut(code: str) -> None:
    assert part(code) is None


def test_a_recipe_is_cut_only_where_its_computation_cannot_be_this_tasks() -> None:
    recipe = Recipe(code=MAX_CODE, task=MAXIMUM)
    same_kind = adapt.recipe_example(recipe, MAXIMUM.replace("FJOR", "LUME"), reads_only=True)
    assert same_kind is not None and not same_kind.reads_only and "max(" in same_kind.code  # one value for one
    more = adapt.recipe_example(recipe, DIFFERENCE, reads_only=True)  # two projects for the code of one
    assert more is not None and more.reads_only and "max(" not in more.code
    assert "project=<project>" in more.code  # which of the two it read, the task does not say
    assert not adapt.recipe_example(recipe, DIFFERENCE).reads_only  # the caller says the question is another
    found = params.flows([ast.parse(MAX_CODE)], MAXIMUM)
    assert params.more_values(found, MAXIMUM, DIFFERENCE)
    assert not params.more_values(found, MAXIMUM, MAXIMUM.replace("FJOR", "LUME"))
    assert params.more_values(found, MAXIMUM, "How many open tickets of project EMBE have more than 10 points?")


def test_the_block_says_what_it_gives_for_both_agent_kinds() -> None:
    lesson = Lesson.new("b", "approach", "Working code", origin="recipe").model_copy(
        update={"recipe": Recipe(code=MAX_CODE, task=MAXIMUM), "verified": True})
    block, given = format_lessons([lesson], task=DIFFERENCE, tools={"search_tickets": "Open tickets."})
    assert given == [lesson] and "How code of another question got its data and read it (verified by " in block
    assert "task:" not in block and "highest" not in block  # what the other question asked, it computed
    assert "not what it computed from them (that answered its own question): compute what this task asks" in block
    assert "max(" not in block and "final_answer" not in block.split("```")[1] and "FJOR" not in block
    calls = Recipe(language="tool_calls", task=MAXIMUM, code=json.dumps([
        {"name": "search_tickets", "arguments": {"project": "FJOR", "limit": 100}},
        {"name": "python_interpreter", "arguments": {"code": "print(max([3, 4]))"}},
        {"name": "final_answer", "arguments": {}}]))
    spoken = lesson.model_copy(update={"recipe": calls})
    block, given = format_lessons([spoken], task=DIFFERENCE, tools={"search_tickets": "Open tickets."},
                                  agent_kind="calls")
    assert given == [spoken] and "The tool calls another question made for its data" in block
    assert '```text\nsearch_tickets(project=<project>, limit=100)\n```' in block  # its interpreter computed: left out


@tool
def search_tickets(project: str, limit: int = 10) -> dict:
    """Open tickets of a project.

    Args:
        project: Project key, e.g. "ABCD".
        limit: Most tickets to return.
    """
    points = {"FJOR": [3, 8, 5], "LUME": [2, 13], "BORE": [1, 1]}[project]
    return {"tickets": [{"id": f"{project}-{at}", "points": p} for at, p in enumerate(points[:limit])]}


def test_the_recipe_of_a_real_recorded_run_is_given_as_its_reads_to_a_question_with_more_values(
        settings: Settings, redis_client: Any) -> None:
    """A CodeAgent's run recorded by the real recorder into a real Redis, its recipe extracted as the worker does:
    the same question about another project gets its code; a difference of two projects gets its reads only."""
    agent = CodeAgent(tools=[search_tickets], verbosity_level=-1, model=ScriptedModel([
        code_reply("result = search_tickets(project='FJOR', limit=100)\n"
                   "final_answer(max(t['points'] for t in result['tickets']))")]))
    run = recorded_run(settings, redis_client, agent, MAXIMUM, 8, bank="tickets")
    recipe = recipes.extract(run, Redactor(), "check")
    assert recipe is not None and "max(" in recipe.code
    lesson = Lesson.new("tickets", "approach", "Working code", origin="recipe").model_copy(
        update={"recipe": recipe, "verified": True, "task": MAXIMUM})
    tools = {"search_tickets": "Open tickets."}
    same, _ = format_lessons([lesson], task=MAXIMUM.replace("FJOR", "LUME"), tools=tools)
    assert "Code that solved a similar task before" in same and "max(" in same and "project='LUME'" in same
    other, given = format_lessons([lesson], task=DIFFERENCE, tools=tools)
    assert given == [lesson] and "How code of another question got its data and read it" in other
    assert "for t in result['tickets']:\n    points = t['points']\n```" in other and "max(" not in other


COUNT_ABOVE = "How many open tickets of project EMBE have more than 10 points? search_tickets finds them."
IN_CODE = ("result = search_tickets(project='EMBE', limit={limit})\nrecords = result['tickets']\n"
           "for record in records:\n    if record['points'] > 10:\n        print(record['id'])")


def test_a_name_given_to_part_of_a_result_is_kept_and_its_loop_read() -> None:
    """Code that names the records (as the call handed to a calling agent inside its code tool does) keeps that
    line and the loop over it; without the name, the loop over ``records`` read nothing of the result."""
    assert part(IN_CODE.format(limit=100), {"EMBE", "10"}) == (
        "result = search_tickets(project='EMBE', limit=100)\nrecords = result['tickets']\n"
        "for record in records:\n    points = record['points']\n    value = record['id']")
    chained = "r = search(q='a')\nitems = r['data']['items']\nfirst = items[0]\nprint(first['name'], len(items))"
    assert part(chained, {"a"}) == "r = search(q='a')\nitems = r['data']['items']\nfirst = items[0]"


def test_a_calling_agents_calls_made_again_the_same_are_given_once() -> None:
    """A calling agent's recipe whose interpreter made the same call four times (its later steps failed and tried
    again) is given to another question with each call once, and with the reads of its code."""
    calls = [{"name": "python_interpreter", "arguments": {"code": IN_CODE.format(limit=100)}}] + [
        {"name": "python_interpreter", "arguments": {"code": IN_CODE.format(limit=10)}}] * 3 + [
        {"name": "final_answer", "arguments": {"answer": 1}}]
    recipe = Recipe(language="tool_calls", task=COUNT_ABOVE, code=json.dumps(calls))
    average = "What is the average of the story points of project JUNI's open tickets? search_tickets finds them."
    example = adapt.recipe_example(recipe, average, reads_only=True)
    assert example is not None and example.reads_only
    lines = example.code.splitlines()
    assert len(lines) == 1, lines  # limit=100; limit=10 (the question's 10, as <limit>) is the same call
    assert example.names == {} and example.placed  # and the block asks for no <limit> that no line holds
    assert "records = result['tickets']" in lines[0] and "points = record['points']" in lines[0]
    assert "JUNI" in lines[0] and "EMBE" not in example.code and "> 10" not in example.code


def test_a_calling_agents_recipe_whose_values_all_have_a_place_is_no_reads_only_example() -> None:
    """A calling agent's recipe of another question whose every value has a place in the task (no more values) is
    given whole, as an example to adapt, as a CodeAgent's is: said to be its reads only, its computation was shown
    under a head that said it was left out."""
    code = ("result = search_tickets(project='JUNI', limit=100)\nrecords = result['tickets']\npoints_sum = 0\n"
            "for record in records:\n    points_sum += record['points']\nprint(points_sum / len(records))")
    average = "What is the average of the story points of project JUNI's open tickets? search_tickets finds them."
    total = "What is the total of the story points of project QUAR's open tickets? search_tickets finds them."
    recipe = Recipe(language="tool_calls", task=average, code=json.dumps([
        {"name": "python_interpreter", "arguments": {"code": code}}, {"name": "final_answer", "arguments": {}}]))
    example = adapt.recipe_example(recipe, total, reads_only=True)
    assert example is not None and not example.reads_only and "QUAR" in example.code
    lesson = Lesson.new("b", "approach", "Working code", origin="recipe").model_copy(
        update={"recipe": recipe, "verified": True})
    block, _ = format_lessons([lesson], task=total, tools={"search_tickets": "Open tickets."}, agent_kind="calls")
    assert "Tool calls that solved a similar task before" in block and "not what it computed" not in block
    assert "written for that task: an example to adapt" in block
