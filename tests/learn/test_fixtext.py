"""What an observed fix means for another task: its values put in, a value's corrected form carried over to a new
task's values, and how the builder gives it."""

from __future__ import annotations

import time

import pytest

from lessonbank.core.models import Lesson
from lessonbank.instructions import format_lessons
from lessonbank.learn import adapt, fixtext, render
from lessonbank.learn.fixtext import payload
from tests.learn.runs import fix_lesson

FAILED = 'w = get_weather(city="Lyon", date="2024-01-02")'
FIXED = 'w = get_weather(city="Lyon", date="02.01.2024")'
LYON = "What was the highest temperature in Lyon on 2024-01-02?"
PORTO = "What was the highest temperature in Porto on 2024-09-15?"


@pytest.mark.parametrize(("old", "new", "task", "carried"), [
    ("2024-01-02", "02.01.2024", "Highest temperature in Porto on 2024-09-15?", [("2024-09-15", "15.09.2024")]),
    ("2024-01-02", "02.01.2024", "Compare 2024-09-15 with 2023-12-31.",
     [("2024-09-15", "15.09.2024"), ("2023-12-31", "31.12.2023")]),
    ("2024-01-02", "2024/01/02", "Orders on 2024-09-15", [("2024-09-15", "2024/09/15")]),  # separators only
    ("03/17/2024", "2024-03-17", "Sales on 05/06/2024.", [("05/06/2024", "2024-05-06")]),
    ("14:05", "14.05", "Trains after 09:30", [("09:30", "09.30")]),
    ("2024-01-02", "02.01.2024", "Ghent, 2024-09-22: what was the day's highest temperature?",
     [("2024-09-22", "22.09.2024")]),  # a colon after a value ends it (a reworded task, benchmark seed 5)
    ("14:05", "14.05", "Trains at 09:30:15", []),  # but one that goes on does not: part of a longer value
    ("2024-01-02", "02.01.2024", "Highest temperature in Porto on 15 Sep 2024?", []),  # another form: nothing
    ("2024-01-02", "02.01.2024", "Build 12024-09-151 is out", []),  # part of a longer value
    ("2024-02-02", "02.02.2024", "Weather on 2024-09-15", []),  # ambiguous: which 02 went where
    ("Lyon", "lyon", "Weather in Porto", []),  # not a reordering of parts
    ("2024-01-02", "02.01.2024", "Weather on 2024-01-02", []),  # the very value that failed: the fix says it
])
def test_a_reformatted_value_is_carried_over_to_the_task_values_of_its_old_form(
    old: str, new: str, task: str, carried: list[tuple[str, str]]
) -> None:
    assert fixtext.carry_over(old, new, task) == carried


def test_the_instructions_give_a_fix_with_this_tasks_values_placed_by_role_and_form() -> None:
    fix = fix_lesson(payload(FAILED, "ValueError", FIXED), task=LYON)
    assert fix.text.startswith('Pass `date` like "02.01.2024", not like "2024-01-02": `w = get_weather(')
    right = fix.model_copy(update={"verified": True})
    text, given = format_lessons([right], task=PORTO)
    assert given == [right]
    # the same question from a run judged right: the line to write, without the failing line (given both, small
    # models copied the failing one)
    assert ('- For this task: Write `w = get_weather(city="Porto", date="15.09.2024")`: pass `date` like '
            '"15.09.2024"; written any other way it failed with ValueError.') in text
    assert "02.01.2024" not in text and "Lyon" not in text and "2024-01-02" not in text
    # from a run not judged right: the call that ran, said to be an example to adapt
    unsure, _ = format_lessons([fix], task=PORTO)
    assert (f'- {render.ADAPT_UNVERIFIED}: write `result = get_weather(city="Porto", date="15.09.2024")`: pass '
            '`date` like "15.09.2024"; written any other way it failed with ValueError.') in unsure
    assert "For this task" not in unsure and "Lyon" not in unsure
    # reworded: another question; the values are still placed, by form and by the word before them
    reworded, _ = format_lessons([right], task="Porto, 2024-09-15: the day's highest temperature?")
    assert 'date="15.09.2024"' in reworded and "Lyon" not in reworded and "For this task" not in reworded
    plain, _ = format_lessons([right])
    assert "For this task" not in plain
    distilled = Lesson.new("b", "fact", fix.text)  # the same words from the distiller carry nothing over
    assert "For this task" not in format_lessons([distilled], task=PORTO)[0]


def test_a_fix_whose_changed_value_cannot_be_placed_is_given_with_its_form_not_its_value() -> None:
    fix = payload(FAILED, "ValueError", FIXED)
    assert adapt.fix_for(fix, LYON, "Weather in New York yesterday?") is None  # "New" alone is no city
    lesson = fix_lesson(fix, task=LYON)
    text, _ = format_lessons([lesson], task="Weather in New York yesterday?")
    assert 'date=<date>)`: pass `date` written like "9.9.9", not like "9-9-9"' in text
    assert "For this task" not in text and "Lyon" not in text and "2024" not in text


def test_a_fix_to_write_names_the_line_and_what_changed_but_no_failing_value() -> None:
    assert render.to_write(payload(FAILED, "ValueError", FIXED)) == (
        f'Write `{FIXED}`: pass `date` like "02.01.2024"; written any other way it failed with ValueError.')
    two = payload('w = f(a="1-2", b="x")', "KeyError", 'w = f(a="2.1", b="y")')
    assert render.to_write(two) == (  # the failing line is not shown, so the text does not refer to it
        'Write `w = f(a="2.1", b="y")`; written otherwise, the line failed with KeyError.')
    assert [change.argument for change in two.changed or []] == ["a", "b"]
    key = payload("n = len(r['Items'])", "KeyError", "n = len(r['items'])")
    assert render.to_write(key) == ("Write `n = len(r['items'])`: the key is \"items\"; written any other way it "
                                    "failed with KeyError.")


def test_carrying_over_is_linear_on_hostile_tasks() -> None:
    old = "a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.1"
    started = time.process_time()
    fixtext.carry_over(old, "1.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a", "a." * 200_000 + "!")
    fixtext.carry_over("2024-01-02", "02.01.2024", "2024-" * 100_000)
    assert time.process_time() - started < 2.0


def test_subject_names_the_function_keyword_and_corrected_form() -> None:
    from lessonbank.learn.fixtext import subject

    fix = payload('w = api.get_weather(city="Lyon", date="2024-01-02")', "ValueError",
                  'w = api.get_weather(city="Lyon", date="02.01.2024")')
    assert subject(fix) == ("api.get_weather", "date", "9.9.9")
    both = payload('w = get_weather(city="lyon", date="2024-01-02")', "ValueError",
                   'w = get_weather(city="Lyon", date="02.01.2024")')
    assert subject(both) is None  # two values changed: no one subject
    assert subject(payload("x = f()", "KeyError", "x = g()")) is None  # no value changed


INVOICE = "Using get_invoice, what is the total of invoice {} in euros? Answer with the number only."


def test_a_key_fix_is_given_as_the_line_to_write_with_this_tasks_values() -> None:
    key_fix = payload('total = get_invoice(invoice_id="INV-6222")["amount"]', "InterpreterError",
                      'lines = get_invoice(invoice_id="INV-6222")["lines"]')
    solved, task = INVOICE.format("INV-6222"), INVOICE.format("INV-6810")
    fix = fix_lesson(key_fix, task=solved).model_copy(update={"verified": True})
    block, given = format_lessons([fix], task=task)
    assert given == [fix]
    assert ('- For this task: Write `lines = get_invoice(invoice_id="INV-6810")["lines"]`: the key is "lines"; '
            "written any other way it failed with InterpreterError.") in block
    assert '"amount"' not in block and "INV-6222" not in block
    # in other words (another question), the id is placed by its form all the same; the key read from ``result``
    other, _ = format_lessons([fix], task="Invoice INV-6810: what does it come to in euros?")
    assert ("`result = get_invoice(invoice_id=\"INV-6810\")`, then read `result['lines']`: the key is \"lines\"; "
            "written any other way it failed with InterpreterError.") in other
    assert "INV-6222" not in other and "amount" not in other
    assert f"- {render.fix(key_fix)} (" in format_lessons([fix])[0]  # no task: as kept


def test_values_of_a_fix_are_put_in_whatever_the_line_holds_of_its_task() -> None:
    solved = "Using search_catalog, how many 'lamp' products cost less than 16 euros? Answer with the number only."
    task = solved.replace("lamp", "chair").replace("16", "21")
    extra = payload('r = search_catalog(query="lamp", limit=50)', "TypeError", 'r = search_catalog(query="lamp")')
    placed = adapt.fix_for(extra, solved, task)
    assert placed is not None and placed[1] and placed[0].fixed == 'r = search_catalog(query="chair")'
    weather = "What was the highest temperature in Lyon on 2024-06-08?"
    keyed = payload("t = get_weather(city='Lyon', date='08.06.2024')['max_temp']", "InterpreterError",
                    "t = get_weather(city='Lyon', date='08.06.2024')['records']")
    # a value the line wrote its own way comes the same way: never the new city with the old date
    mine = adapt.fix_for(keyed, weather, "What was the highest temperature in Porto on 2024-09-15?")
    assert mine is not None and mine[0].fixed == "t = get_weather(city='Porto', date='15.09.2024')['records']"
    plain = payload("n = len(r['items'])", "InterpreterError", "n = len(r['data']['items'])")
    assert adapt.fix_for(plain, solved, task) == (plain, True)  # nothing of its task: as it is
