"""What of a result's values a shape keeps: a flag's, by the rule for booleans (by result, or for a field of records
which values they held, never how many), and of a string only the words a field of records shares: a yes/no answer
or an enum one result holds is its value, never kept, counted or part of the fact's fingerprint."""

from __future__ import annotations

import pytest

from lessonbank.core.models import StepRecord, ToolResultRecord
from lessonbank.core.specimen import specimen
from lessonbank.learn import fingerprint, shapes, walk
from tests.learn.runs import view

TOOLS = ["check_loan"]


def _loan(approved: str, tier: str, renewable: bool, states: list[str]) -> dict:
    return {"approved": approved, "tier": tier, "renewable": renewable,
            "loans": [{"state": state, "overdue": state == "late"} for state in states]}


def _steps(results: list[dict], printed: bool) -> list[StepRecord]:
    steps = []
    for seq, result in enumerate(results):
        logs = f"Execution logs:\n{result!r}\nLast output from code snippet:\nNone" if printed else ""
        record = StepRecord(id=f"r:{seq}", bank="b", run_id="r", kind="action", seq=seq,
                            code='print(check_loan("reader"))' if printed else 'r = check_loan("reader")',
                            observations=logs)
        if not printed:
            record.tool_results = [ToolResultRecord(name="check_loan", specimen=specimen(result))]
        steps.append(record)
    return steps


RESULTS = [_loan("yes", "gold", True, ["late", "ok", "ok"]), _loan("no", "basic", False, ["ok", "ok"]),
           _loan("yes", "gold", True, ["ok", "late", "late", "late"])]


@pytest.mark.parametrize("printed", [False, True])
def test_an_answer_or_enum_one_result_holds_is_never_kept_nor_counted(printed: bool) -> None:
    (shape,) = shapes.extract(view(_steps(RESULTS, printed), tools=TOOLS), "")
    assert shape.shape == ("{'approved': str, 'tier': str, 'renewable': bool (true in 2 of 3 results seen), "
                           "'loans': [{'state': str ('late' | 'ok'), 'overdue': bool (true in some records, false in "
                           "others)}, ...]}")
    assert "yes" not in shape.text and "gold" not in shape.text and "basic" not in shape.text
    # each result alone is the same fact, whatever its answer, tier or flag held
    alone = [shapes.extract(view(_steps([result], printed), tools=TOOLS), "")[0] for result in RESULTS]
    assert {one.fingerprint for one in alone} == {shape.fingerprint}


@pytest.mark.parametrize(("kept", "read"), [
    ({"approved": {"~": "str", "values": ["yes"]}}, "{'approved': str}"),  # one result's words: its value
    ({"renewable": {"~": "bool", "values": [False, True]}}, "{'renewable': bool}"),  # one result, both values?
    ({"loans": [{"state": {"~": "str", "values": ["ok"], "true": 7, "false": 2}}]}, "[{'state': str ('ok')}, ...]"),
    ({"loans": [{"overdue": {"~": "bool", "values": [True], "true": 7}}]}, "[{'overdue': bool (true in every record"),
])
def test_a_specimen_that_crossed_redis_keeps_no_value_beyond_the_rule_for_booleans(kept: dict, read: str) -> None:
    """A specimen comes from the agent's process: a result's own words or a flag holding both values in one result
    are no field's shared words or flag's values, and no count rides along with a leaf."""
    described = shapes.describe(walk.structure(kept, kept=True))
    assert read in described and "7" not in described and "yes" not in described


def test_a_flag_holding_a_string_leaves_no_shape() -> None:
    record = StepRecord(id="r:0", bank="b", run_id="r", kind="action", seq=0, code='r = check_loan("reader")',
                        tool_results=[ToolResultRecord(name="check_loan", specimen={
                            "approved": {"~": "bool", "values": ["yes"]}, "tier": ""})])
    assert shapes.extract(view([record], tools=TOOLS), "") == []


def test_the_words_a_field_of_records_shared_are_no_part_of_the_fact_or_the_tools_structure() -> None:
    """Loans that were all ``ok`` this time are the same result's form as loans ``late`` or ``ok``: one fact, its
    words those of both runs (none once they are more than a few), and no other structure of the tool."""
    some, all_ok = _loan("yes", "gold", True, ["late", "ok", "ok"]), _loan("no", "basic", False, ["ok", "ok"])
    runs = [view(_steps([result], False), tools=TOOLS) for result in (some, all_ok)]
    first, second = (shapes.extract(run, "")[0] for run in runs)
    assert "'state': str ('ok')" in second.shape and first.fingerprint == second.fingerprint
    assert len({fingerprint.shapes_of(run)["check_loan"] for run in runs}) == 1
    assert "'state': str ('late' | 'ok')" in shapes.describe(walk.merged(second.structure, first.structure))
    many = [_loan("yes", "gold", True, [word, word]) for word in ("a", "b", "c", "d", "e", "f")]
    found = [shapes.extract(view(_steps([result], False), tools=TOOLS), "")[0].structure for result in many]
    together = found[0]
    for other in found[1:]:
        together = walk.merged(together, other)
    assert "'state': str," in shapes.describe(together)  # six words: no longer a few shared ones
