"""smolagents' recorded steps read into the normalised view: the executor's framing taken off, errors taken
apart, the tools each step called with their arguments and where each value came from."""

from __future__ import annotations

import json

from lessonbank.core.models import StepRecord, ToolCallRecord, ToolResultRecord
from lessonbank.learn.adapters import read_run
from lessonbank.learn.adapters.codeagent import error_text, failing_line, thought, unframed
from lessonbank.learn.adapters.toolcalling import failed_tool
from lessonbank.learn.view import Argument, Call, Request

TASK = "What was the highest temperature in Graz on 2024-03-17?"


def record(seq: int, kind: str = "action", **fields: object) -> StepRecord:
    return StepRecord(id=f"r:{seq}", bank="b", run_id="r", task=TASK, kind=kind, seq=seq, **fields)  # type: ignore[arg-type]


def test_a_failed_code_step_is_read_into_its_line_its_exception_and_its_calls() -> None:
    line = 'w = get_weather(city="Graz", date="2024-03-17")'
    message = f"Code execution failed at line '{line}' due to: ValueError: invalid date '2024-03-17'"
    run = read_run([
        record(0, code=f"{line}\nprint(w)", error_type="AgentExecutionError", error_message=message,
               model_output="Thought: I will ask the weather tool.", step_number=1),
        record(1, code='w = get_weather(city="Graz", date="17.03.2024")\nrecords = w["records"]',
               observations="Execution logs:\n{'records': [{'max_c': 15.0}]}\nLast output from code snippet:\n"
                            "[{'max_c': 15.0}]"),
        record(2, kind="final", action_output="15.0", is_final=True),
        record(3, kind="run_end", outcome="success"),
    ])
    failed, fixed, final = run.steps
    assert (run.task, run.outcome, run.final_answer, [s.seq for s in run.actions]) == (TASK, "success", "15.0", [0, 1])
    assert failed.failed and failed.failed_line == line and failed.error == "ValueError: invalid date '2024-03-17'"
    assert failed.error_message == message and failed.thought == "I will ask the weather tool." and failed.number == 1
    assert failed.calls == (Call("get_weather", (Argument("city", "Graz", "task"),
                                                 Argument("date", "2024-03-17", "task")), line, failed=True),)
    # the corrected value came from the error message the run read: tool output, not the task, not its own
    assert fixed.calls == (Call("get_weather", (Argument("city", "Graz", "task"),
                                                Argument("date", "17.03.2024", "literal")),
                                'w = get_weather(city="Graz", date="17.03.2024")'),)
    assert (fixed.logs, fixed.last_output, fixed.printed) == (
        "{'records': [{'max_c': 15.0}]}", "[{'max_c': 15.0}]", "{'records': [{'max_c': 15.0}]}\n[{'max_c': 15.0}]")
    assert not fixed.failed and final.kind == "final" and final.is_final


def test_argument_sources_name_tool_output_and_computed_values() -> None:
    run = read_run([
        record(0, code='page = list_orders(date="2024-03-17")', observations="Execution logs:\nnext: cursor-7f3a\n"),
        record(1, code='more = list_orders(cursor="cursor-7f3a", limit=n)'),
    ], tools=["list_orders"])
    (second,) = run.steps[1].calls
    assert second.arguments == (Argument("cursor", "cursor-7f3a", "tool_output"), Argument("limit", None, "unknown"))


def test_the_tools_of_code_are_the_names_it_calls_without_defining_them() -> None:
    code = "def helper(x):\n    return x * 2\nrows = search('q')\nprint(len(rows), helper(fetch(1)))\nobj.search(2)"
    (unknown,) = read_run([record(0, code=code)]).steps
    assert [call.tool for call in unknown.calls] == ["search", "fetch"]  # builtins and helper() are not tools
    (known,) = read_run([record(0, code=code)], tools=["fetch"]).steps
    assert [call.tool for call in known.calls] == ["fetch"]
    later = read_run([record(0, code=code), record(1, code="total = helper(rows)")]).steps[1]
    assert later.calls == ()  # defined by an earlier step
    assert read_run([record(0, code="x = (")]).steps[0].calls == ()  # does not parse: calls nothing
    deep = read_run([record(0, code="x = " + "[" * 5000 + "]" * 5000)]).steps[0]
    assert deep.calls == ()  # nested deeper than a parser follows: calls nothing


def test_a_tool_calling_step_is_read_from_its_tool_calls() -> None:
    message = ("Error executing tool 'web_search' with arguments {'query': 'q 7'}: HTTPError: 503 Server Error\n"
               "Please try again or use another tool")
    run = read_run([
        record(0, error_type="AgentToolExecutionError", error_message=message),
        record(1, tool_calls=[ToolCallRecord(name="lookup", arguments=json.dumps({"key": "Graz", "n": 3}))],
               tool_results=[ToolResultRecord(name="lookup", specimen={"rows": [{"t": 0.0}]})]),
        record(2, code="visit('a')", tool_calls=[ToolCallRecord(name="python_interpreter", arguments="visit('a')")]),
    ])
    failing, calling, coding = run.steps
    assert failing.failed_tool == "web_search" and failing.error == "HTTPError: 503 Server Error"
    assert calling.calls == (Call("lookup", (Argument("key", "Graz", "task"), Argument("n", "3", "literal")),
                                  'lookup(key="Graz", n=3)'),)
    assert failing.calls == (Call("web_search", (Argument("query", "q 7", "literal"),), 'web_search(query="q 7")',
                                  failed=True),)
    assert failing.failed_line == 'web_search(query="q 7")'
    assert calling.requests == (Request("lookup", '{"key": "Graz", "n": 3}'),)
    assert calling.returned[0].tool == "lookup" and calling.returned[0].structure == {"rows": [{"t": 0.0}]}
    assert [call.tool for call in coding.calls] == ["visit"]  # the code interpreter's own call: its code counts


def test_smolagents_text_is_taken_apart_and_anything_else_is_left_as_it_is() -> None:
    assert failing_line("Code execution failed at line 'x = 1' due to: E: y") == "x = 1"
    assert failing_line("Something else failed") == ""
    assert error_text("Code execution failed at line 'x = 1' due to: KeyError: 'a'") == "KeyError: 'a'"
    assert error_text("plain error") == "plain error"
    assert failed_tool("Error executing tool 'fetch' with arguments {}: E") == "fetch"
    assert failed_tool("Error executing something") is None
    assert unframed("Execution logs:\nhello\nLast output from code snippet:\nNone") == "hello"
    assert unframed("Execution logs:\nhello\nLast output from code snippet:\n42") == (
        "hello\nLast output from code snippet:\n42")
    assert thought("Thought: look first") == "look first" and thought("no label") == "no label"


def test_the_view_keeps_the_task_it_is_given_and_the_outcome_recorded() -> None:
    records = [record(0, code="x = 1"), record(1, kind="run_end", outcome="max_steps")]
    assert read_run(records).outcome == "max_steps" and read_run(records, outcome="error").outcome == "error"
    assert read_run(records).task == TASK and read_run(records, task="").task == ""
    assert read_run([record(0, kind="planning", plan="first, look")]).steps[0].plan == "first, look"
    late = read_run(records).only([])
    assert late.steps == () and late.task == TASK
