"""A finished run's summary from its hash and records (``lessonbank.workers.summaries``): real smolagents runs
recorded into a real redis-server."""

from __future__ import annotations

import json

import redis
from smolagents import CodeAgent, ToolCallingAgent, tool

from lessonbank.core.models import RunSummary, StepRecord, TokenUsageRecord
from lessonbank.core.runs import Run, load_run
from lessonbank.core.settings import Settings
from lessonbank.learn.usage import tool_stats
from lessonbank.recorder import StepRecorder
from lessonbank.workers.summaries import summarize_run
from tests.fixtures.scripted_model import ScriptedModel, code_reply, final_code, final_tool_call, tool_call_reply
from tests.learn.runs import view
from tests.learn.test_usage import RUN, action, failed_at


def test_summarize_run_reads_the_hash_and_the_steps() -> None:
    steps = [
        action(0, "search('a')", tokens=(100, 10), duration=1.0),
        action(1, "search('b')", error=failed_at("search('b')", "KeyError: 'b'"), tokens=(200, 20)),
        StepRecord(id=f"{RUN}:2", bank="b", run_id=RUN, kind="planning", seq=2, plan="p",
                   token_usage=TokenUsageRecord(input_tokens=50, output_tokens=5)),
        StepRecord(id=f"{RUN}:3", bank="b", run_id=RUN, kind="run_end", seq=3, outcome="success"),
    ]
    meta = {"bank": "b", "agent": "bot", "task": "sum it", "arm": "control", "given": json.dumps(["l1", "l2"]),
            "verdict": "success", "verdict_source": "check", "started_at": "990.0", "closed_at": "1010.0",
            "tools": json.dumps(["search", "final_answer"])}
    summary = summarize_run(Run(RUN, meta, steps), applied=["l1"])
    assert (summary.bank, summary.agent, summary.task, summary.arm) == ("b", "bot", "sum it", "control")
    assert (summary.outcome, summary.verdict, summary.verdict_source) == ("success", "success", "check")
    assert (summary.started_at, summary.ended_at, summary.wall_s) == (990.0, 1010.0, 20.0)
    assert (summary.steps, summary.errors, summary.input_tokens, summary.output_tokens) == (2, 1, 350, 35)
    assert (summary.given, summary.applied) == (["l1", "l2"], ["l1"])
    assert (summary.tools["search"].calls, summary.tools["search"].errors) == (2, 1)
    assert RunSummary.from_json(summary.to_json()) == summary

    bare = summarize_run(Run(RUN, {"arm": "bogus", "given": "not json", "verdict": "maybe"}, steps[:1]))
    assert (bare.arm, bare.given, bare.verdict, bare.verdict_source) == ("lessons", [], "unknown", "none")
    assert bare.bank == "b" and bare.started_at == 1000.0 and bare.outcome == "unknown"


def test_real_smolagents_runs_are_summarised(settings: Settings, redis_client: redis.Redis) -> None:
    """Error texts as smolagents writes them: a CodeAgent's failing line, a ToolCallingAgent's failing tool."""

    @tool
    def fetch_orders(page: int) -> str:
        """Fetch one page of orders.

        Args:
            page: Page number, from 1.
        """
        if page > 2:
            raise ValueError(f"page {page} is past the last page")
        return f"orders of page {page}"

    recorder = StepRecorder(bank="b", settings=settings)
    try:
        code = CodeAgent(tools=[fetch_orders], model=ScriptedModel([
            code_reply("first = fetch_orders(page=1)\nprint(first)"),
            code_reply("def twice(x):\n    return x * 2\nrest = fetch_orders(page=twice(2))"),
            final_code("'done'"),
        ]), step_callbacks=recorder.step_callbacks, verbosity_level=0)
        code.run("Fetch the orders")
        calling = ToolCallingAgent(tools=[fetch_orders], model=ScriptedModel([
            tool_call_reply("fetch_orders", {"page": 7}), final_tool_call("none"),
        ]), verbosity_level=0)
        recorder.attach(calling)
        calling.run("Fetch page 7")
        runs = [load_run(redis_client, recorder.run_id(agent) or "") for agent in (code, calling)]
    finally:
        recorder.close(interrupt_open_runs=False)

    by_code, by_calls = (summarize_run(run) for run in runs)
    assert (by_code.steps, by_code.errors, by_code.input_tokens) == (3, 1, 30)
    fetch = by_code.tools["fetch_orders"]  # no tool list recorded: names called without being defined
    assert (fetch.calls, fetch.errors) == (2, 1) and "twice" not in by_code.tools
    assert fetch.error_messages == ["ValueError: page <n> is past the last page"]
    assert by_code.tools["final_answer"].errors == 0
    assert tool_stats(view(runs[0].steps, tools=["fetch_orders"]))["fetch_orders"].errors == 1
    tool_fetch = by_calls.tools["fetch_orders"]
    assert (tool_fetch.calls, tool_fetch.errors) == (1, 1)
    assert tool_fetch.error_messages == ["ValueError: page <n> is past the last page"]
