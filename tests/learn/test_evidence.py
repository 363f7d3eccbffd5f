"""Evidence mined from a run's steps, without an LLM."""

from __future__ import annotations

import json
import time

import pytest

from lessonbank.core.models import StepRecord, ToolCallRecord
from lessonbank.learn.adapters.codeagent import last_output, logs
from lessonbank.learn.evidence import call_results, changed_lines, mine, observed_text, result
from tests.learn.runs import view


def step(seq: int, code: str = "", observations: str = "", error: str = "", **fields: object) -> StepRecord:
    error_fields = {"error_type": "AgentExecutionError", "error_message": error} if error else {}
    return StepRecord(id=f"r:{seq}", bank="b", run_id="r", kind="action", seq=seq, step_number=seq + 1, code=code,
                      observations=observations, **error_fields, **fields)  # type: ignore[arg-type]


PAGE = json.dumps({"orders": [{"id": 1, "amount_cents": 1250}] * 3, "page": 1, "pages": 3, "next": "/orders?page=2"})
STEPS = [
    step(0, "orders = list_orders(date='2024-03-05')\nprint(orders)", f"Execution logs:\n{PAGE}\nLast output from "
         "code snippet:\nNone"),
    step(1, "total = sum(o['amount'] for o in orders['orders'])",
         error="Code execution failed at line 'total = sum(o['amount'] for o in orders['orders'])' due to: "
               "KeyError: 'amount'"),
    step(2, "total = sum(o['amount_cents'] for o in orders['orders']) / 100\nprint(total)",
         "Execution logs:\n37.5\nLast output from code snippet:\nNone"),
    step(3, "final_answer(total)", is_final=True, action_output="37.5"),
    StepRecord(id="r:4", bank="b", run_id="r", kind="final", seq=4, action_output="37.5", is_final=True),
]


def test_error_fix_pairs_show_what_changed() -> None:
    found = mine(view(STEPS, outcome="success"), "failure", "check")
    fix = next(item for item in found if item.kind == "error_fix")
    assert fix.steps == [1, 2] and fix.id == "E1"
    assert "KeyError: 'amount'" in fix.text and "amount_cents" in fix.text and "printed: 37.5" in fix.text
    assert "Code execution failed" not in fix.text  # the smolagents framing is gone


def test_shapes_reveal_pagination_and_keys() -> None:
    shape = next(item for item in mine(view(STEPS, outcome="success"), "unknown", "none") if item.kind == "shape")
    assert shape.steps == [0]
    assert "pagination fields: next, page, pages" in shape.text and "amount_cents" in shape.text


def test_ending_says_how_the_run_was_judged() -> None:
    ending = mine(view(STEPS, outcome="success"), "failure", "check")[-1]
    assert ending.kind == "ending" and "judged failure (by check)" in ending.text
    assert "final answer: 37.5" in ending.text


def test_an_error_nothing_got_past_and_a_header_line() -> None:
    steps = [step(0, "print(read_text_file('s.csv'))", "Execution logs:\ndate;region;amount\n2024-01-01;n;5"),
             step(1, "rows = parse(x)", error="ValueError: bad")]
    found = mine(view(steps, outcome="max_steps"), "failure", "signals")
    assert [item.kind for item in found] == ["error", "shape", "ending"]
    assert "header line `date;region;amount`" in found[1].text


def test_helpers() -> None:
    framed = "Execution logs:\nhello\nLast output from code snippet:\n42"
    (shown,) = view([step(0, "x = 42", observations=framed)]).steps
    assert (shown.logs, shown.last_output, shown.printed) == ("hello", "42", "hello\n42")
    assert changed_lines("a = 1\nb = f(a)", "a = 1\nb = f(a, sep=';')") == ["b = f(a, sep=';')"]
    assert view(STEPS).final_answer == "37.5"
    tool = step(5, tool_calls=[ToolCallRecord(name="get_rate", arguments='{"date": "05/03/2024"}')])
    assert "get_rate" in observed_text(view([tool])) and "05/03/2024" in observed_text(view([tool]))


def test_evidence_is_capped() -> None:
    many = [step(i, f"x{i} = f()", error=f"ValueError: {i}") for i in range(40)]
    found = mine(view(many, outcome="error"), "failure", "signals")
    assert len(found) <= 12 and all(len(item.text) < 700 for item in found)


@pytest.mark.parametrize(("printed_output", "got"), [
    ("{'city': 'Porto', 'records': [{'station': 'Porto-1', 'max_c': 26.3}]}", "data"),
    ("{'city': 'Porto', 'date': '12.09.2024', 'records': []}", "empty"),
    ("{'status': 'ok', 'data': {'items': [], 'total': 0}}", "empty"),
    ("{'max_c': 26.3, 'min_c': 18.1}", "data"),
    ("[]", "empty"),
    ("None", "empty"),
    ("['a;b;c', '1;2;3']", "data"),
    ("", ""),
    ("the file has 3 lines", ""),
])
def test_what_a_step_got_back(printed_output: str, got: str) -> None:
    framed = f"Execution logs:\n{printed_output}\nLast output from code snippet:\nNone"
    assert result(f"{logs(framed)}\n{last_output(framed)}".strip()) == got


def test_call_results_mark_the_steps_that_failed() -> None:
    steps = [StepRecord(id="r:0", bank="b", run_id="r", kind="action", seq=0, code="x = f('a')",
                        error_type="AgentExecutionError", error_message="boom"),
             StepRecord(id="r:1", bank="b", run_id="r", kind="action", seq=1, code="x = f('b')\nprint(x)",
                        observations="Execution logs:\n[1, 2]\nLast output from code snippet:\nNone"),
             StepRecord(id="r:2", bank="b", run_id="r", kind="final", seq=2, action_output="2")]
    assert call_results(view(steps)) == [("x = f('a')", "failed"), ("x = f('b')\nprint(x)", "data")]


def test_result_is_linear_on_hostile_output() -> None:
    started = time.process_time()
    for text in ("[" + " " * 200_000, "[ " * 100_000, "{" * 200_000, "(" + " " * 200_000 + ")"):
        result(text)
    assert time.process_time() - started < 1.0


def test_output_nested_deeper_than_the_json_reader_follows_is_no_shape_and_no_crash() -> None:
    printed = "Execution logs:\n" + "[" * 20_000 + "\nLast output from code snippet:\nNone"
    deep = step(0, "print(x)", observations=printed)
    found = mine(view([deep], outcome="success"), "success", "check")
    assert [item.kind for item in found] == ["ending"]
