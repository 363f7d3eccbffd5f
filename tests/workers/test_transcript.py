"""The compact transcript the distiller sees."""

from __future__ import annotations

from lessonbank.core.models import StepRecord, ToolCallRecord
from lessonbank.workers.transcript import build_transcript, cut_middle, select_steps
from tests.fixtures.runs import make_steps


def _step(seq: int, **fields: object) -> StepRecord:
    return StepRecord(id=f"r:{seq}", bank="b", run_id="r", kind="action", seq=seq, step_number=seq + 1,
                      **fields)  # type: ignore[arg-type]


def test_cut_middle_keeps_head_and_tail_within_limit() -> None:
    text = "HEAD" + "x" * 5000 + "TAIL"
    cut = cut_middle(text, 300)
    assert len(cut) <= 300
    assert cut.startswith("HEAD") and cut.endswith("TAIL") and "chars cut" in cut
    assert cut_middle("short", 300) == "short"


def test_transcript_has_every_part_of_a_step() -> None:
    steps = make_steps("b", "r", "Sum the sales", outcome="success", n_actions=2, error_at=0)
    steps[1].tool_calls = [ToolCallRecord(name="web_search", arguments='{"q": "csv"}')]
    text = build_transcript("Sum the sales", "success", steps, 12000)
    assert "# Task\nSum the sales" in text and "Recorded outcome: success" in text
    assert "Thought: Thought: try approach 0" in text
    assert "Code: import pandas as pd" in text
    assert "Error: ParserError: Expected 1 fields, saw 3" in text
    assert "Observation: columns: date;region;amount (step 1)" in text
    assert 'Tool calls: web_search({"q": "csv"})' in text
    assert "## Final answer\nTotal sales: 1234" in text
    assert "run_end" not in text


def test_long_observation_is_cut_in_the_middle() -> None:
    steps = [_step(0, observations="BEGIN " + "y" * 20000 + " END")]
    text = build_transcript("t", "success", steps, 2000)
    assert len(text) <= 2000
    assert "BEGIN" in text and "END" in text and "chars cut" in text


def test_select_steps_prefers_first_failures_fixes_and_last() -> None:
    steps = [_step(i, error_type="KeyError" if i == 10 else "") for i in range(30)]
    order = select_steps(steps)
    assert order[:4] == [0, 29, 28, 27]
    assert order[4:6] == [10, 11]
    assert sorted(order) == list(range(30))


def test_too_long_run_keeps_the_instructive_steps_within_budget() -> None:
    steps = [
        _step(i, model_output=f"thought number {i}", observations=f"obs-{i} " + "z" * 900,
              error_type="ValueError" if i == 20 else "", error_message="bad value" if i == 20 else "")
        for i in range(60)
    ]
    budget = 6000
    text = build_transcript("A long task", "max_steps", steps, budget)
    assert len(text) <= budget
    for kept in ("thought number 0\n", "thought number 20\n", "thought number 21\n", "thought number 59\n"):
        assert kept in text
    assert "thought number 40\n" not in text
    assert "step(s) omitted" in text
    assert "Error: ValueError: bad value" in text
