"""The adapters on steps a real recorder wrote of real smolagents agents of each type (scripted models, the real
redis-server): a CodeAgent on the local executor and on a remote-style executor that reports tracebacks, a
ToolCallingAgent with its code interpreter, and a managed agent, whose run names its manager's."""

from __future__ import annotations

import ast
import json
import linecache
import traceback
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from smolagents import CodeAgent, ToolCallingAgent, tool
from smolagents.default_tools import PythonInterpreterTool
from smolagents.local_python_executor import CodeOutput
from smolagents.monitoring import AgentLogger, LogLevel
from smolagents.remote_executors import RemotePythonExecutor
from smolagents.utils import AgentError

import lessonbank
from lessonbank.core.settings import Settings
from lessonbank.learn.adapters import read_run
from lessonbank.learn.view import Argument, RunView
from lessonbank.recorder import StepRecorder
from tests.fixtures.recorded import run_hash, run_records
from tests.fixtures.scripted_model import ScriptedModel, code_reply, final_code, final_tool_call, tool_call_reply

BANK = "adapters"
ROWS = [{"region": "North", "Revenue": 120.5}, {"region": "South", "Revenue": 80.0}]


@tool
def get_sales(region: str) -> list:
    """Return the sales rows of a region.

    Args:
        region: Region name.
    """
    if region != region.title():
        raise ValueError(f"unknown region {region!r}")
    return [dict(row) for row in ROWS if row["region"] == region]


@pytest.fixture
def recorder(settings: Settings) -> Iterator[StepRecorder]:
    rec = StepRecorder(bank=BANK, settings=settings)
    yield rec
    rec.close(interrupt_open_runs=False)


def recorded(client: redis.Redis, recorder: StepRecorder, agent: Any, task: str) -> RunView:
    run_id = recorder.run_id(agent)
    assert run_id
    meta = run_hash(client, run_id)
    return read_run(run_records(client, run_id), task, tools=json.loads(meta["tools"]), run_id=run_id,
                    parent_run=meta.get("parent_run", ""))


class KernelExecutor(RemotePythonExecutor):
    """A remote-style executor in this process: each step's code runs in one namespace, and an error comes back
    as E2B's executors send it, ``{logs}\\nExecuting code yielded an error:\\n{name}\\n{value}\\n{traceback}``."""

    def __init__(self, tools: dict[str, Any]) -> None:
        super().__init__([], AgentLogger(level=LogLevel.OFF))
        self.namespace: dict[str, Any] = dict(tools)
        self.cell = 0

    def send_tools(self, tools: dict[str, Any]) -> None:
        self.namespace.update({name: t for name, t in tools.items() if name != "final_answer"})

    def send_variables(self, variables: dict[str, Any]) -> None:
        self.namespace.update(variables)

    def run_code_raise_errors(self, code: str) -> CodeOutput:
        import contextlib
        import io

        self.cell += 1
        name = f"<cell {self.cell}>"
        linecache.cache[name] = (len(code), None, code.splitlines(True), name)
        printed = io.StringIO()
        answer: list[Any] = []
        self.namespace["final_answer"] = answer.append
        try:
            with contextlib.redirect_stdout(printed):
                exec(compile(ast.parse(code), name, "exec"), self.namespace)
        except Exception as e:
            below = e.__traceback__.tb_next if e.__traceback__ else None
            trace = "".join(traceback.format_exception(type(e), e, below))
            message = f"{printed.getvalue()}\nExecuting code yielded an error:\n{type(e).__name__}\n{e}\n{trace}"
            raise AgentError(message, self.logger) from None
        return CodeOutput(output=answer[0] if answer else None, logs=printed.getvalue(), is_final_answer=bool(answer))


def test_a_local_code_agent_step_names_its_failing_line_its_calls_and_where_their_values_came_from(
        recorder: StepRecorder, redis_client: redis.Redis) -> None:
    task = "What is the revenue of region North?"
    agent = CodeAgent(tools=[get_sales], model=ScriptedModel([
        code_reply('rows = get_sales(region="north")\nprint(rows)'),
        code_reply('rows = get_sales(region="North")\nprint(rows[0]["revenue"])'),
        code_reply("print(rows[0].keys())"),
        code_reply('final_answer(rows[0]["Revenue"])'),
    ]), step_callbacks=recorder.step_callbacks, verbosity_level=0)
    assert agent.run(task) == 120.5
    run = recorded(redis_client, recorder, agent, task)
    wrong_value, wrong_key, look, answer = run.actions
    assert wrong_value.failed and wrong_value.failed_line == 'rows = get_sales(region="north")'
    assert wrong_value.error.startswith("ValueError: unknown region")
    (call,) = wrong_value.calls
    assert (call.tool, call.line, call.failed) == ("get_sales", 'rows = get_sales(region="north")', True)
    assert call.arguments == (Argument("region", "north", "task"),)  # the task's word, in other case
    assert wrong_key.failed and wrong_key.failed_line == 'print(rows[0]["revenue"])'
    assert wrong_key.error.startswith("InterpreterError: Could not index") and "KeyError: 'revenue'" in wrong_key.error
    assert [c.failed for c in wrong_key.calls] == [False]  # the call ran; its line did not fail
    assert not look.failed and "Revenue" in look.printed and [c.tool for c in answer.calls] == ["final_answer"]
    assert run.final_answer == "120.5" and run.parent_run == ""


def test_a_remote_executor_step_is_read_from_its_traceback(recorder: StepRecorder,
                                                           redis_client: redis.Redis) -> None:
    task = "What is the revenue of region North?"
    agent = CodeAgent(tools=[get_sales], model=ScriptedModel([
        code_reply('rows = get_sales("North")\nprint("got", len(rows))\ntotal = sum(r["revenue"] for r in rows)'),
        code_reply('total = sum(r["Revenue"] for r in rows)\nfinal_answer(total)'),
    ]), executor=KernelExecutor({"get_sales": get_sales}), step_callbacks=recorder.step_callbacks,
        verbosity_level=0)
    assert agent.run(task) == 120.5
    run = recorded(redis_client, recorder, agent, task)
    failed, fixed = run.actions
    assert "Executing code yielded an error" in failed.error_message and "Traceback" in failed.error_message
    assert failed.failed_line == 'total = sum(r["revenue"] for r in rows)'  # line 3 of the step, from its frame
    assert failed.error == "KeyError: 'revenue'" and failed.logs == "got 1"
    assert [(c.tool, c.failed) for c in failed.calls] == [("get_sales", False)]
    assert not fixed.failed and run.final_answer == "120.5"


def test_a_tool_calling_step_keeps_the_failed_call_and_the_interpreter_code(recorder: StepRecorder,
                                                                           redis_client: redis.Redis) -> None:
    task = "What is the revenue of region North?"
    agent = ToolCallingAgent(tools=[get_sales, PythonInterpreterTool()], model=ScriptedModel([
        tool_call_reply("get_sales", {"region": "NORTH"}),
        tool_call_reply("get_sales", {"region": "North"}),
        tool_call_reply("python_interpreter", {"code": "rows = [1, 2]\nprint(rows[5])"}),
        tool_call_reply("python_interpreter", {"code": "print(sum([120.5]))"}),
        final_tool_call(120.5),
    ]), step_callbacks=recorder.step_callbacks, verbosity_level=0)
    assert agent.run(task) == 120.5
    run = recorded(redis_client, recorder, agent, task)
    wrong, right, code_failed, code_ran, final = run.actions
    assert wrong.failed and wrong.failed_tool == "get_sales" and wrong.error.startswith("ValueError: unknown region")
    assert wrong.failed_line == 'get_sales(region="NORTH")'
    (call,) = wrong.calls
    assert (call.tool, call.failed, call.arguments) == ("get_sales", True, (Argument("region", "NORTH", "task"),))
    (ok,) = right.calls
    assert (ok.line, ok.failed, right.failed) == ('get_sales(region="North")', False, False)
    assert code_failed.failed and code_failed.code == "rows = [1, 2]\nprint(rows[5])"
    assert code_failed.failed_line == "print(rows[5])" and code_failed.failed_tool is None
    assert code_ran.code == "print(sum([120.5]))" and code_ran.printed == "120.5"
    assert [c.tool for c in final.calls] == ["final_answer"] and run.final_answer == "120.5"


def test_a_managed_agents_run_names_its_managers_run(settings: Settings, redis_client: redis.Redis) -> None:
    worker = ToolCallingAgent(tools=[get_sales], model=ScriptedModel([
        tool_call_reply("get_sales", {"region": "North"}), final_tool_call("North: 120.5"),
    ]), name="sales", description="Looks up the sales of a region.", verbosity_level=0)
    manager = CodeAgent(tools=[], managed_agents=[worker], model=ScriptedModel([
        code_reply('report = sales(task="the revenue of region North")\nprint(report)'),
        final_code(120.5),
    ]), verbosity_level=0)
    memory = lessonbank.remember(manager, bank=BANK, settings=settings, judge=lambda answer: answer == 120.5)
    assert manager.run("What is the revenue of region North?") == 120.5
    memory.flush()
    managed_recorder = lessonbank.remember(worker, bank=BANK, settings=settings)
    parent, child = memory.run_id(manager), managed_recorder.run_id(worker)
    assert parent and child and parent != child
    run = read_run(run_records(redis_client, child), tools=["get_sales"], run_id=child,
                   parent_run=run_hash(redis_client, child)["parent_run"])
    assert run.parent_run == parent
    assert [c.tool for s in run.actions for c in s.calls] == ["get_sales", "final_answer"]
    tools = json.loads(run_hash(redis_client, parent)["tools"])
    manager_view = read_run(run_records(redis_client, parent), tools=tools)
    assert [c.tool for c in manager_view.actions[0].calls] == ["sales"]  # the managed agent, called as a tool
    memory.close()
