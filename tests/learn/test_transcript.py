"""The compact transcript the distiller sees."""

from __future__ import annotations

from pathlib import Path

from lessonbank.core.models import StepRecord, ToolCallRecord
from lessonbank.learn import evidence
from lessonbank.learn.adapters.codeagent import unframed
from lessonbank.learn.transcript import (
    PROMPT_DATA_TOKENS,
    brief,
    build_transcript,
    compact_output,
    cut_middle,
    estimate_tokens,
    select_steps,
    transcript_tokens,
)
from tests.fixtures.runs import make_steps
from tests.learn.runs import view

REALISTIC_RUN = Path(__file__).resolve().parents[2] / "bench" / "data" / "realistic_run.jsonl"


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
    text = build_transcript(view(steps, "Sum the sales", outcome="success"), 12000)
    assert "# Task\nSum the sales" in text and "Recorded outcome: success" in text
    assert "Thought: try approach 0" in text and "Thought: Thought:" not in text
    assert "Code: import pandas as pd" in text
    assert "Error: ParserError: Expected 1 fields, saw 3" in text
    assert "Observation: columns: date;region;amount (step 1)" in text
    assert 'Tool calls: web_search({"q": "csv"})' in text
    assert "## Final answer\nTotal sales: 1234" in text
    assert "run_end" not in text


def test_long_observation_is_cut_in_the_middle() -> None:
    steps = [_step(0, observations="BEGIN " + "y" * 20000 + " END")]
    text = build_transcript(view(steps, "t", outcome="success"), 2000)
    assert len(text) <= 2000
    assert "BEGIN" in text and "END" in text and "chars cut" in text


def test_select_steps_prefers_first_failures_fixes_and_last() -> None:
    steps = [_step(i, error_type="KeyError" if i == 10 else "") for i in range(30)]
    order = select_steps(list(view(steps).steps))
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
    text = build_transcript(view(steps, "A long task", outcome="max_steps"), budget)
    assert len(text) <= budget
    for kept in ("thought number 0\n", "thought number 20\n", "thought number 21\n", "thought number 59\n"):
        assert kept in text
    assert "thought number 40\n" not in text
    assert "step(s) omitted" in text
    assert "Error: ValueError: bad value" in text


def test_repeated_lines_tables_and_tracebacks_are_compacted() -> None:
    warning = "UserWarning: Parsing dates in %d/%m/%Y format when dayfirst=False was specified."
    table = [f"{i}  2024-01-{i + 1:02d}  north  widget  {i * 3}  9,99" for i in range(12)]
    logs = "\n".join(["Execution logs:", warning, warning, warning, "   date  region  product  units  price",
                      *table, "(1843, 5)", "Last output from code snippet:", "None"])
    text = compact_output(unframed(logs))  # the executor's framing goes first (the adapter's)
    assert text.count(warning) == 1 and "[the line above repeated 2 more times]" in text
    assert table[0] in text and table[1] in text and table[-1] in text and table[5] not in text
    assert "[... 9 more rows like these ...]" in text and "(1843, 5)" in text
    assert "Execution logs" not in text and "Last output" not in text and len(text) < len(logs) / 2

    traceback = "\n".join([
        "Traceback (most recent call last):", '  File "<string>", line 3, in <module>', "    total = df['a'] * df['b']",
        '  File "/usr/lib/python3.11/site-packages/pandas/core/ops/common.py", line 76, in new_method',
        "    return method(self, other)",
        '  File "/usr/lib/python3.11/site-packages/pandas/core/series.py", line 5819, in _arith_method',
        "    return base.IndexOpsMixin._arith_method(self, other, op)", "TypeError: can't multiply sequence"])
    short = compact_output(traceback)
    assert "line 3, in <module>" in short and "total = df['a'] * df['b']" in short  # the agent's own frame
    assert "site-packages" not in short and "[... 2 other frames ...]" in short
    assert short.endswith("TypeError: can't multiply sequence")
    assert compact_output("two\nplain lines") == "two\nplain lines"


def test_thoughts_of_steps_that_did_not_fail_are_brief() -> None:
    long = "Thought: First I look at the file. " + "Then I think about it at length. " * 20
    steps = [_step(0, model_output=long), _step(1, model_output=long, error_type="KeyError", error_message="'x'")]
    text = build_transcript(view(steps, "t", outcome="success"), 100_000)
    first, second = text.split("## Step 2")
    thought = next(line for line in first.splitlines() if line.startswith("Thought: "))
    assert thought.startswith("Thought: First I look at the file.") and thought.endswith(".") and len(thought) < 180
    assert second.count("Then I think about it at length.") == 20
    assert brief("Short enough.") == "Short enough." and brief("x" * 500).endswith(" [...]")
    whole = build_transcript(view(steps, "t", outcome="success"), 100_000, compact=False)
    assert whole.count("Then I think about it at length.") == 40


def test_token_estimate_is_on_the_high_side_of_a_bpe_tokenizer() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("2024") == 4  # one token per digit (Qwen2.5, GPT-4 split numbers finely)
    assert estimate_tokens("the cat sat") == 3
    assert 10 <= estimate_tokens("df = pd.read_csv('sales.csv', sep=';')") <= 24
    assert transcript_tokens(["x " * 5000]) == 500 and transcript_tokens([]) == PROMPT_DATA_TOKENS


def test_a_realistic_run_fits_the_token_budget_and_keeps_what_teaches() -> None:
    steps = [StepRecord.from_json(line) for line in REALISTIC_RUN.read_text().splitlines()]
    mined = evidence.mine(view(steps, outcome="success"), "success", "user")
    tokens = transcript_tokens(e.text for e in mined)
    text = build_transcript(view(steps, steps[0].task, outcome="success"), 12_000, max_tokens=tokens, repeat_task=False)
    old = build_transcript(view(steps, steps[0].task, outcome="success"), 12_000, compact=False)
    assert estimate_tokens(text) <= tokens < estimate_tokens(old) / 2
    assert "# Task" not in text and text.startswith("# Recorded outcome: success")
    assert "## Step 1\n" in text and "## Step 3\n" in text and "## Step 4\n" in text  # first, failure, fix
    assert "can't multiply sequence by non-int of type 'str'" in text and "decimal=','" in text
    assert "## Final answer\nThe region with the highest revenue in Q1 2024 is north" in text
