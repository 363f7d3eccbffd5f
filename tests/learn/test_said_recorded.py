"""What a result said beside its records, tied to the call that got it (``learn.said``), on runs of a real
ToolCallingAgent and a real CodeAgent recorded by the real recorder into a real Redis: both read the same."""

from __future__ import annotations

import json
from typing import Any

import pytest
from smolagents import CodeAgent, ToolCallingAgent, tool

from lessonbank.core.models import Lesson
from lessonbank.core.redact import Redactor
from lessonbank.core.settings import Settings
from lessonbank.instructions import format_lessons
from lessonbank.learn import calls, codeform, recipes, said, shapes
from lessonbank.learn.view import RunView
from tests.fixtures.recorded import recorded_run
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
    return recorded_run(settings, redis_client, agent, TASK, 3, bank="files")


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


LEDGER = [{"amount": amount} for amount in (40, 15, 90, 5, 60, 25, 70, 10, 55, 30)]
PAY_TASK = "What is the largest payment of account 4411? Answer with the number only."
CUT = " `{tool}(account=..., {name}=5)` returned 5 records, as many as `{name}=5` asked for: there may be " \
      "more than it returned."


@tool
def list_payments(account: str, limit: int = 3) -> list:
    """Return an account's payments, newest first: a bare list of records, cut at ``limit``.

    Args:
        account: Account id, e.g. "A-1".
        limit: Most payments to return.
    """
    return [dict(row) for row in LEDGER[:limit]]


@tool
def top_payments(account: str, top: int = 3) -> list:
    """Return an account's payments, newest first, under another setting's name.

    Args:
        account: Account id, e.g. "A-1".
        top: Most payments to return.
    """
    return [dict(row) for row in LEDGER[:top]]


TOOLS_BY_SETTING = {"limit": list_payments, "top": top_payments}


def run_of(settings: Settings, redis_client: Any, agent: Any, task: str, answer: Any, late: Any = None) -> RunView:
    return recorded_run(settings, redis_client, agent, task, answer, bank="pay", late=late)


@pytest.mark.parametrize("name", ["limit", "top"])
def test_both_kinds_of_agent_say_a_call_got_as_many_records_as_it_asked_for(settings: Settings, redis_client: Any,
                                                                            name: str) -> None:
    listing = TOOLS_BY_SETTING[name]
    calling = ToolCallingAgent(tools=[listing], verbosity_level=-1, model=ScriptedModel([
        tool_call_reply(listing.name, {"account": "A-4411", name: 5}), final_tool_call(90)]))
    kept = run_of(settings, redis_client, calling, PAY_TASK, 90)
    coding = CodeAgent(tools=[listing], verbosity_level=-1, model=ScriptedModel([
        code_reply(f'r = {listing.name}(account="A-4411", {name}=5)\nprint(max(p["amount"] for p in r))'),
        final_code(90)]))
    also_kept = run_of(settings, redis_client, coding, PAY_TASK, 90)
    assert kept.actions[0].returned and also_kept.actions[0].returned  # the recorder's specimens
    for run, render in ((kept, calls.shape), (also_kept, codeform.shape)):
        (shape,) = shapes.extract(run, PAY_TASK)
        assert said.text(shape.payload.said) == CUT.format(tool=listing.name, name=name)
        assert render(shape.payload).endswith(CUT.format(tool=listing.name, name=name))


def test_a_printed_result_says_it_too_and_a_count_below_the_setting_says_nothing(settings: Settings,
                                                                                 redis_client: Any) -> None:
    listing = list_payments
    coding = CodeAgent(tools=[], verbosity_level=-1, model=ScriptedModel([
        code_reply('r = list_payments(account="A-4411", limit=5)\nprint(r)'), final_code(90)]))
    printed = run_of(settings, redis_client, coding, PAY_TASK, 90, late=listing)
    assert not printed.actions[0].returned  # not watched: nothing kept but what the step printed
    (shape,) = shapes.extract(printed, PAY_TASK)
    assert said.text(shape.payload.said) == CUT.format(tool="list_payments", name="limit")
    whole = CodeAgent(tools=[listing], verbosity_level=-1, model=ScriptedModel([
        code_reply('r = list_payments(account="A-4411", limit=50)\nprint(max(p["amount"] for p in r))'),
        final_code(90)]))
    (shape,) = shapes.extract(run_of(settings, redis_client, whole, PAY_TASK, 90), PAY_TASK)
    assert shape.said == () and said.text(shape.payload.said) == ""  # 10 records for 50 asked for: all of them


def test_both_kinds_hand_the_next_task_the_call_with_a_larger_setting(settings: Settings, redis_client: Any) -> None:
    """A real run of each agent type that got as many payments as its `limit` asked for: its shape names the call
    (a calling agent's as the line that makes it), and the next question about another account is told to make it
    with a larger `limit`, not tried yet, whichever kind of agent asks."""
    task = "What is the largest payment of account A-4411? Answer with the number only."
    other = "How many payments of account A-2750 are above 50? Answer with the number only."
    calling = ToolCallingAgent(tools=[list_payments], verbosity_level=-1, model=ScriptedModel([
        tool_call_reply("list_payments", {"account": "A-4411", "limit": 5}), final_tool_call(90)]))
    coding = CodeAgent(tools=[list_payments], verbosity_level=-1, model=ScriptedModel([
        code_reply('r = list_payments(account="A-4411", limit=5)\nprint(max(p["amount"] for p in r))'),
        final_code(90)]))
    wider = f'list_payments(account="A-2750", limit={5 * said.WIDER})'
    told = f"(`limit={5 * said.WIDER}` not tried yet: `limit=5` returned 5 records, as many as it asked for"
    for agent, line in ((calling, 'list_payments(account="A-4411", limit=5)'),
                        (coding, 'r = list_payments(account="A-4411", limit=5)')):
        (shape,) = shapes.extract(run_of(settings, redis_client, agent, task, 90), task)
        assert shape.call == line
        lesson = Lesson.new("pay", "fact", shape.text, tags=["shape"], run_id="r1", origin="observed",
                            shape=shape.payload).model_copy(update={"task": task})
        spoken, _ = format_lessons([lesson], task=other, tools={"list_payments": "Payments."}, agent_kind="calls")
        written, _ = format_lessons([lesson], task=other, tools={"list_payments": "Payments."}, agent_kind="code")
        assert f"For this task: call `{wider}` {told}" in spoken
        assert f"For this task: write `result = {wider}` {told}" in written
        assert "A-4411" not in spoken + written


def test_a_calling_agent_whose_code_tool_read_a_result_it_never_got_is_handed_the_call_inside_its_code(
        settings: Settings, redis_client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real calling agent got a bucket's files with a setting that cut them, then sent its interpreter code that
    read `files`, which that code never set. The next question is handed one interpreter call that makes the call,
    with the larger setting, and reads its records in that same code; run with a computation in place of `...`,
    that code gets every file of the other bucket."""
    from smolagents.default_tools import PythonInterpreterTool

    from lessonbank.learn import failures
    from lessonbank.learn.consolidate import Observed, observed_lesson

    def interpreter() -> PythonInterpreterTool:
        tool_ = PythonInterpreterTool()
        tool_.base_python_tools = {**tool_.base_python_tools, "list_files": list_files}
        return tool_

    reads = "print(len([f for f in files if f['size'] > 5]))"
    agent = ToolCallingAgent(tools=[list_files, interpreter()], verbosity_level=-1, model=ScriptedModel([
        tool_call_reply("list_files", {"bucket": "logs", "page_size": 2}),
        tool_call_reply("python_interpreter", {"code": reads}), final_tool_call(3)]))
    view = recorded_run(settings, redis_client, agent, TASK, 3, bank="files")
    (shape,) = shapes.extract(view, TASK)
    (failure,) = failures.extract(view)
    assert failure.payload.unset == "files"
    lessons = [Lesson.new("files", "fact", shape.text, tags=["shape"], run_id="r1", origin="observed",
                          shape=shape.payload).model_copy(update={"task": TASK}),
               observed_lesson("files", Observed(failures.TAG, failure.fingerprint, (1,), failure=failure.payload),
                               "r1", verified=False)]
    monkeypatch.setitem(FILES, "media", [8, 2, 6, 30, 1])
    other = "How many files of bucket media are larger than 5 units? Answer with the number only."
    tools = {"list_files": "Files.", "python_interpreter": "Runs code."}
    spoken, _ = format_lessons(lessons, task=other, tools=tools, agent_kind="calls")
    line = next(line for line in spoken.splitlines() if line.startswith("- For this task:"))
    assert line.startswith("- For this task: call `python_interpreter` with code that makes the call and computes "
                           "what the task asks from every record in `records` in that same code"), line
    begun = json.loads(line.split("beginning `", 1)[1].split("`", 1)[0])["code"]
    assert begun == (f'result = list_files(bucket="media", page_size={2 * said.WIDER})\n'
                     "records = result['files']\n...")
    assert "`page_size=20` not tried yet" in line and "logs" not in spoken.split("What to avoid")[0]
    assert 'list_files(bucket="' not in spoken.replace(line, "")  # the call is given once, inside the code
    code = begun.replace("...", "print(len([f for f in records if f['size'] > 5]))")
    assert interpreter()(code=code).startswith("Stdout:\n3\n")  # every file of media: 8, 6 and 30
    # without the code tool's failure, or without a code tool, the call alone, as before
    alone, _ = format_lessons(lessons[:1], task=other, tools=tools, agent_kind="calls")
    assert f'- For this task: call `list_files(bucket="media", page_size={2 * said.WIDER})`' in alone
    no_tool, _ = format_lessons(lessons, task=other, tools={"list_files": "Files."}, agent_kind="calls")
    assert "`python_interpreter` with code" not in no_tool and "call `list_files(bucket=\"media\"" in no_tool
    written, _ = format_lessons(lessons, task=other, tools=tools, agent_kind="code")
    assert "`python_interpreter` with code" not in written  # a CodeAgent's code is its own code tool


def test_a_number_passed_by_position_is_handed_on_larger_too(settings: Settings, redis_client: Any) -> None:
    """A real CodeAgent passed the setting by position and got as many payments as it asked for: the next question
    is handed the call with a larger number at that place."""
    task = "What is the largest payment of account A-4411? Answer with the number only."
    other = "How many payments of account A-2750 are above 50? Answer with the number only."
    coding = CodeAgent(tools=[list_payments], verbosity_level=-1, model=ScriptedModel([
        code_reply('r = list_payments("A-4411", 5)\nprint(max(p["amount"] for p in r))'), final_code(90)]))
    (shape,) = shapes.extract(run_of(settings, redis_client, coding, task, 90), task)
    assert shape.call == 'r = list_payments("A-4411", 5)'
    lesson = Lesson.new("pay", "fact", shape.text, tags=["shape"], run_id="r1", origin="observed",
                        shape=shape.payload).model_copy(update={"task": task})
    written, _ = format_lessons([lesson], task=other, tools={"list_payments": "Payments."})
    assert (f'For this task: write `result = list_payments("A-2750", {5 * said.WIDER})` (`{5 * said.WIDER}` in its '
            "place not tried yet: the `5` it passed returned 5 records") in written, written
