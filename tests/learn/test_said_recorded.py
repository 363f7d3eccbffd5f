"""What a result said beside its records, tied to the call that got it (``learn.said``), on runs of a real
ToolCallingAgent and a real CodeAgent recorded by the real recorder into a real Redis: both read the same."""

from __future__ import annotations

import json
from typing import Any

from smolagents import CodeAgent, ToolCallingAgent, tool

from lessonbank.core.redact import Redactor
from lessonbank.core.settings import Settings
from lessonbank.learn import calls, codeform, recipes, said, shapes
from lessonbank.learn.adapters import read_run
from lessonbank.learn.view import RunView
from lessonbank.recorder import StepRecorder
from tests.fixtures.recorded import run_hash, run_records
from tests.fixtures.scripted_model import ScriptedModel, code_reply, final_code, final_tool_call, tool_call_reply

FILES = {"logs": [3, 9, 1, 12, 7, 4, 15]}
TASK = "How many files of bucket logs are larger than 5 units? Answer with the number only."
WITH_MORE = " Beside the records, by call: `list_files(bucket=...)` -> `has_more: true`; `list_files(bucket=..., " \
            "page_size=50)` -> `has_more: false`: with `page_size=50` instead of no `page_size`, `has_more` was " \
            "false instead of true."


@tool
def list_files(bucket: str, page_size: int = 4) -> dict:
    """Return a bucket's files, largest id first.

    Args:
        bucket: Bucket name, e.g. "logs".
        page_size: Most files to return.
    """
    sizes = FILES[bucket]
    return {"files": [{"size": size} for size in sizes[:page_size]], "has_more": len(sizes) > page_size}


def recorded(settings: Settings, redis_client: Any, agent: Any) -> RunView:
    recorder = StepRecorder(bank="files", settings=settings)
    recorder.attach(agent)
    try:
        assert agent.run(TASK) == 3
        recorder.flush()
        run_id = recorder.run_id(agent)
        assert run_id
        return read_run(run_records(redis_client, run_id), TASK,
                        tools=json.loads(run_hash(redis_client, run_id)["tools"]), run_id=run_id)
    finally:
        recorder.close(interrupt_open_runs=False)


def test_a_tool_calling_agents_calls_say_which_setting_got_the_whole_list(settings: Settings,
                                                                          redis_client: Any) -> None:
    agent = ToolCallingAgent(tools=[list_files], verbosity_level=-1, model=ScriptedModel([
        tool_call_reply("list_files", {"bucket": "logs"}), tool_call_reply("list_files", {"bucket": "logs",
                                                                                           "page_size": 50}),
        final_tool_call(3)]))
    run = recorded(settings, redis_client, agent)
    (shape,) = shapes.extract(run, TASK)
    assert said.text(shape.payload.said) == WITH_MORE
    assert calls.shape(shape.payload).endswith(WITH_MORE)
    # the recipe of calls leaves out the first try, whose setting was changed
    recipe = recipes.extract(run, Redactor(), "check")
    assert recipe is not None and [c["arguments"] for c in json.loads(recipe.code)] == [
        {"bucket": "logs", "page_size": 50}, {}]


def test_a_code_agents_run_says_the_same(settings: Settings, redis_client: Any) -> None:
    agent = CodeAgent(tools=[list_files], verbosity_level=-1, model=ScriptedModel([
        code_reply('r = list_files(bucket="logs")\nprint(len(r["files"]))'),
        code_reply('r = list_files(bucket="logs", page_size=50)\nprint(len(r["files"]))'), final_code(3)]))
    run = recorded(settings, redis_client, agent)
    (shape,) = shapes.extract(run, TASK)
    assert said.text(shape.payload.said) == WITH_MORE
    assert codeform.shape(shape.payload).endswith(WITH_MORE)
