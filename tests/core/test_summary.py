"""Run summaries and tool statistics: tool calls found in code and tool calls, errors blamed on the right
tool, messages normalised, summaries kept per bank in a real redis-server."""

from __future__ import annotations

import json

import redis
from smolagents import CodeAgent, ToolCallingAgent, tool

from lessonbank.core.constants import bank_runs_key, bank_summaries_key
from lessonbank.core.models import RunSummary, StepRecord, TokenUsageRecord, ToolCallRecord, ToolStats
from lessonbank.core.runs import Run, load_run
from lessonbank.core.settings import Settings
from lessonbank.core.summary import (
    code_calls,
    load_summaries,
    normalize_error,
    save_summary,
    summarize_run,
    tool_stats,
    tool_table,
    update_verdict,
)
from lessonbank.recorder import StepRecorder
from tests.fixtures.scripted_model import ScriptedModel, code_reply, final_code, final_tool_call, tool_call_reply

RUN = "run-1"


def action(seq: int, code: str = "", error: str = "", error_type: str = "", duration: float | None = None,
           calls: list[str] | None = None, tokens: tuple[int, int] | None = None) -> StepRecord:
    return StepRecord(
        id=f"{RUN}:{seq}", bank="b", run_id=RUN, kind="action", seq=seq, step_number=seq + 1, code=code,
        error_message=error, error_type=error_type or ("AgentExecutionError" if error else ""),
        duration=duration, tool_calls=[ToolCallRecord(name=n, arguments="{}") for n in calls or []],
        token_usage=TokenUsageRecord(input_tokens=tokens[0], output_tokens=tokens[1]) if tokens else None,
        started_at=1000.0 + seq, ended_at=1000.5 + seq,
    )


def failed_at(line: str, error: str) -> str:
    return f"Code execution failed at line '{line}' due to: {error}"


def test_normalize_error_replaces_numbers_strings_ids_and_paths() -> None:
    assert normalize_error("KeyError: 'amount'") == "KeyError: <str>"
    assert normalize_error('ValueError: page 17 of "orders" missing') == "ValueError: page <n> of <str> missing"
    assert normalize_error("FileNotFoundError: no such file /srv/data/p17.html") == (
        "FileNotFoundError: no such file <path>")
    assert normalize_error("cannot read data/sales_2024.csv, errno 2.") == "cannot read <path>, errno <n>."
    assert normalize_error("run 5b0f3c1e-8f7d-4b8e-9a57-2f1c3e4d5a6b at 0x7f3a2c, ref deadbeef42") == (
        "run <id> at <id>, ref <id>")
    assert normalize_error("can't   parse\n\tline  3.5e2") == "can't parse line <n>"  # an apostrophe is no quote
    assert normalize_error("and/or v2 stays") == "and/or v2 stays"
    long = normalize_error("x" * 1000, cap=50)
    assert len(long) == 50 and long.endswith("…")


def test_code_calls_with_and_without_a_tool_list() -> None:
    code = "def helper(x):\n    return x * 2\nrows = search('q')\nprint(len(rows), helper(fetch(1)))\nobj.search(2)"
    assert code_calls(code, ["search", "fetch", "final_answer"], set()) == ["search", "fetch"]
    defined: set[str] = set()
    assert code_calls(code, None, defined) == ["search", "fetch"]  # builtins and helper() are not tools
    assert {"helper", "rows", "x"} <= defined
    assert code_calls("total = helper(rows)", None, defined) == []  # defined in an earlier step
    assert code_calls("import pandas as pd\ndf = pd.read_csv('a')\nload(df)", None, set()) == ["load"]
    assert code_calls("x = (", None, set()) == []  # a syntax error calls nothing


def test_tool_stats_blames_the_failing_line_and_never_final_answer_unless_it_raised() -> None:
    tools = ["search", "fetch_page", "compute", "final_answer"]
    steps = [
        action(0, "rows = search('sales 2024')\nprint(len(rows))", duration=1.5),
        action(1, "data = fetch_page(url='https://x.example/1')\nfinal_answer(search(data))",
               error=failed_at("data = fetch_page(url='https://x.example/1')", "ValueError: page 17 not found")),
        action(2, "final_answer(compute())", error=failed_at("final_answer(compute())", "ZeroDivisionError: x")),
        action(3, "final_answer(42)", error=failed_at("final_answer(42)", "TypeError: bad answer 42")),
        action(4, "", error="Error in code parsing: no code block", error_type="AgentParsingError"),
        action(5, "search('x')", error="Timed out after 30 seconds", duration=30.0),
        action(6, "rows = search('y')", duration=2.5),
        StepRecord(id=f"{RUN}:7", bank="b", run_id=RUN, kind="final", seq=7, action_output="done", is_final=True),
    ]
    stats = tool_stats(steps, tools)
    assert {name: (s.calls, s.errors) for name, s in stats.items()} == {
        "search": (4, 1), "fetch_page": (1, 1), "final_answer": (3, 1), "compute": (1, 1),
    }
    assert stats["fetch_page"].error_messages == ["ValueError: page <n> not found"]
    assert stats["final_answer"].error_messages == ["TypeError: bad answer <n>"]
    assert stats["search"].error_messages == ["Timed out after <n> seconds"]
    assert sorted(stats["search"].seconds) == [1.5, 2.5, 30.0]  # steps that called exactly that tool


def test_an_error_in_the_agents_own_code_is_blamed_on_no_tool() -> None:
    # The demo's control runs: the tool returned the file whole, the agent's code indexed a row wrongly.
    # The failing line calls no tool, so the tool is not "failing with KeyError".
    steps = [
        action(0, "rows = read_text_file(path='sales.csv')\ntotal = sum(float(r['amount']) for r in rows)",
               error=failed_at("total = sum(float(r['amount']) for r in rows)", "KeyError: 'amount'")),
        action(1, "text = read_text_file(path='sales.csv')", error="Timed out after 30 seconds"),
    ]
    stats = tool_stats(steps, ["read_text_file", "final_answer"])
    assert (stats["read_text_file"].calls, stats["read_text_file"].errors) == (2, 1)
    assert stats["read_text_file"].error_messages == ["Timed out after <n> seconds"]  # no failing line: its tool


def test_tool_calling_agent_steps_use_their_tool_calls() -> None:
    message = ("Error executing tool 'web_search' with arguments {'query': 'q 7'}: HTTPError: 503 Server Error "
               "for url https://api.example.com/v1/search\nPlease try again or use another tool")
    steps = [
        action(0, error=message, duration=4.0),  # smolagents keeps no tool calls in a failing step
        action(1, calls=["visit_page"], duration=1.0),
        action(2, calls=["final_answer"]),
        action(3, "visit_page('a')", calls=["python_interpreter"]),  # a CodeAgent step: its code counts
    ]
    stats = tool_stats(steps)
    assert (stats["web_search"].calls, stats["web_search"].errors) == (1, 1)
    assert stats["web_search"].error_messages == ["HTTPError: <n> Server Error for url <path>"]
    assert stats["web_search"].seconds == [4.0]
    assert (stats["visit_page"].calls, stats["visit_page"].errors, stats["visit_page"].seconds) == (2, 0, [1.0])
    assert "python_interpreter" not in stats
    assert stats["final_answer"].errors == 0


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


def summary(run_id: str, started: float, bank: str = "b", **fields: object) -> RunSummary:
    return RunSummary(run_id=run_id, bank=bank, started_at=started, **fields)  # type: ignore[arg-type]


def test_summaries_are_kept_per_bank_newest_first_trimmed(redis_client: redis.Redis) -> None:
    dropped = [save_summary(redis_client, summary(f"r{i}", 100.0 + i), keep=3) for i in range(5)]
    assert dropped == [0, 0, 0, 1, 1]
    assert [s.run_id for s in load_summaries(redis_client, "b")] == ["r2", "r3", "r4"]
    assert redis_client.hlen(bank_summaries_key("b")) == 3
    assert [s.run_id for s in load_summaries(redis_client, "b", since=103.0)] == ["r3", "r4"]
    save_summary(redis_client, summary("r4", 104.0, steps=9), keep=3)  # saving again replaces
    assert load_summaries(redis_client, "b")[-1].steps == 9
    assert load_summaries(redis_client, "other") == []
    redis_client.hset(bank_summaries_key("b"), "r3", "{not json")
    assert [s.run_id for s in load_summaries(redis_client, "b")] == ["r2", "r4"]
    assert redis_client.zcard(bank_runs_key("b")) == 3


def test_update_verdict_respects_the_more_trusted_source(redis_client: redis.Redis) -> None:
    save_summary(redis_client, summary("r1", 1.0))
    assert not update_verdict(redis_client, "b", "missing", "success", "user")
    assert update_verdict(redis_client, "b", "r1", "failure", "llm")
    assert update_verdict(redis_client, "b", "r1", "success", "user")
    assert not update_verdict(redis_client, "b", "r1", "failure", "signals")  # the user's word stays
    stored = load_summaries(redis_client, "b")[0]
    assert (stored.verdict, stored.verdict_source) == ("success", "user")


def test_tool_table_sums_runs() -> None:
    runs = [
        summary("a", 1, tools={"search": ToolStats(calls=3, errors=1, seconds=[1.0], error_messages=["E: <n>"]),
                               "fetch": ToolStats(calls=1)}),
        summary("b", 2, tools={"search": ToolStats(calls=2, errors=2, seconds=[3.0, 5.0],
                                                   error_messages=["E: <n>", "F"])}),
    ]
    rows = tool_table(runs)
    assert [r.name for r in rows] == ["search", "fetch"]
    search = rows[0].to_dict()
    assert (search["runs"], search["calls"], search["errors"], search["error_rate"], search["p50_s"]) == (
        2, 5, 3, 0.6, 3.0)
    assert search["top_errors"] == [{"message": "E: <n>", "count": 2}, {"message": "F", "count": 1}]
    assert rows[1].to_dict()["p50_s"] is None and rows[1].error_rate == 0.0


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
    assert tool_stats(runs[0].steps, ["fetch_orders"])["fetch_orders"].errors == 1
    tool_fetch = by_calls.tools["fetch_orders"]
    assert (tool_fetch.calls, tool_fetch.errors) == (1, 1)
    assert tool_fetch.error_messages == ["ValueError: page <n> is past the last page"]
