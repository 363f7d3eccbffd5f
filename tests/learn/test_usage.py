"""A run's tool statistics from its view: tool calls found in code and in tool calls, errors blamed on the right
tool, messages normalised (``lessonbank.learn.usage``)."""

from __future__ import annotations

from lessonbank.core.models import StepRecord, TokenUsageRecord, ToolCallRecord
from lessonbank.learn.usage import normalize_error, tool_stats
from tests.learn.runs import view

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


def calls(code: str, tools: list[str] | None = None, earlier: str = "") -> list[str]:
    """The tools the view says the last of ``earlier`` then ``code`` called (``tools``: the agent's, if known)."""
    steps = [action(seq, c) for seq, c in enumerate([earlier, code] if earlier else [code])]
    return [call.tool for call in view(steps, tools=tools).steps[-1].calls]


def test_code_calls_with_and_without_a_tool_list() -> None:
    code = "def helper(x):\n    return x * 2\nrows = search('q')\nprint(len(rows), helper(fetch(1)))\nobj.search(2)"
    assert calls(code, ["search", "fetch", "final_answer"]) == ["search", "fetch"]
    assert calls(code) == ["search", "fetch"]  # builtins and helper() are not tools
    assert calls("total = helper(rows)", earlier=code) == []  # defined in an earlier step
    assert calls("import pandas as pd\ndf = pd.read_csv('a')\nload(df)") == ["load"]
    assert calls("x = (") == []  # a syntax error calls nothing


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
    stats = tool_stats(view(steps, tools=tools))
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
    stats = tool_stats(view(steps, tools=["read_text_file", "final_answer"]))
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
    stats = tool_stats(view(steps))
    assert (stats["web_search"].calls, stats["web_search"].errors) == (1, 1)
    assert stats["web_search"].error_messages == ["HTTPError: <n> Server Error for url <path>"]
    assert stats["web_search"].seconds == [4.0]
    assert (stats["visit_page"].calls, stats["visit_page"].errors, stats["visit_page"].seconds) == (2, 0, [1.0])
    assert "python_interpreter" not in stats
    assert stats["final_answer"].errors == 0
