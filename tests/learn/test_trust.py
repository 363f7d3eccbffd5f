"""Trust: what vouches for a lesson, when two runs agree, and which answers are never a success."""

from __future__ import annotations

import pytest

from lessonbank.core.models import RELEASED_BY_USER, Lesson, Provenance, Recipe, StepRecord, Taint
from lessonbank.learn import trust
from lessonbank.learn.adapters import read_run
from lessonbank.learn.view import RunView

TASK = "What is the total of invoice INV-7 in euros?"
INVOICE = "Execution logs:\n{'lines': [{'qty': 2, 'unit_price_cents': 1250}, {'qty': 1, 'unit_price_cents': 990}]}"


def answered(code: str, answer: str, observation: str = INVOICE) -> RunView:
    steps = [StepRecord(id="r:0", bank="b", run_id="r", kind="action", seq=0, code="inv = get_invoice('INV-7')\n"
                        "print(inv)", observations=observation),
             StepRecord(id="r:1", bank="b", run_id="r", kind="action", seq=1, code=code, is_final=True,
                        action_output=answer),
             StepRecord(id="r:2", bank="b", run_id="r", kind="final", seq=2, action_output=answer, is_final=True)]
    return read_run(steps, TASK, "success", ["get_invoice", "final_answer"], "r")


@pytest.mark.parametrize(("code", "answer", "problem"), [
    ("final_answer(None)", "None", "it answered 'None'"),
    ("final_answer('')", "", "it answered ''"),
    ("final_answer(61.37)", "61.37", "whose 61.37 nothing it observed holds"),  # made up
    ("final_answer('Graz')", "Graz", "which nothing it observed holds"),
    ("final_answer(1250)", "1250", ""),  # copied from what it read
    ("total = sum(l['qty'] * l['unit_price_cents'] for l in inv['lines']) / 100\nfinal_answer(total)", "34.9", ""),
])
def test_an_answer_that_is_none_empty_or_made_up_is_no_success(code: str, answer: str, problem: str) -> None:
    found = trust.answer_problem(answered(code, answer))
    assert (problem in found) if problem else found == ""


def test_a_run_says_what_its_verdict_lets_it_say() -> None:
    by_check = trust.testimony(TASK, "34.9", "success", "success", "check")
    assert (by_check.vouched, by_check.checked, by_check.witness) == (True, True, False)
    at_limit = trust.testimony(TASK, "34.9", "max_steps", "success", "check")
    assert (at_limit.vouched, at_limit.for_recipe().vouched) == (False, True)  # its code computed the right answer
    by_signals = trust.testimony(TASK, "34.9", "success", "success", "signals")
    assert (by_signals.vouched, by_signals.witness) == (False, True)
    assert not trust.testimony(TASK, "34.9", "error", "failure", "signals").witness
    assert trust.testimony(TASK, "34.90", "success", "success", "signals").answer == by_signals.answer
    shouted = trust.testimony(f"  {TASK.upper()} ", "34.9", "success", "success", "signals")
    assert shouted.question == by_signals.question


@pytest.mark.parametrize(("outcome", "verdict", "source", "vouched"), [
    ("success", "failure", "check", True),  # a check that failed is a trusted verdict on the run
    ("max_steps", "failure", "check", True),  # ... stopped at its step limit or not
    ("max_steps", "failure", "user", True),
    ("max_steps", "success", "check", True),
    ("max_steps", "failure", "signals", False),  # a run that merely stopped at its step limit vouches for nothing
    ("error", "failure", "signals", False),
    ("success", "success", "signals", False),
    ("success", "failure", "llm", False),
    ("unknown", "unknown", "none", False),
])
def test_a_tools_own_error_is_vouched_for_by_a_trusted_verdict_either_way(outcome: str, verdict: str, source: str,
                                                                         vouched: bool) -> None:
    said = trust.testimony(TASK, "0", outcome, verdict, source)
    assert said.for_attested().vouched is vouched
    assert said.for_attested().witness == said.witness and said.vouched is (verdict == "success" and vouched
                                                                          and outcome != "max_steps")


def lesson(*entries: Provenance, **fields: object) -> Lesson:
    made = Lesson.new("b", "fact", "`get_invoice` gives prices in integer cents under 'unit_price_cents'.")
    return made.model_copy(update={"provenance": list(entries), "evidence": len(entries), **fields})


def witness(run_id: str, question: str = "q1", answer: str = "a1") -> Provenance:
    return Provenance(run_id=run_id, vouched=False, witness=True, question=question, answer=answer)


def test_one_run_by_its_own_signals_vouches_for_nothing_two_that_agree_do() -> None:
    assert not trust.eligible(lesson(witness("r1")))
    assert trust.eligible(lesson(witness("r1"), witness("r2")))
    assert trust.eligible(lesson(witness("r1", "q1"), witness("r2", "q2", "a2")))  # two questions about the tool
    assert trust.voucher(lesson(witness("r1"), witness("r2"))) == "2 runs that agreed"


def test_runs_of_one_question_that_answered_differently_do_not_agree() -> None:
    assert not trust.eligible(lesson(witness("r1", "q1", "a1"), witness("r2", "q1", "a2")))
    assert trust.eligible(lesson(witness("r1", "q1", "a1"), witness("r2", "q1", "a2"), witness("r3", "q3", "a3"),
                                 witness("r4", "q4", "a4")))


def test_failed_runs_are_no_witnesses() -> None:
    failed = [Provenance(run_id=f"f{i}", vouched=False, witness=False) for i in range(3)]
    assert not trust.eligible(lesson(*failed, failed_runs=3))
    assert not trust.eligible(lesson(*failed, witness("r1")))


def test_a_user_or_a_check_vouches_and_a_release_too() -> None:
    assert trust.eligible(lesson(Provenance(run_id="r1", vouched=True, witness=True)))
    assert trust.eligible(lesson(witness("r1"), origin="added"))
    assert trust.eligible(lesson(witness("r1"), status_cause="released", status_reason=RELEASED_BY_USER))
    assert trust.eligible(lesson(witness("r1"), helpful=1))


def test_held_taint_keeps_a_lesson_from_runs_until_a_user_releases_it() -> None:
    held = Taint(value="delete_all_orders()", kind="call", run_id="r1", step=0, held=True, reason="asked by a page")
    vouched = lesson(Provenance(run_id="r1", vouched=True, witness=True), taint=[held])
    assert not trust.eligible(vouched)
    assert trust.eligible(vouched.model_copy(update={"status_cause": "released", "status_reason": RELEASED_BY_USER}))


def test_lessons_written_before_runs_said_who_vouched_keep_their_rule() -> None:
    old = Provenance(run_id="r1")
    assert trust.eligible(lesson(old, Provenance(run_id="r2")))  # two runs, as before
    assert not trust.eligible(lesson(old))
    assert trust.eligible(lesson(old, verified=True))
    recipe = lesson(old, recipe=Recipe(code="final_answer(1)", checks=["outcome:signals"]))
    assert trust.eligible(recipe) and trust.voucher(recipe) == "signals"
