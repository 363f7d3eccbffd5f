"""The lessons block for an agent that calls tools by name (a ToolCallingAgent): calls and words, never code over a
tool's result, which such an agent holds in no variable; a CodeAgent's block is unchanged."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

import pytest
from qdrant_client import QdrantClient
from smolagents import CodeAgent, ToolCallingAgent, tool

from lessonbank import remember
from lessonbank.block import lessons_block
from lessonbank.core.embeddings import FastEmbedEmbedder
from lessonbank.core.models import Lesson, Recipe
from lessonbank.core.settings import Settings
from lessonbank.core.store.qdrant import LessonStore
from lessonbank.handout import handout, kind_of
from lessonbank.instructions import compose_instructions, format_lessons, rank_lessons
from lessonbank.learn import render
from tests.fixtures.scripted_model import ScriptedModel, final_code, final_tool_call
from tests.learn.runs import written_observed
from tests.learn.test_handover import TOOLS, TOTAL, lessons_of, tool_calling_traffic_run, traffic_code_run
from tests.test_instructions import ASKED_FIX, GRAZ_TASK, LYON_TASK, WEATHER_SHAPE

CATALOG_SHAPE = ("`search_catalog(...)` returns {'status': str, 'data': {'items': [{'name': str, 'price': float}, "
                 "...], 'total': int}, 'took_ms': int}: its records are `result['data']['items']`. Records came back "
                 'from `products = search_catalog(query="mug")`.')
MUG_TASK = "Using search_catalog, how many 'mug' products cost less than 21 euros? Answer with the number only."
CHAIR_TASK = "Using search_catalog, how many 'chair' products cost less than 27 euros? Answer with the number only."
CODE = "for record in"


def observed(text: str, task: str = "", tag: str = "shape") -> Lesson:
    return written_observed("b", "fact", text, verified=True, tags=[tag], task=task)


def recipes() -> list[Lesson]:
    """A CodeAgent's recipe and a ToolCallingAgent's, of the weather question."""
    python = Recipe(code='w = get_weather(city="Lyon", date="02.08.2024")\n'
                         "final_answer(max(record['max_c'] for record in w['records']))", task=LYON_TASK)
    calls = Recipe(language="tool_calls", code=json.dumps([
        {"name": "get_weather", "arguments": {"city": "Lyon", "date": "02.08.2024"}},
        {"name": "final_answer", "arguments": {"answer": 31.5}}]), task=LYON_TASK, checks=["json"], fingerprint="t")
    return [Lesson.new("b", "approach", f"Working code for a task like: {LYON_TASK}").model_copy(
        update={"verified": True, "origin": "recipe", "recipe": recipe}) for recipe in (python, calls)]


def test_a_calling_agents_block_says_where_the_records_are_in_words_and_gives_calls() -> None:
    fix, shape = observed(ASKED_FIX, LYON_TASK, "fix"), observed(WEATHER_SHAPE)
    python, calls = recipes()
    lessons = [python, calls, fix, shape]
    block, given = format_lessons(lessons, task=GRAZ_TASK, agent_kind="calls")
    assert given == [calls, fix, shape]  # the Python recipe indexes a result the agent holds in no variable
    assert "result[" not in block and CODE not in block and "```python" not in block, block
    assert " = get_weather" not in block  # a call, never an assignment
    assert ('- For this task: Call `get_weather(city="Graz", date="16.10.2024")`: pass `date` like "16.10.2024"; '
            "written any other way it failed with ValueError. (seen in 1 run)") in block
    assert ("`get_weather(...)` returns {'city': str, 'records': [{'station': str, 'max_c': float}, ...]}: its records "
            "are the list under `records`: read every one.") in block
    assert "Tool calls that solved a similar task before" in block and 'get_weather(city="Graz"' in block
    code, _ = format_lessons(lessons, task=GRAZ_TASK)  # a CodeAgent's block, as before
    assert "```python" in code and "Write `weather_data = get_weather(" in code
    assert format_lessons(lessons, task=GRAZ_TASK, agent_kind="code") == (code, [python, calls, fix, shape])


def test_a_shapes_call_and_the_fields_beside_its_records_are_said_without_code() -> None:
    shape = observed(CATALOG_SHAPE, MUG_TASK)
    block, given = format_lessons([shape], task=CHAIR_TASK, agent_kind="calls")
    assert given == [shape]
    assert ('- For this task: call `search_catalog(query="chair")`; its records are the list under `data` > `items`. '
            "(seen in 1 run)\n- `search_catalog(...)` returns {'status': str, 'data': {'items': [{'name': str, "
            "'price': float}, ...], 'total': int}, 'took_ms': int}: its records are the list under `data` > `items`: "
            "read every one. The fields beside them (`total`) say about them (how many, "
            "whether there are more): "
            "read them. (seen in 1 run)") in block
    assert "result" not in block and CODE not in block and "mug" not in block


def test_a_tool_calling_agents_fix_is_the_call_to_make_and_code_over_a_result_is_left_out() -> None:
    (tca,) = [lesson for lesson in lessons_of(tool_calling_traffic_run(), "Using get_daily_stats, how many more "
              "visits did web-pioneer get in total than web-juniper? Answer with the number only.",
              judged_right=False, tools=list(TOOLS)) if lesson.fix is not None]
    block, _ = format_lessons([tca], task=TOTAL, tools=TOOLS, agent_kind="calls")
    assert (f'- {render.ADAPT_UNVERIFIED}: call `get_daily_stats(site="web-tundra")`; written any other way it failed '
            "with TypeError.") in block
    assert "result" not in block and "juniper" not in block
    # a CodeAgent's conversion on each record of a result: code over a value the agent does not hold
    (conversion,) = [lesson for lesson in lessons_of(traffic_code_run(), "Using get_daily_stats, how many more "
                     "visits did web-pioneer get in total than web-juniper? Answer with the number only.",
                     judged_right=False, tools=list(TOOLS)) if lesson.fix is not None]
    assert format_lessons([conversion], task=TOTAL, tools=TOOLS, agent_kind="calls") == ("", [])
    assert "convert the value first" in format_lessons([conversion], task=TOTAL, tools=TOOLS)[0]
    # kept as it was (no task to hand it to): the failing and the corrected call, no assignment
    alone, _ = format_lessons([observed(ASKED_FIX, "", "fix")], agent_kind="calls")
    assert ('`get_weather(city="Lyon", date="2024-08-02")` failed with ValueError; the corrected call '
            '`get_weather(city="Lyon", date="02.08.2024")` worked.') in alone and "weather_data" not in alone


@pytest.fixture
def store(embedder: FastEmbedEmbedder) -> Iterator[LessonStore]:
    client = QdrantClient(":memory:")
    store = LessonStore(client, embedder)
    store.upsert([written_observed("shop", "fact", CATALOG_SHAPE, verified=True, task=MUG_TASK)])
    yield store
    client.close()


def test_lessons_block_takes_the_agents_kind(store: LessonStore, settings: Settings) -> None:
    calls = lessons_block(CHAIR_TASK, "shop", store=store, settings=settings, agent_kind="calls").text
    assert "the list under `data` > `items`" in calls and CODE not in calls
    assert f"{CODE} result['data']['items']" in lessons_block(CHAIR_TASK, "shop", store=store, settings=settings).text


@tool
def search_catalog(query: str) -> dict:
    """Search the catalog.

    Args:
        query: Words to look for.
    """
    return {"status": "ok", "data": {"items": [], "total": 0}, "took_ms": 1}


def test_the_hook_gives_a_tool_calling_agent_calls_and_a_code_agent_code(store: LessonStore,
                                                                         settings: Settings) -> None:
    told: dict[str, str] = {}
    for kind, reply in (("calls", final_tool_call("ok")), ("code", final_code("ok"))):
        ref: list[Any] = []

        def probe(messages: list[Any], kind: str = kind, reply: Any = reply, ref: list[Any] = ref) -> Any:
            told.setdefault(kind, ref[0].task)
            return reply

        model = ScriptedModel([], then=probe)
        agent = ToolCallingAgent(tools=[search_catalog], model=model) if kind == "calls" else CodeAgent(
            tools=[search_catalog], model=model, verbosity_level=0)
        ref.append(agent)
        assert kind_of(agent) == kind
        recorder = remember(agent, bank="shop", settings=settings, store=store)
        try:
            assert agent.run(CHAIR_TASK) == "ok"
        finally:
            recorder.close()
    assert "the list under `data` > `items`" in told["calls"] and CODE not in told["calls"]
    assert "result" not in told["calls"].split("Lessons from earlier runs")[1]
    assert f"{CODE} result['data']['items']" in told["code"]



@pytest.fixture
def recipes_store(embedder: FastEmbedEmbedder) -> Iterator[LessonStore]:
    """A bank holding a CodeAgent's recipe of the weather question (worded closest to the task) and a
    ToolCallingAgent's."""
    python, calls = recipes()
    calls = Lesson.new("b", "approach", "Calls to make for: highest temperature in Lyon").model_copy(
        update={"verified": True, "origin": "recipe", "recipe": calls.recipe})
    client = QdrantClient(":memory:")
    store = LessonStore(client, embedder)
    store.upsert([python, calls])
    yield store
    client.close()


def test_a_calling_agent_gets_the_tool_calls_recipe_where_a_python_one_is_closer(
        recipes_store: LessonStore) -> None:
    code, code_given = compose_instructions(recipes_store, GRAZ_TASK, "b")
    assert [lesson.recipe.language for lesson in code_given if lesson.recipe] == ["python"]
    assert "```python" in code and "Tool calls that solved" not in code
    block, given = compose_instructions(recipes_store, GRAZ_TASK, "b", agent_kind="calls")
    assert [lesson.recipe.language for lesson in given if lesson.recipe] == ["tool_calls"]
    assert "Tool calls that solved a similar task before" in block and 'get_weather(city="Graz"' in block
    assert "```python" not in block
    # the same through the handout a recorded run is given
    told = handout(recipes_store, GRAZ_TASK, "b", Settings(lesson_holdout=0.0), random.Random(0), agent_kind="calls")
    assert told.block == block and told.given == given
    assert handout(recipes_store, GRAZ_TASK, "b", Settings(lesson_holdout=0.0), random.Random(0)).block == code


def test_a_calling_agent_given_no_recipe_gets_the_sentence_a_python_recipe_would_have_stood_for(
        embedder: FastEmbedEmbedder) -> None:
    python, _ = recipes()
    worked = Lesson.new("b", "approach", "Take the highest `max_c` over all the records of get_weather's result."
                        ).model_copy(update={"verified": True})
    client = QdrantClient(":memory:")
    try:
        store = LessonStore(client, embedder)
        store.upsert([python, worked])
        code, code_given = compose_instructions(store, GRAZ_TASK, "b")
        assert code_given == [python]  # next to the code, the sentence would only repeat it
        block, given = compose_instructions(store, GRAZ_TASK, "b", agent_kind="calls")
        assert given == [worked] and "highest `max_c`" in block
        assert rank_lessons(store, "b", GRAZ_TASK, agent_kind="calls") == [worked]
    finally:
        client.close()


ORDERS = {"C-7": [12.0, 30.5, 7.25, 18.0, 41.0, 9.5], "C-9": [5.0, 22.0]}
COUNT_TASK = "How many of customer C-7's orders (list_orders) are over 15 euros? Answer with the number only."
SUM_TASK = "Using list_orders, what do customer C-9's orders add up to? Answer with the number only."
OVER_TASK = "How many of customer C-9's orders (list_orders) are over 20 euros? Answer with the number only."


@tool
def list_orders(customer: str, limit: int = 3) -> dict:
    """Return a customer's orders, newest first.

    Args:
        customer: Customer id, e.g. "C-1".
        limit: Most orders to return.
    """
    amounts = ORDERS[customer]
    return {"orders": [{"amount": amount} for amount in amounts[:limit]], "more": len(amounts) > limit}


CODE_C7 = "r = list_orders(customer='C-7', limit=100)\nprint(len([o for o in r['orders'] if o['amount'] > 15]))"


def interpreted_run(settings: Settings, redis_client: Any, replies: list[Any] | None = None,
                    max_steps: int = 20) -> Any:
    """A ToolCallingAgent's run that called a tool, then computed its answer in its interpreter tool (which can
    call the tool too), as recorded (``replies``: the model's, by default ending with ``final_answer``)."""
    from smolagents.default_tools import PythonInterpreterTool

    from tests.fixtures.recorded import recorded_run
    from tests.fixtures.scripted_model import tool_call_reply

    interpreter = PythonInterpreterTool()
    interpreter.base_python_tools = {**interpreter.base_python_tools, "list_orders": list_orders}
    replies = replies or [tool_call_reply("list_orders", {"customer": "C-7"}),
                          tool_call_reply("python_interpreter", {"code": CODE_C7}), final_tool_call("3")]
    agent = ToolCallingAgent(tools=[list_orders, interpreter], model=ScriptedModel(replies), max_steps=max_steps,
                             verbosity_level=-1)
    return recorded_run(settings, redis_client, agent, COUNT_TASK, "3", bank="orders")


def test_a_tool_calling_run_that_computed_in_its_interpreter_leaves_calls_another_question_can_adapt(
        settings: Settings, redis_client: Any) -> None:
    from lessonbank.core.redact import Redactor
    from lessonbank.learn import recipes

    recipe = recipes.extract(interpreted_run(settings, redis_client), Redactor(), "check")
    assert recipe is not None and recipe.language == "tool_calls"  # calls the agent can make, not Python it cannot
    assert recipe.tools == ["final_answer", "list_orders", "python_interpreter"] and recipe.params == ["C-7", "15"]
    lesson = Lesson.new("orders", "approach", f"Tool calls for: {COUNT_TASK}").model_copy(
        update={"verified": True, "origin": "recipe", "recipe": recipe})
    same, given = format_lessons([lesson], task=OVER_TASK, tools={"list_orders", "python_interpreter"},
                                 agent_kind="calls")
    assert given == [lesson] and "with this task's values put in" in same
    assert ('python_interpreter(code="r = list_orders(customer=\'C-9\', limit=100)\\nprint(len([o for o in '
            "r['orders'] if o['amount'] > 20]))\")") in same and "C-7" not in same and "15" not in same
    # another question about the same tool: its calls and what its interpreter read, not the count it computed
    other, given = format_lessons([lesson], task=SUM_TASK, tools={"list_orders", "python_interpreter"},
                                  agent_kind="calls")
    assert given == [lesson] and "The tool calls another question made for its data" in other
    assert 'list_orders(customer="C-9")' in other and "C-7" not in other and "15" not in other
    assert ("python_interpreter(code=\"r = list_orders(customer='C-9', limit=100)\\nfor o in r['orders']:\\n    "
            "amount = o['amount']\")") in other
    assert "len(" not in other and "> <value>" not in other and "final_answer" not in other.split("```")[1]


def test_a_tool_calling_run_whose_right_answer_the_step_limit_forced_ends_its_calls_where_a_result_stated_it(
        settings: Settings, redis_client: Any) -> None:
    from lessonbank.core.redact import Redactor
    from lessonbank.learn import recipes
    from tests.fixtures.scripted_model import tool_call_reply

    run = interpreted_run(settings, redis_client, [
        tool_call_reply("list_orders", {"customer": "C-7"}), tool_call_reply("python_interpreter", {"code": CODE_C7}),
        tool_call_reply("list_orders", {"customer": "C-7", "limit": 6}), "3"], max_steps=3)
    assert run.final_answer == "3" and not any(step.is_final for step in run.actions)
    recipe = recipes.extract(run, Redactor(), "check")
    assert recipe is not None and "answer:printed" in recipe.checks
    assert json.loads(recipe.code) == [{"name": "list_orders", "arguments": {"customer": "C-7"}},
                                       {"name": "python_interpreter", "arguments": {"code": CODE_C7}},
                                       {"name": "final_answer", "arguments": {}}]
    assert recipes.extract(run, Redactor(), "signals") is None  # a right answer only a judge can vouch for
